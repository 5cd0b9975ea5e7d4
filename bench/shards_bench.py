#!/usr/bin/python3
"""Tar shards against loose files: the standard image pipeline at one thread, reading the same
JPEG set as loose files, as local shards, and as shards from a web server on loopback
(tests/http_shard_server.py), read by range and through the shard cache (SLUICE_CACHE_DIR). Rounds are interleaved (files, local shards, HTTP shards, ...)
and each figure is the median of its rounds; the ratios are against the loose files measured
in the same rounds.

usage: /usr/bin/python3 bench/shards_bench.py [--sluice build/bin/sluice] [--rounds 5]
           [--count 2000] [--work /tmp/sluice-shards-bench] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(sluice, spec, files, json_out, env=None):
    cmd = [sluice, "run", spec, "--threads", "1", "--files", files, "--json", json_out]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))
    if done.returncode != 0:
        sys.exit(f"shards_bench: {' '.join(cmd)} failed:\n{done.stderr}")
    return json.load(open(json_out))["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sluice", default=os.path.join(ROOT, "build/bin/sluice"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--shard-size", type=int, default=250)
    p.add_argument("--work", default="/tmp/sluice-shards-bench")
    p.add_argument("--json", default="")
    args = p.parse_args()
    data = os.path.join(args.work, "data")
    if not os.path.isdir(os.path.join(data, "shards")):
        subprocess.run([args.sluice, "gen-data", "--kind", "jpeg", "--count", str(args.count),
                        "--out", data, "--width", "320", "--height", "240", "--format", "tar",
                        "--shard-size", str(args.shard_size)], check=True)
    server = subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "tests/http_shard_server.py"),
                               "--root", data], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        port = int(re.search(r":(\d+)$", line.strip()).group(1))
        files_spec = os.path.join(ROOT, "examples/pipelines/imagenet_train.yaml")
        shards_spec = os.path.join(ROOT, "examples/pipelines/imagenet_train_shards.yaml")
        n_shards = len([f for f in os.listdir(os.path.join(data, "shards")) if f.endswith(".tar")])
        last = f"{n_shards - 1:06d}"
        url = f"http://127.0.0.1:{port}/shards/shard-{{000000..{last}}}.tar"
        cache = {"SLUICE_CACHE_DIR": os.path.join(args.work, "cache")}
        cases = {
            "files": (files_spec, os.path.join(data, "**/*.jpg"), None),
            "local shards": (shards_spec, os.path.join(data, "shards", "*.tar"), None),
            "http shards": (shards_spec, url, None),
            # The cache persists across rounds: after the first, every shard is local.
            "http, cached": (shards_spec, url, cache),
        }
        rates = {name: [] for name in cases}
        out = os.path.join(args.work, "run.json")
        for r in range(args.rounds):
            for name, (spec, files, env) in cases.items():
                rates[name].append(run(args.sluice, spec, files, out, env))
            print(f"shards_bench: round {r + 1}/{args.rounds}: " +
                  ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items()), flush=True)
    finally:
        server.kill()
    base = statistics.median(rates["files"])
    result = {"rounds": args.rounds, "count": args.count, "threads": 1,
              "samples_per_s": {n: statistics.median(v) for n, v in rates.items()},
              "runs": rates,
              "ratio_to_files": {n: statistics.median(v) / base for n, v in rates.items()}}
    for n in cases:
        print(f"{n:>13}: {result['samples_per_s'][n]:7.1f} samples/s (median of {args.rounds}), "
              f"{result['ratio_to_files'][n]:.3f} of loose files")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
