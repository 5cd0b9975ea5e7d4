#!/usr/bin/python3
"""Python trainer against `sluice train` on the same testbed scenario.

For each scenario NAME (bench/scenarios/NAME.yaml and its Python twin NAME-python.yaml,
whose trainer is bench/python_trainer.py), runs `sluice bench --policies none,sluice` on
the CLI scenario and then on the Python one, --repeats times interleaved, each frontend with
its own work folder (so its metric store: the first repeat measures, the later ones plan
from the store, as a user's repeated runs do). Writes every run and the medians to OUT and
prints a Markdown table: per frontend the median samples/s of none and sluice, sluice's
speed-up over none in the same run, and Python's sluice over the CLI's.

usage: /usr/bin/python3 bench/frontend_compare.py --sluice build/bin/sluice
           --scenarios image-7to14,two-workers,storage-none [--repeats 3]
           [--data-dir /tmp/sluice-bench-data] --out OUT.json        (as root)
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def bench(sluice, scenario, work, data_dir):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sluice, "bench", scenario, "--no-verify", "--policies", "none,sluice", "--json", out,
           "--work-dir", work, "--data-dir", data_dir]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    report = json.load(open(out))
    os.unlink(out)
    p = report["policies"]
    return {"none": p["none"]["samples_per_s"], "sluice": p["sluice"]["samples_per_s"],
            "time_to_plan_s": p["sluice"].get("time_to_plan_s"),
            "plan": (p["sluice"].get("plan") or {}).get("policy")}


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--sluice", required=True)
    a.add_argument("--scenarios", default="image-7to14,two-workers,storage-none")
    a.add_argument("--repeats", type=int, default=3)
    a.add_argument("--data-dir", default="/tmp/sluice-bench-data")
    a.add_argument("--work-dir", default="/tmp/sluice-frontend-compare")
    a.add_argument("--out", required=True)
    args = a.parse_args()
    results = {}
    for name in args.scenarios.split(","):
        runs = {"cli": [], "python": []}
        for r in range(args.repeats):
            for frontend, file in (("cli", name), ("python", name + "-python")):
                scenario = os.path.join(HERE, "scenarios", file + ".yaml")
                work = os.path.join(args.work_dir, file)
                got = bench(args.sluice, scenario, work, args.data_dir)
                runs[frontend].append(got)
                print(f"{name} {frontend} {r + 1}: none {got['none']:.0f}, sluice "
                      f"{got['sluice']:.0f} ({got['plan']}, planned in "
                      f"{got['time_to_plan_s'] or 0:.2f} s)", flush=True)
        med = {f: {k: statistics.median(x[k] for x in v) for k in ("none", "sluice")}
               for f, v in runs.items()}
        for f, v in runs.items():
            med[f]["speedup"] = statistics.median(x["sluice"] / x["none"] for x in v)
            med[f]["time_to_plan_s"] = statistics.median(x["time_to_plan_s"] or 0 for x in v)
        med["python_over_cli"] = med["python"]["sluice"] / med["cli"]["sluice"]
        results[name] = {"runs": runs, "medians": med}
    json.dump(results, open(args.out, "w"), indent=1)
    print()
    print("| scenario | CLI none | CLI sluice | CLI speed-up | Python none | Python sluice |"
          " Python speed-up | Python sluice / CLI sluice | time to plan (CLI, Python) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        m = r["medians"]
        c, p = m["cli"], m["python"]
        print(f"| {name} | {c['none']:.0f} | {c['sluice']:.0f} | {c['speedup']:.2f}x | "
              f"{p['none']:.0f} | {p['sluice']:.0f} | {p['speedup']:.2f}x | "
              f"{m['python_over_cli']:.2f} | {c['time_to_plan_s']:.2f} s, "
              f"{p['time_to_plan_s']:.2f} s |")


if __name__ == "__main__":
    main()
