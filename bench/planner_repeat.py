#!/usr/bin/python3
"""Repeats a scenario's final plans to take the noise out of single short runs.

Given a `sluice bench` report with `none`, `oracle`, `sluice` and `fastflow`, runs
`sluice bench SCENARIO --policies none,sluice,fixed:<oracle's best>,fixed:<fastflow's plan>`
--repeats times and writes the median samples/s of each (and every run) to OUT. `sluice` plans
anew each time (from the metric store the report's run left); FastFlow's chosen plan runs as
a fixed plan, since its profiling runs are not part of its rate anyway.

usage: /usr/bin/python3 bench/planner_repeat.py --sluice build/bin/sluice
           --report bench/results/scenarios/NAME.json --scenario bench/scenarios/NAME.yaml
           [--repeats 3] [--work-dir DIR] [--data-dir DIR] --out OUT.json
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile


def fixed_of(policy_result):
    plan = policy_result.get("plan", {})
    if "policy_string" in plan:
        return plan["policy_string"]
    return policy_result.get("policy_arg")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--data-dir", default="/tmp/sluice-bench-data")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    report = json.load(open(args.report))
    pol = report["policies"]
    runs = {"none": "none", "sluice": "sluice"}
    if "oracle" in pol:
        runs["oracle"] = pol["oracle"]["policy_arg"]
    if "fastflow" in pol:
        runs["fastflow"] = fixed_of(pol["fastflow"])
    # A plan that does not offload is `none` itself.
    runs = {k: (v if v and v != "none" or k == "none" else "none") for k, v in runs.items()}
    distinct = []
    for v in runs.values():
        if v not in distinct:
            distinct.append(v)
    work = args.work_dir or tempfile.mkdtemp(prefix="sluice-repeat-")
    measured = {v: [] for v in distinct}
    for i in range(args.repeats):
        out = f"{work}/repeat-{i}.json"
        cmd = [args.sluice, "bench", args.scenario, "--policies", ",".join(distinct), "--json", out,
               "--work-dir", work, "--data-dir", args.data_dir, "--no-verify"]
        print(" ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        got = json.load(open(out))["policies"]
        for v in distinct:
            # `sluice bench` names a fixed:... policy by its own string.
            r = got.get(v)
            if r and "samples_per_s" in r:
                measured[v].append(r["samples_per_s"])
    result = {"scenario": report["scenario"]["name"], "repeats": args.repeats, "policies": {}}
    for name, v in runs.items():
        xs = measured.get(v, [])
        result["policies"][name] = {"policy": v, "runs": xs,
                                    "median": statistics.median(xs) if xs else None}
    json.dump(result, open(args.out, "w"), indent=1)
    line = ", ".join(f"{k} {d['median']:.0f}" for k, d in result["policies"].items() if d["median"])
    print(f"{result['scenario']}: {line}")


if __name__ == "__main__":
    main()
