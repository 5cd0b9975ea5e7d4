#!/usr/bin/python3
"""Summaries of ab.sh folders.

  ab_paired.py DIR [DIR...]    paired: per scenario, new / old within each round (cold and from
                               the store), each build's runs against the round's `none`, and how
                               many cold runs' first plans offloaded (every folder's rounds pooled;
                               a folder is one evening's run)
  ab_paired.py --rates DIR     every run's samples/s, per scenario and kind (ab.sh's table)
"""
import collections
import glob
import json
import os
import re
import statistics
import sys


def offloaded(policy):
    """Whether a run's first plan offloads (what the margin decides on a cold run)."""
    timeline = policy.get("timeline") or []
    return bool(timeline) and bool(timeline[0].get("plan", {}).get("offload"))


def read_runs(dirs):
    """(scenario, dir, round) -> kind ("none", "old-cold", "new-store", ...) -> policy report."""
    runs = collections.defaultdict(dict)
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, "*-*-*.json"))):
            m = re.match(r"(.+)-(old|new|none)-(\d+)\.json", os.path.basename(f))
            if not m:
                continue
            for k, v in json.load(open(f))["policies"].items():
                kind = m.group(2) if m.group(2) == "none" else \
                    m.group(2) + ("-store" if "#" in k else "-cold")
                runs[(m.group(1), d, m.group(3))][kind] = v
    return runs


def print_rates(directory):
    runs = read_runs([directory])
    print("| scenario | none | old cold | new cold | old store | new store |")
    print("|---|---|---|---|---|---|")
    for scenario in sorted({key[0] for key in runs}):
        rounds = [runs[key] for key in sorted(runs, key=lambda k: int(k[2])) if key[0] == scenario]
        cell = lambda k: "/".join(str(round(r[k]["samples_per_s"])) for r in rounds if k in r)
        print(f"| {scenario} | {cell('none')} | {cell('old-cold')} | {cell('new-cold')} "
              f"| {cell('old-store')} | {cell('new-store')} |")


def main(dirs):
    runs = {key: {kind: (v["samples_per_s"], offloaded(v)) for kind, v in r.items()}
            for key, r in read_runs(dirs).items()}
    by_scenario = collections.defaultdict(list)
    for (scenario, _, _), r in runs.items():
        by_scenario[scenario].append(r)
    print("| scenario | rounds | cold new/old | store new/old | old cold / none | new cold / none "
          "| cold first plans offloading (old, new) |")
    print("|---|---|---|---|---|---|---|")
    for scenario, rounds in sorted(by_scenario.items()):
        def med(num, den):
            xs = [r[num][0] / r[den][0] for r in rounds if num in r and den in r]
            return f"{statistics.median(xs):.3f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"
        off = lambda k: sum(1 for r in rounds if k in r and r[k][1])
        print(f"| {scenario} | {len(rounds)} | {med('new-cold', 'old-cold')} "
              f"| {med('new-store', 'old-store')} | {med('old-cold', 'none')} "
              f"| {med('new-cold', 'none')} | {off('old-cold')}, {off('new-cold')} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rates"]:
        print_rates(sys.argv[2])
    else:
        main(sys.argv[1:])
