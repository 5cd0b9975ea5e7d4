#!/usr/bin/python3
"""Every stored round of random-17 with FastFlow's plan beside sluice: each held `sluice` run's
first ratio against the worker's share FastFlow's spill-over plan measured in the same round,
and that run's rate over FastFlow's; grouped by how far over or under that share the ratio was,
for the rounds before the held-share change (5d8a487) and for all of them.
usage (from the repository root): /usr/bin/python3 bench/results/held-cap/overshoot.py"""
import glob
import json
import re
import statistics

FASTFLOW = "fixed:cut=batch,ratio=0.2,read=remote,compress=none"
rows = []  # (folder is of the held-share build, ratio over FastFlow's share, rate ratio)
for path in sorted(glob.glob("bench/results/**/random-17-job-s.json", recursive=True)):
    policies = json.load(open(path))["policies"]
    fast = [v for k, v in policies.items() if k.split("#")[0] == FASTFLOW]
    runs = [v for k, v in policies.items() if k.split("#")[0] == "sluice"]
    if not fast or len(fast) != len(runs):
        continue
    for run, ff in zip(runs, fast):
        timeline = run.get("timeline") or []
        first = timeline[0]["plan"].get("policy", "") if timeline else ""
        m = re.search(r"ratio=([\d.]+)", first)
        if "spill=workers" not in first or not m:
            continue
        rows.append(("5d8a487" in path, float(m.group(1)) - ff["share"]["w0"],
                     run["samples_per_s"] / ff["samples_per_s"]))
for label, take in (("before 5d8a487", lambda new: not new), ("all", lambda new: True)):
    print(label)
    for name, keep in (("over by more than 0.01", lambda d: d > 0.01),
                       ("within 0.01", lambda d: -0.01 <= d <= 0.01),
                       ("under by more than 0.01", lambda d: d < -0.01)):
        got = [r for new, d, r in rows if take(new) and keep(d)]
        print(f"  {name}: {len(got)} runs, median {statistics.median(got):.3f} of FastFlow's plan")
