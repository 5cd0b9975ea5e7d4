#!/usr/bin/python3
"""Throughput and memory of sluice.torch.Loader against `sluice run` and PyTorch's DataLoader.

The standard pipeline (examples/pipelines/imagenet_train.yaml: read, decode, random resized
crop to 224, flip, normalize, batches of 64) over the same files, at 1 and 2 threads (Sluice)
or worker processes (DataLoader, via bench/torch_baseline.py). Each measurement runs in its
own process: one warm-up batch, then --batches timed batches. The peak RSS is the peak of
the sum of the resident sets of the measured process and its children (DataLoader workers),
sampled every 20 ms.

    build/bin/sluice gen-data --kind jpeg --count 2000 --out bench-data/imagenet
    /usr/bin/python3 bench/python_bench.py --files 'bench-data/imagenet/**/*.jpg' > out.json

Prints one JSON object on stdout: {"config": ..., "results": [{"system", "threads",
"samples_per_s", "samples", "wall_s", "peak_rss_bytes"}, ...]}; a human line per result on
stderr. Environment: SLUICE_BUILD_DIR (default build/) for bin/sluice and python/sluice.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "examples" / "pipelines" / "imagenet_train.yaml"


def build_dir():
    return pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build")).resolve()


def tree_rss_bytes(pid):
    """Sum of VmRSS of `pid` and its descendants (0 once gone)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def measure(cmd, env=None):
    """Runs `cmd`, sampling its process tree's RSS; returns (stdout, peak RSS bytes)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_bytes(proc.pid))
            time.sleep(0.02)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"python_bench: {' '.join(map(str, cmd))} failed:\n{err}")
    return out, peak[0]


def run_cli(args, threads):
    cmd = [str(build_dir() / "bin" / "sluice"), "run", str(PIPELINE), "--files", args.files,
           "--threads", str(threads), "--steps", str(args.batches + 1), "--json", "-"]
    out, peak = measure(cmd)
    r = json.loads(out[out.index("{"):])
    return {"samples_per_s": r["samples_per_s"], "samples": r.get("samples"),
            "wall_s": r.get("wall_s"), "peak_rss_bytes": peak,
            "note": "includes the first batch (sluice run times the whole run)"}


def run_loader_child(args):
    """In the child: time sluice.torch.Loader."""
    sys.path.insert(0, str(build_dir() / "python"))
    import sluice
    import sluice.torch
    spec = sluice.load(str(PIPELINE))
    d = spec.to_dict()
    d["source"]["files"] = args.files
    loader = sluice.torch.Loader(d, threads=args.threads, epochs=-1)
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    samples = 0
    for _ in range(args.batches):
        samples += next(it)["image"].shape[0]
    wall = time.perf_counter() - start
    report = loader.report()
    loader.close()
    print(json.dumps({"samples_per_s": samples / wall, "samples": samples, "wall_s": wall,
                      "stall_fraction": report["stall_fraction"]}))


def run_loader(args, threads):
    out, peak = measure([sys.executable, __file__, "--child", "--files", args.files,
                         "--threads", str(threads), "--batches", str(args.batches)])
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_bytes"] = peak
    return r


def run_torch(args, workers):
    out, peak = measure([sys.executable, str(ROOT / "bench" / "torch_baseline.py"), "--files",
                         args.files, "--num-workers", str(workers), "--batches",
                         str(args.batches)])
    r = json.loads(out.strip().splitlines()[-1])
    return {"samples_per_s": r["samples_per_s"], "samples": r["samples"], "wall_s": r["wall_s"],
            "peak_rss_bytes": peak}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", required=True, help="glob of the JPEGs ('**' recurses)")
    parser.add_argument("--threads", default="1,2", help="thread / worker counts to measure")
    parser.add_argument("--batches", type=int, default=20, help="timed batches of 64")
    parser.add_argument("--systems", default="sluice_run,sluice_torch,torch_dataloader")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds; each round runs every measurement once (interleaved), "
                             "and the medians are reported")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.threads = int(args.threads)
        return run_loader_child(args)
    runners = {"sluice_run": run_cli, "sluice_torch": run_loader, "torch_dataloader": run_torch}
    rounds = {}
    for round_ in range(args.repeats):
        for threads in [int(t) for t in args.threads.split(",")]:
            for system in args.systems.split(","):
                r = runners[system](args, threads)
                rounds.setdefault((system, threads), []).append(r)
                print(f"python_bench: round {round_ + 1}: {system} threads={threads}: "
                      f"{r['samples_per_s']:.1f} samples/s, "
                      f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB", file=sys.stderr)
    results = []
    for (system, threads), runs in rounds.items():
        rates = sorted(r["samples_per_s"] for r in runs)
        rss = sorted(r["peak_rss_bytes"] for r in runs)
        results.append({"system": system, "threads": threads,
                        "samples_per_s": statistics.median(rates),
                        "peak_rss_bytes": statistics.median(rss),
                        "runs": runs})
    by = {(r["system"], r["threads"]): r for r in results}
    ratios = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        run_cli_r = by.get(("sluice_run", threads))
        torch_r = by.get(("sluice_torch", threads))
        dl = by.get(("torch_dataloader", threads))
        if run_cli_r and torch_r:
            ratios[f"sluice_torch/sluice_run@{threads}"] = (torch_r["samples_per_s"] /
                                                            run_cli_r["samples_per_s"])
        if torch_r and dl:
            ratios[f"sluice_torch/dataloader@{threads}"] = (torch_r["samples_per_s"] /
                                                            dl["samples_per_s"])
            ratios[f"peak_rss sluice_torch/dataloader@{threads}"] = (torch_r["peak_rss_bytes"] /
                                                                     dl["peak_rss_bytes"])
    for k, v in ratios.items():
        print(f"python_bench: {k} = {v:.3f}", file=sys.stderr)
    print(json.dumps({"config": {"pipeline": str(PIPELINE.relative_to(ROOT)), "files": args.files,
                                 "batches": args.batches, "batch_size": 64,
                                 "repeats": args.repeats},
                      "results": results, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
