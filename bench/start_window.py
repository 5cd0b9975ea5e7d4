#!/usr/bin/python3
"""How well the all-local window before a `sluice` run's first plan estimates all-local's
steady rate.

`sluice` measures all-local for a short window before it plans (about 2 s on a cold start,
0.5 s when it plans from the metric store) and keeps that rate as all-local's until all-local
runs again. This reads `sluice bench` reports that ran `none` and `sluice` in rounds (the
randomized suite's, `bench/random_suite.py run`) and sets each `sluice` run's window rate
(its first timeline entry: "N batches measured all-local (S s, ...)", times the pipeline's
batch size) against the `none` run of the same round, a minute apart on the same machine.

usage: /usr/bin/python3 bench/start_window.py REPORT.json...
"""

import json
import os
import re
import statistics
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW = re.compile(r"(\d+) batches measured all-local \(([\d.]+) s")


def batch_size(scenario):
    with open(os.path.join(ROOT, scenario["pipeline"])) as f:
        spec = yaml.safe_load(f)
    return (spec.get("batch") or {}).get("size") or 1


def paired_rounds(report):
    """(none, sluice) policy reports of each round that has both, with a rate and a timeline
    (the runs named "none"/"sluice", "none#2"/"sluice#2", ...)."""
    policies = report.get("policies", {})
    for suffix in [""] + [f"#{i}" for i in range(2, 100)]:
        none, run = policies.get("none" + suffix), policies.get("sluice" + suffix)
        if none is None and run is None:
            break
        if none and run and none.get("samples_per_s") and run.get("timeline"):
            yield none, run


def rounds(report):
    """(kind, window rate / none's rate) for each round with both runs."""
    size = batch_size(report["scenario"])
    out = []
    for none, run in paired_rounds(report):
        reason = run["timeline"][0].get("reason", "")
        m = WINDOW.search(reason)
        if not m:
            continue
        rate = int(m.group(1)) * size / float(m.group(2))
        kind = "store" if "stored costs" in reason else "cold"
        out.append((kind, rate / none["samples_per_s"]))
    return out


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    every = {"cold": [], "store": []}
    print("| scenario | window / none, by round |")
    print("|---|---|")
    for path in paths:
        with open(path) as f:
            report = json.load(f)
        found = rounds(report)
        for kind, ratio in found:
            every[kind].append(ratio)
        cells = ", ".join(f"{ratio:.2f} ({kind})" for kind, ratio in found)
        print(f"| {report['scenario'].get('name', os.path.basename(path))} | {cells} |")
    print()
    for kind, ratios in every.items():
        if len(ratios) < 2:
            continue
        print(f"{kind}: {len(ratios)} runs, median {statistics.median(ratios):.3f}, "
              f"standard deviation {statistics.stdev(ratios):.3f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}, "
              f"over 1.05: {sum(r > 1.05 for r in ratios)}, under 0.95: "
              f"{sum(r < 0.95 for r in ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
