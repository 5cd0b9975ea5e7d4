#!/usr/bin/python3
"""Offloading benchmarks on one machine: a trainer and one `sluice worker` on loopback, each
pinned to its own core (taskset), on the standard pipeline at its last element-wise cut.

  all-local     sluice train --policy none --threads 1 (trainer on core 0)
  remote-only   --policy fixed:cut=5,ratio=1.0 (worker on core 1, --threads 1)
  mixed         --policy fixed:cut=5,ratio=R for R in --ratios; the best is reported

Targets (docs/BENCHMARKS.md): remote-only >= 90% of all-local; best mixed >= 1.8x
all-local; the trainer's CPU per offloaded sample in remote-only mode (receiving, merging,
batching) <= 5% of the CPU per sample of all-local processing.
The accelerator is emulated with 0 ms steps, so every rate is the pipeline's own.
Usage: bench/offload_bench.py --sluice build/bin/sluice --files 'bench-data/images/**/*.jpg'
"""

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINE = os.path.join(ROOT, "examples", "pipelines", "imagenet_train.yaml")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(sluice, port):
    proc = subprocess.Popen(["taskset", "-c", "1", sluice, "worker", "--listen",
                             f"127.0.0.1:{port}", "--threads", "1", "--data-root", os.getcwd()],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "listening on" in line:
            return proc
        if proc.poll() is not None:
            break
    proc.kill()
    sys.exit(f"offload_bench: worker did not start: {line}")


def train(sluice, files, steps, policy, port=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = ["taskset", "-c", "0", sluice, "train", PIPELINE, "--files", files,
               "--accelerator-ms", "0", "--steps", str(steps), "--threads", "1",
               "--policy", policy, "--json", out.name]
        if port:
            cmd += ["--workers", f"127.0.0.1:{port}"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.exit(f"offload_bench: {' '.join(cmd)} failed:\n{proc.stderr}")
        result = json.load(open(out.name))
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        samples = result["samples_per_s"] * result["wall_s"]
        return {"samples_per_s": result["samples_per_s"], "wall_s": result["wall_s"],
                "trainer_cpu_s": cpu, "trainer_cpu_ms_per_sample": 1e3 * cpu / max(samples, 1),
                "places": result.get("places")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin", "sluice"))
    ap.add_argument("--files", required=True)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ratios", default="0.4,0.5,0.6")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "offload.json"))
    args = ap.parse_args()
    ratios = [float(r) for r in args.ratios.split(",")]

    port = free_port()
    worker = start_worker(args.sluice, port)
    runs = {"local": [], "remote": []}
    for r in ratios:
        runs[f"mixed_{r}"] = []
    try:
        for i in range(args.repeats):
            print(f"offload_bench: round {i + 1}/{args.repeats}", file=sys.stderr, flush=True)
            runs["local"].append(train(args.sluice, args.files, args.steps, "none"))
            runs["remote"].append(train(args.sluice, args.files, args.steps,
                                        "fixed:cut=5,ratio=1.0", port))
            for r in ratios:
                runs[f"mixed_{r}"].append(train(args.sluice, args.files, args.steps,
                                                f"fixed:cut=5,ratio={r}", port))
    finally:
        worker.terminate()
        worker.wait(timeout=10)

    def med(key, field="samples_per_s"):
        return statistics.median(x[field] for x in runs[key])

    local = med("local")
    remote = med("remote")
    best_ratio = max(ratios, key=lambda r: med(f"mixed_{r}"))
    mixed = med(f"mixed_{best_ratio}")
    local_cpu = med("local", "trainer_cpu_ms_per_sample")
    remote_cpu = med("remote", "trainer_cpu_ms_per_sample")
    summary = {
        "machine": f"{os.cpu_count()} CPUs; trainer pinned to core 0, worker to core 1",
        "repeats": args.repeats, "steps": args.steps, "batch": 64,
        "local_samples_per_s": local, "remote_only_samples_per_s": remote,
        "remote_over_local": remote / local,
        "best_mixed_ratio": best_ratio, "best_mixed_samples_per_s": mixed,
        "mixed_over_local": mixed / local,
        "local_trainer_cpu_ms_per_sample": local_cpu,
        "remote_trainer_cpu_ms_per_sample": remote_cpu,
        "receive_cost_share": remote_cpu / local_cpu,
        "runs": runs,
    }
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"  all-local (1 core)             {local:8.1f} samples/s, "
          f"trainer CPU {local_cpu:.3f} ms/sample")
    print(f"  remote-only (worker 1 core)    {remote:8.1f} samples/s, "
          f"trainer CPU {remote_cpu:.3f} ms/sample")
    print(f"  best mixed (ratio {best_ratio})       {mixed:8.1f} samples/s")
    print(f"ratio remote-only/all-local = {remote / local:.3f}  (target >= 0.90)")
    print(f"ratio mixed/all-local       = {mixed / local:.2f}x  (target >= 1.8x)")
    print(f"receive cost: trainer CPU per offloaded sample / local CPU per sample = "
          f"{remote_cpu / local_cpu:.3f}  (target <= 0.05; includes merge and batching)")
    print(f"results: {args.json}")


if __name__ == "__main__":
    main()
