#!/usr/bin/python3
"""Workers reading a store across the trainer's link against workers with their own path to it.

Runs bench/scenarios/store-at-trainer.yaml and store-at-workers.yaml (the data set in tar
shards on an HTTP store beside the trainer, which the worker reaches over its shaped link, or
beside every host) with `sluice bench`, --repeats times interleaved, each scenario with its own
work folder (so its own metric store: the first repeat measures, the later ones plan from the
store). Each bench runs none (all-local), sluice, and the plan sluice is judged against in
each read mode fixed (cut 4, everything on the worker: read=remote, where the worker fetches
the shards itself, and read=local, where the trainer fetches and ships them). Writes every run
and the medians to OUT and prints a Markdown table: per scenario the median samples/s of each
policy, sluice's plans, the store rate the worker's probe measured, and the bytes that
crossed the link towards the worker per sample.

usage: /usr/bin/python3 bench/store_compare.py --sluice build/bin/sluice [--repeats 3]
           [--data-dir /tmp/sluice-bench-data] [--work-dir W] --out OUT.json      (as root)
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = ("store-at-trainer", "store-at-workers")
FIXED = ("fixed:cut=4,ratio=1.0,read=remote", "fixed:cut=4,ratio=1.0,read=local")


def bench(sluice, scenario, work, data_dir):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    policies = ("none", "sluice") + FIXED
    cmd = [sluice, "bench", scenario, "--no-verify", "--policies", ",".join(policies),
           "--json", out, "--work-dir", work, "--data-dir", data_dir]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    report = json.load(open(out))
    os.unlink(out)
    got = {}
    for name in policies:
        p = report["policies"][name]
        link = p.get("link_bytes") or [{}]
        samples = max(p.get("samples", 0), 1)
        got[name] = {"samples_per_s": p["samples_per_s"],
                     "to_worker_bytes_per_sample": link[0].get("to_worker", 0) / samples,
                     "plan": (p.get("plan") or {}).get("policy_string")
                     or (p.get("plan") or {}).get("policy"),
                     "time_to_plan_s": p.get("time_to_plan_s"),
                     "workers_measured": p.get("workers_measured")}
    return got


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--sluice", required=True)
    a.add_argument("--repeats", type=int, default=3)
    a.add_argument("--data-dir", default="/tmp/sluice-bench-data")
    a.add_argument("--work-dir", default="/tmp/sluice-store-compare")
    a.add_argument("--out", required=True)
    args = a.parse_args()
    runs = {name: [] for name in SCENARIOS}
    for r in range(args.repeats):
        for name in SCENARIOS:
            got = bench(args.sluice, os.path.join(HERE, "scenarios", name + ".yaml"),
                        os.path.join(args.work_dir, name), args.data_dir)
            runs[name].append(got)
            rates = ", ".join(f"{p} {v['samples_per_s']:.0f}" for p, v in got.items())
            store = [w.get("storage_bytes_per_s") for w in got["sluice"]["workers_measured"] or []]
            print(f"{name} {r + 1}: {rates}; sluice: {got['sluice']['plan']}; store rate "
                  f"{store}", flush=True)
    results = {}
    for name, rs in runs.items():
        med = {p: statistics.median(x[p]["samples_per_s"] for x in rs) for p in rs[0]}
        across = {p: statistics.median(x[p]["to_worker_bytes_per_sample"] for x in rs)
                  for p in rs[0]}
        store = [x["sluice"]["workers_measured"][0].get("storage_bytes_per_s", 0)
                 for x in rs if x["sluice"]["workers_measured"]]
        results[name] = {"runs": rs, "median_samples_per_s": med,
                         "median_to_worker_bytes_per_sample": across,
                         "median_store_bytes_per_s": statistics.median(store) if store else None,
                         "sluice_plans": [x["sluice"]["plan"] for x in rs]}
    json.dump(results, open(args.out, "w"), indent=1)
    print()
    print("| scenario | none | sluice | sluice / none | cut 4 read=remote | cut 4 read=local |"
          " sluice / best fixed | store rate at the worker's probe | bytes to the worker per "
          "sample (sluice) | sluice's plans |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        m = r["median_samples_per_s"]
        best = max(m[p] for p in FIXED)
        store = r["median_store_bytes_per_s"]
        store_text = f"{store / 1e6:.0f} MB/s" if store else "too fast to time (0)"
        print(f"| {name} | {m['none']:.0f} | {m['sluice']:.0f} | {m['sluice'] / m['none']:.2f}x | "
              f"{m[FIXED[0]]:.0f} | {m[FIXED[1]]:.0f} | {m['sluice'] / best:.2f} | {store_text} | "
              f"{r['median_to_worker_bytes_per_sample']['sluice'] / 1e3:.1f} KB | "
              f"{'; '.join(str(p) for p in r['sluice_plans'])} |")


if __name__ == "__main__":
    main()
