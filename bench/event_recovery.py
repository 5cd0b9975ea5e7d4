#!/usr/bin/python3
"""Recovery after event-halve's event, against the post-event oracle, over repeated runs.

The post-event oracle: the best plans of an oracle sweep on event-halve-post (the world after
the event, from the start) are run again on that world for as many steps as event-halve runs,
--repeats times each; the oracle is the best median. Then `sluice` runs event-halve --repeats
times; each run's rate from 15 s after the event to its end (the bench's
`settled_samples_per_s`) is compared with the oracle, and so is each second after the event.

usage: /usr/bin/python3 bench/event_recovery.py --sluice build/bin/sluice
           [--oracle-report OUT-OF-AN-ORACLE-RUN.json] [--candidates 3] [--repeats 3]
           [--data-dir DIR] [--work-dir DIR] --out OUT.json
Without --oracle-report it first runs `sluice bench bench/scenarios/event-halve-post.yaml
--policies oracle`. Needs root (the testbed).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENT = os.path.join(ROOT, "bench/scenarios/event-halve.yaml")
POST = os.path.join(ROOT, "bench/scenarios/event-halve-post.yaml")


def bench(args, scenario, policies, out, work):
    cmd = [args.sluice, "bench", scenario, "--policies", ",".join(policies), "--json", out,
           "--work-dir", work, "--data-dir", args.data_dir, "--no-verify"]
    print(" ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    return json.load(open(out))


def steps_of(path):
    for line in open(path):
        if line.startswith("steps:"):
            return int(line.split(":")[1])
    raise SystemExit(f"{path}: no steps")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--oracle-report")
    ap.add_argument("--candidates", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data-dir", default="/tmp/sluice-bench-data")
    ap.add_argument("--work-dir")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    work = args.work_dir or tempfile.mkdtemp(prefix="sluice-event-")
    os.makedirs(work, exist_ok=True)

    # 1. Candidate plans for the post-event world.
    if args.oracle_report:
        oracle = json.load(open(args.oracle_report))
    else:
        oracle = bench(args, POST, ["oracle"], f"{work}/post-oracle.json", f"{work}/post-oracle")
    sweep = [r for r in oracle["policies"]["oracle"].get("sweep", []) if "samples_per_s" in r]
    sweep.sort(key=lambda r: -r["samples_per_s"])
    candidates = []
    for r in sweep:
        if r["policy_arg"] not in candidates:
            candidates.append(r["policy_arg"])
    candidates = candidates[:args.candidates]

    # 2. Those plans on the post-event world, as long as event-halve runs.
    long_post = f"{work}/event-halve-post-long.yaml"
    with open(POST) as src, open(long_post, "w") as dst:
        for line in src:
            if line.startswith("steps:"):
                line = f"steps: {steps_of(EVENT)}\n"
            elif line.startswith("pipeline:"):
                line = f"pipeline: {os.path.join(ROOT, line.split(':', 1)[1].strip())}\n"
            dst.write(line)
    post_runs = {c: [] for c in candidates}
    for i in range(args.repeats):
        rep = bench(args, long_post, candidates, f"{work}/post-long-{i}.json", f"{work}/post-long")
        for c in candidates:
            r = rep["policies"].get(c, {})
            if "samples_per_s" in r:
                post_runs[c].append(r["samples_per_s"])
    post_median = {c: statistics.median(v) for c, v in post_runs.items() if v}
    best = max(post_median, key=post_median.get)
    oracle_rate = post_median[best]

    # 3. sluice through the event.
    runs = []
    for i in range(args.repeats):
        rep = bench(args, EVENT, ["sluice"], f"{work}/event-{i}.json", f"{work}/event")
        r = rep["policies"]["sluice"]
        e = r["events"][0]
        runs.append({"samples_per_s": r["samples_per_s"], "event_t_s": e["t_s"],
                     "before_samples_per_s": e["before_samples_per_s"],
                     "settled_samples_per_s": e["settled_samples_per_s"], "per_s": e["per_s"],
                     "timeline": [(t["t_s"], t["kind"], t["reason"])
                                  for t in r.get("train", {}).get("timeline", [])]})
    settled = [r["settled_samples_per_s"] for r in runs]
    result = {
        "post_event_oracle": {"plan": best, "samples_per_s": oracle_rate,
                              "candidates": post_runs, "steps": steps_of(EVENT)},
        "sluice": runs,
        "settled_median": statistics.median(settled),
        "settled_over_oracle": statistics.median(settled) / oracle_rate,
    }
    json.dump(result, open(args.out, "w"), indent=1)

    print(f"post-event oracle ({best}, median of {args.repeats} runs of {steps_of(EVENT)} "
          f"steps): {oracle_rate:.0f} samples/s")
    for c, v in post_runs.items():
        print(f"  {c}: {', '.join(f'{x:.0f}' for x in v)}")
    for i, r in enumerate(runs):
        print(f"sluice run {i}: {r['before_samples_per_s']:.0f} samples/s before the event, "
              f"{r['settled_samples_per_s']:.0f} from 15 s after it "
              f"({r['settled_samples_per_s'] / oracle_rate:.2f} x oracle)")
    print(f"median: {result['settled_median']:.0f} samples/s = "
          f"{result['settled_over_oracle']:.2f} x the post-event oracle")


if __name__ == "__main__":
    main()
