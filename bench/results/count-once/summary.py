#!/usr/bin/python3
"""The table of ab3.sh's rounds: per build, each round's figure and the median.
Usage: summary.py DIR"""
import glob, json, re, statistics, sys

res = {}
for f in sorted(glob.glob(f"{sys.argv[1]}/r*-*.json")):
    m = re.match(r".*r(\d+)-(.*)\.json", f)
    res.setdefault(m.group(2), {})[int(m.group(1))] = json.load(open(f))
rows = [("local_samples_per_s", None, "all-local samples/s"),
        ("remote_over_local", "5", "remote-only / all-local"),
        ("mixed_over_local", "5", "best mixed / all-local"),
        ("best_mixed_samples_per_s", "5", "best mixed samples/s"),
        ("trainer_cpu_share", "5", "trainer CPU per offloaded / local")]
for build, rounds in res.items():
    print(build)
    for key, cut, label in rows:
        v = [rounds[r]["cuts"][cut][key] if cut else rounds[r][key] for r in sorted(rounds)]
        shown = ", ".join(f"{x:.3f}" if x < 10 else f"{x:.0f}" for x in v)
        print(f"  {label:36s} {shown}  median {statistics.median(v):.3f}")
