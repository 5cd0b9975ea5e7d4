#!/usr/bin/python3
"""Summarizes ab.sh's runs: per run none, sluice, speed-up, the plan's ratio, prediction,
the worker's modeled capacity and the time to plan; then medians and counts at 1.5x.
usage: summary.py DIR PAIRS"""
import json, re, statistics, sys

d, n = sys.argv[1], int(sys.argv[2])
speed = {"old": [], "new": []}
for i in range(1, n + 1):
    for b in ("old", "new"):
        s = json.load(open(f"{d}/{b}-sluice-{i}.json"))
        none = json.load(open(f"{d}/{b}-none-{i}.json"))
        p = s["plan"]
        w = re.search(r"capacity of (\d+)", p.get("explanation", ""))
        x = s["samples_per_s"] / none["samples_per_s"]
        speed[b].append(x)
        print(f"{b} {i}: none {none['samples_per_s']:.0f} sluice {s['samples_per_s']:.0f} "
              f"({x:.2f}x) ratio {p.get('ratio', 0):.2f} predicted {p.get('predicted_samples_per_s', 0):.0f} "
              f"worker {w.group(1) if w else '-'} planned in {s['time_to_plan_s']:.2f} s")
for b in ("old", "new"):
    v = speed[b]
    print(f"{b}: median {statistics.median(v):.2f}x, at least 1.5x in {sum(x >= 1.5 for x in v)} of {len(v)}")
pairs = [a / b for a, b in zip(speed["new"], speed["old"])]
print(f"new/old per pair: median {statistics.median(pairs):.2f} ({min(pairs):.2f}-{max(pairs):.2f})")
