#!/usr/bin/python3
"""Runs the local benchmarks of Sluice and compares them with their targets.

Called by scripts/bench.sh, which documents the environment variables. Measurements:
  throughput  sluice run --threads 1 / 2 vs the PyTorch DataLoader (num_workers 0 / 2) on the
              same files and the same pipeline (bench/torch_baseline.py)
              targets: sluice(1)/torch(0) >= 3x, sluice(2)/sluice(1) >= 1.8x
  overhead    sluice run --threads 1 vs bench/plain_loop.cc (same ops, no engine)
              target: >= 0.90
  memory      peak RSS of sluice run over 10 vs 100 epochs of a small set
              target: difference < 5%
Every measurement runs `repeats` times, interleaved with the others so that a slow patch of
the machine hits all of them alike, and the median is reported. Results go to
bench/results/<name>.json.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, cwd=None):
    """Runs cmd, returns its stdout; exits with its stderr if it fails."""
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    if proc.returncode != 0:
        log(f"bench: command failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
        sys.exit(1)
    return proc.stdout


def ensure_data(sluice, folder, count, threads):
    marker = os.path.join(folder, f".complete-{count}")
    if os.path.exists(marker):
        log(f"bench: using the {count} images in {folder}/")
        return
    log(f"bench: generating {count} JPEGs (500x375, q90, 10 classes) in {folder}/")
    subprocess.run(["rm", "-rf", folder], check=True)
    run([sluice, "gen-data", "--kind", "jpeg", "--count", str(count), "--out", folder,
         "--width", "500", "--height", "375", "--quality", "90", "--classes", "10",
         "--seed", "1", "--threads", str(threads)])
    open(marker, "w").close()


def sluice_run(sluice, pipeline, files, threads, epochs=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sluice, "run", pipeline, "--files", files, "--threads", str(threads),
               "--json", out.name]
        if epochs is not None:
            cmd += ["--epochs", str(epochs)]
        run(cmd)
        with open(out.name) as f:
            return json.load(f)


def median(values):
    return statistics.median(values)


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/loadavg") as f:
            load = [float(x) for x in f.read().split()[:3]]
    except OSError:
        load = None
    # The load average at the end says how much else the machine was doing meanwhile.
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "loadavg_1_5_15min": load,
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


def write_result(results_dir, name, payload):
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")
    return path


def verdict(value, target, higher_is_better=True):
    met = value >= target if higher_is_better else value < target
    return "ok" if met else "MISSED"


def main():
    p = argparse.ArgumentParser(description="Sluice local benchmarks")
    p.add_argument("--sluice", required=True)
    p.add_argument("--plain-loop", required=True)
    p.add_argument("--pipeline", required=True)
    p.add_argument("--data", default="bench-data")
    p.add_argument("--count", type=int, default=1600)
    p.add_argument("--small-count", type=int, default=128)
    p.add_argument("--torch-batches", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--results", required=True)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--skip-torch", action="store_true")
    args = p.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    torch_script = os.path.join(here, "torch_baseline.py")
    # Results name the pipeline relative to the repository, so they read the same anywhere.
    pipeline_name = os.path.relpath(os.path.abspath(args.pipeline), os.path.dirname(here))
    images = os.path.join(args.data, "images")
    small = os.path.join(args.data, "small")
    ensure_data(args.sluice, images, args.count, os.cpu_count() or 1)
    ensure_data(args.sluice, small, args.small_count, os.cpu_count() or 1)
    glob_all = os.path.join(images, "**", "*.jpg")
    glob_small = os.path.join(small, "**", "*.jpg")
    if (args.torch_batches + 1) * 64 > args.count:
        sys.exit("bench: --count too small for the torch warm-up + timed batches")

    runs = {k: [] for k in ["torch0", "torch2", "sluice1", "sluice2", "plain",
                            "rss10", "rss100"]}
    started = time.time()
    for r in range(args.repeats):
        log(f"bench: round {r + 1}/{args.repeats}")
        if not args.skip_torch:
            for workers in (0, 2):
                out = run([args.python, torch_script, "--files", glob_all, "--num-workers",
                           str(workers), "--batches", str(args.torch_batches)])
                runs[f"torch{workers}"].append(json.loads(out.strip().splitlines()[-1]))
        for threads in (1, 2):
            runs[f"sluice{threads}"].append(
                sluice_run(args.sluice, args.pipeline, glob_all, threads))
        out = run([args.plain_loop, args.pipeline, "--files", glob_all])
        runs["plain"].append(json.loads(out.strip().splitlines()[-1]))
        for epochs in (10, 100):
            runs[f"rss{epochs}"].append(
                sluice_run(args.sluice, args.pipeline, glob_small, 2, epochs=epochs))

    def rates(key):
        return [x["samples_per_s"] for x in runs[key]]

    s1, s2, plain = median(rates("sluice1")), median(rates("sluice2")), median(rates("plain"))
    m = machine()
    lines = []
    lines.append(f"machine: {m['cpus']} CPUs ({m['cpu_model']}), load average "
                 f"{m['loadavg_1_5_15min']}; medians of {args.repeats} runs")
    lines.append(f"  sluice run --threads 1   {s1:9.1f} samples/s  {fmt_runs(rates('sluice1'))}")
    lines.append(f"  sluice run --threads 2   {s2:9.1f} samples/s  {fmt_runs(rates('sluice2'))}")
    lines.append(f"  plain loop (no engine)   {plain:9.1f} samples/s  {fmt_runs(rates('plain'))}")
    throughput = {"machine": m, "pipeline": pipeline_name, "files": glob_all,
                  "note": "sluice wall time includes pipeline start-up and the first batch; "
                          "torch excludes one warm-up batch",
                  "images": args.count, "repeats": args.repeats,
                  "sluice_threads1": {"median_samples_per_s": s1, "runs": rates("sluice1")},
                  "sluice_threads2": {"median_samples_per_s": s2, "runs": rates("sluice2")},
                  "scaling_2_over_1": {"value": s2 / s1, "target": 1.8}}
    if not args.skip_torch:
        t0, t2 = median(rates("torch0")), median(rates("torch2"))
        lines.append(f"  torch num_workers=0      {t0:9.1f} samples/s  {fmt_runs(rates('torch0'))}")
        lines.append(f"  torch num_workers=2      {t2:9.1f} samples/s  {fmt_runs(rates('torch2'))}")
        throughput.update({
            "torch_workers0": {"median_samples_per_s": t0, "runs": rates("torch0"),
                               "timed_batches": args.torch_batches},
            "torch_workers2": {"median_samples_per_s": t2, "runs": rates("torch2"),
                               "timed_batches": args.torch_batches},
            "sluice1_over_torch0": {"value": s1 / t0, "target": 3.0},
            "sluice2_over_torch2": {"value": s2 / t2, "target": None},
        })
        lines.append(f"ratio sluice(1 thread)/torch(num_workers=0) = {s1 / t0:5.2f}x  "
                     f"(target >= 3x: {verdict(s1 / t0, 3.0)})")
        lines.append(f"ratio sluice(2 threads)/torch(num_workers=2) = {s2 / t2:5.2f}x")
    lines.append(f"ratio scaling sluice(2)/sluice(1) = {s2 / s1:5.2f}x  "
                 f"(target >= 1.8x: {verdict(s2 / s1, 1.8)})")
    lines.append(f"ratio engine overhead sluice(1)/plain loop = {s1 / plain:5.3f}  "
                 f"(target >= 0.90: {verdict(s1 / plain, 0.90)})")
    overhead = {"machine": m, "pipeline": pipeline_name, "files": glob_all,
                "sluice_threads1": {"median_samples_per_s": s1, "runs": rates("sluice1")},
                "plain_loop": {"median_samples_per_s": plain, "runs": rates("plain"),
                               "cpu_ms_per_sample": [x["cpu_ms_per_sample"]
                                                     for x in runs["plain"]]},
                "sluice1_over_plain": {"value": s1 / plain, "target": 0.90}}

    rss10 = median([x["peak_rss_bytes"] for x in runs["rss10"]])
    rss100 = median([x["peak_rss_bytes"] for x in runs["rss100"]])
    growth = (rss100 - rss10) / rss10
    lines.append(f"memory: peak RSS {rss10 / 2**20:.1f} MiB (10 epochs) vs "
                 f"{rss100 / 2**20:.1f} MiB (100 epochs) of {args.small_count} images: "
                 f"{100 * growth:+.2f}%  (target < 5%: {verdict(abs(growth), 0.05, False)})")
    memory = {"machine": m, "pipeline": pipeline_name, "files": glob_small,
              "images": args.small_count, "threads": 2,
              "epochs10_peak_rss_bytes": {"median": rss10,
                                          "runs": [x["peak_rss_bytes"] for x in runs["rss10"]]},
              "epochs100_peak_rss_bytes": {"median": rss100,
                                           "runs": [x["peak_rss_bytes"] for x in runs["rss100"]]},
              "growth": {"value": growth, "target": 0.05}}

    written = [write_result(args.results, "throughput", throughput),
               write_result(args.results, "engine_overhead", overhead),
               write_result(args.results, "memory", memory)]
    print("\n".join(lines))
    print(f"results: {', '.join(written)}  ({time.time() - started:.0f} s)")


def fmt_runs(values):
    return "[" + ", ".join(f"{v:.1f}" for v in values) + "]"


if __name__ == "__main__":
    main()
