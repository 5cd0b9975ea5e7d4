#!/usr/bin/python3
"""What a `sluice` run's first plan predicted against what the run measured, by the gain the
plan predicted.

A cold `sluice` run (no metric store) plans once it has measured all-local for a short
window, with the costs it measured there and defaults for what it has not measured yet
(receiving, above all: a per-element default until an offload is fitted on the whole
process). This reads `sluice bench` reports that ran `none` and `sluice` in rounds (the
randomized suite's, `bench/random_suite.py run`), takes each round whose `sluice` run was
cold and whose first plan offloaded, and sets the gain its first plan predicted over
all-local (the explanation's "(+X% over all-local)") against the round's measured ratio
`sluice / none` (the whole run, window and switches included, a minute apart on the same
machine). Rounds are grouped by the predicted gain.

usage: /usr/bin/python3 bench/first_plan_outcomes.py REPORT.json...
"""

import collections
import json
import os
import re
import statistics
import sys

from start_window import paired_rounds

GAIN = re.compile(r"-> [\d.]+ samples/s predicted \(\+([\d.]+)% over all-local\)")
BINS = [(0, 10), (10, 20), (20, 50), (50, float("inf"))]


def rounds(report):
    """(predicted gain %, sluice / none, ended offloading, scenario) per cold offloading round."""
    name = report.get("scenario", {}).get("name", "?")
    out = []
    for none, run in paired_rounds(report):
        first = run["timeline"][0]
        if "planned from measured costs" not in first.get("reason", ""):
            continue
        m = GAIN.search(first.get("plan", {}).get("explanation", ""))
        if not m:
            continue  # the first plan did not offload
        final = run.get("plan") or {}
        ended_offloading = bool(final.get("ratio")) and final.get("cut") is not None
        out.append((float(m.group(1)), run["samples_per_s"] / none["samples_per_s"],
                    ended_offloading, name))
    return out


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    found = []
    for path in paths:
        with open(path) as f:
            found += rounds(json.load(f))
    print("| first plan's predicted gain | cold rounds | sluice / none: median (quartiles) "
          "| under 1 | ended offloading | scenarios (rounds) |")
    print("|---|---|---|---|---|---|")
    for lo, hi in BINS:
        group = [r for r in found if lo <= r[0] < hi]
        if not group:
            continue
        ratios = sorted(r[1] for r in group)
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        names = collections.Counter(r[3] for r in group).most_common(5)
        label = f"{lo}-{hi}%" if hi != float("inf") else f"{lo}% or more"
        print(f"| {label} | {len(group)} | {q[1]:.3f} ({q[0]:.3f}-{q[2]:.3f}) | "
              f"{sum(r < 1 for r in ratios)} | {sum(r[2] for r in group)} | "
              + ", ".join(f"{n} ({c})" for n, c in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
