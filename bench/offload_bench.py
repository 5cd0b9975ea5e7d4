#!/usr/bin/python3
"""Offloading benchmarks on one machine: a trainer and one `sluice worker` on loopback, each
pinned to its own core (taskset), on the standard pipeline at its last element-wise cut.

  all-local     sluice train --policy none --threads 1 (trainer on core 0)
  remote-only   --policy fixed:cut=C,ratio=1.0 (worker on core 1, --threads 1)
  mixed         --policy fixed:cut=C,ratio=R for R in --ratios; the best is reported
                (with --spill workers: fixed:cut=C,ratio=R,spill=workers)
for every cut C in --cuts (default 5). The files repeat (--epochs -1) until --steps batches.
Rates are steady-state (after the warm-up steps).

Targets (docs/BENCHMARKS.md): remote-only >= 90% of all-local; best mixed >= 1.8x
all-local; the trainer's CPU to receive one offloaded sample (decode the wire format, hand
it to the suffix: the loader's decode_cpu_ns) <= 5% of the CPU per sample of all-local
processing. Also reported: the CPU of taking messages off the connection (read_cpu_ns)
and all trainer CPU per offloaded sample (rusage, batching included).
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
               "--epochs", "-1", "--policy", policy, "--json", out.name]
        if port:
            cmd += ["--workers", f"127.0.0.1:{port}"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            sys.exit(f"offload_bench: {' '.join(cmd)} failed:\n{proc.stderr}")
        result = json.load(open(out.name))
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        samples = result["samples"]
        workers = (result.get("places") or {}).get("workers", [])
        remote_samples = sum(w.get("samples", 0) for w in workers)
        decode_ns = sum(w.get("decode_cpu_ns", 0) for w in workers)
        read_ns = sum(w.get("read_cpu_ns", 0) for w in workers)
        steady = result.get("steady", result)
        return {"samples_per_s": steady["samples_per_s"], "wall_s": result["wall_s"],
                "run_samples_per_s": result["samples_per_s"],
                "trainer_cpu_s": cpu, "trainer_cpu_ms_per_sample": 1e3 * cpu / max(samples, 1),
                "decode_ms_per_remote_sample": 1e-6 * decode_ns / max(remote_samples, 1),
                "read_ms_per_remote_sample": 1e-6 * read_ns / max(remote_samples, 1),
                "places": result.get("places")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin", "sluice"))
    ap.add_argument("--files", required=True)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ratios", default="0.5,0.6,0.7")
    ap.add_argument("--cuts", default="5",
                    help="cuts to measure (5: after normalize, the last element-wise cut; "
                         "4: before normalize, uint8 on the wire; batch)")
    ap.add_argument("--spill", default="all", choices=["all", "workers"],
                    help="the mixed runs' spill key: workers keeps the trainer to its share")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "offload.json"))
    args = ap.parse_args()
    spill = "" if args.spill == "all" else ",spill=workers"
    ratios = [float(r) for r in args.ratios.split(",")]

    cuts = args.cuts.split(",")
    port = free_port()
    worker = start_worker(args.sluice, port)
    runs = {"local": []}
    for c in cuts:
        runs[f"remote_{c}"] = []
        for r in ratios:
            runs[f"mixed_{c}_{r}"] = []
    try:
        for i in range(args.repeats):
            print(f"offload_bench: round {i + 1}/{args.repeats}", file=sys.stderr, flush=True)
            runs["local"].append(train(args.sluice, args.files, args.steps, "none"))
            for c in cuts:
                runs[f"remote_{c}"].append(train(args.sluice, args.files, args.steps,
                                                 f"fixed:cut={c},ratio=1.0", port))
                for r in ratios:
                    runs[f"mixed_{c}_{r}"].append(train(args.sluice, args.files, args.steps,
                                                        f"fixed:cut={c},ratio={r}{spill}", port))
    finally:
        worker.terminate()
        worker.wait(timeout=10)

    def med(key, field="samples_per_s"):
        return statistics.median(x[field] for x in runs[key])

    local = med("local")
    local_cpu = med("local", "trainer_cpu_ms_per_sample")
    per_cut = {}
    for c in cuts:
        remote = med(f"remote_{c}")
        best_ratio = max(ratios, key=lambda r: med(f"mixed_{c}_{r}"))
        mixed = med(f"mixed_{c}_{best_ratio}")
        remote_cpu = med(f"remote_{c}", "trainer_cpu_ms_per_sample")
        decode = med(f"remote_{c}", "decode_ms_per_remote_sample")
        read = med(f"remote_{c}", "read_ms_per_remote_sample")
        per_cut[c] = {
            "remote_only_samples_per_s": remote, "remote_over_local": remote / local,
            "best_mixed_ratio": best_ratio, "best_mixed_samples_per_s": mixed,
            "mixed_over_local": mixed / local,
            "remote_trainer_cpu_ms_per_sample": remote_cpu,
            "trainer_cpu_share": remote_cpu / local_cpu,
            "decode_ms_per_sample": decode, "decode_share": decode / local_cpu,
            "read_ms_per_sample": read, "read_share": read / local_cpu,
        }
    summary = {
        "machine": f"{os.cpu_count()} CPUs; trainer pinned to core 0, worker to core 1",
        "repeats": args.repeats, "steps": args.steps, "batch": 64,
        "local_samples_per_s": local, "local_trainer_cpu_ms_per_sample": local_cpu,
        "cuts": per_cut, "runs": runs, "spill": args.spill,
    }
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"  all-local (1 core)        {local:8.1f} samples/s, trainer CPU {local_cpu:.3f} ms/sample")
    for c, m in per_cut.items():
        print(f"cut {c}:")
        print(f"  remote-only (worker 1 core) {m['remote_only_samples_per_s']:8.1f} samples/s, "
              f"trainer CPU {m['remote_trainer_cpu_ms_per_sample']:.3f} ms/sample")
        print(f"  best mixed (ratio {m['best_mixed_ratio']})     "
              f"{m['best_mixed_samples_per_s']:8.1f} samples/s")
        print(f"  remote-only / all-local = {m['remote_over_local']:.3f}  (target >= 0.90)")
        print(f"  best mixed / all-local  = {m['mixed_over_local']:.2f}x  (target >= 1.8x)")
        print(f"  receiving one sample (decode the wire format, hand it on) / local CPU per "
              f"sample = {m['decode_share']:.4f}  (target <= 0.05)")
        print(f"  + taking it off the connection (gRPC, copy into the buffer) = "
              f"{m['read_share']:.3f}; all trainer CPU per offloaded sample (incl. "
              f"batching) / local = {m['trainer_cpu_share']:.3f}")
    print(f"results: {args.json}")


if __name__ == "__main__":
    main()
