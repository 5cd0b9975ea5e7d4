#!/usr/bin/python3
"""Medians of each fixed plan's samples/s per build over the rounds of ab-fixed.sh, the
paired new / old ratio per plan, and each plan's delivered shares.
usage: summary.py OUT"""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
rates = {}  # (build, policy) -> [rate by round]
shares = {}
for path in sorted(glob.glob(os.path.join(out, "*-*.json"))):
    build = os.path.basename(path).split("-")[0]
    with open(path) as f:
        report = json.load(f)
    for key, result in report.get("policies", {}).items():
        policy = key.split("#")[0]
        rates.setdefault((build, policy), []).append(result.get("samples_per_s", 0))
        shares.setdefault((build, policy), []).append(result.get("share", {}))
policies = sorted({p for _, p in rates})
for policy in policies:
    old, new = rates.get(("old", policy), []), rates.get(("new", policy), [])
    line = f"{policy}\n  old {[round(r) for r in old]} median {statistics.median(old):.0f}" \
        if old else f"{policy}\n  old -"
    if new:
        line += f"\n  new {[round(r) for r in new]} median {statistics.median(new):.0f}"
    if old and new and len(old) == len(new):
        paired = [n / o for n, o in zip(new, old) if o > 0]
        line += f"\n  paired new / old {[round(p, 3) for p in paired]} median {statistics.median(paired):.3f}"
    for build in ("old", "new"):
        s = shares.get((build, policy))
        if s:
            keys = sorted(s[0])
            line += f"\n  {build} shares " + ", ".join(
                f"{k} {statistics.median(x.get(k, 0) for x in s):.3f}" for k in keys)
    print(line)
