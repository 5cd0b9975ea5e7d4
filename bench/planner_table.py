#!/usr/bin/python3
"""The planners against the oracle and each other, from `sluice bench` reports: one row per
scenario with `sluice`'s and `fastflow`'s samples/s, their ratios to the oracle and to each
other, each one's time to plan and the plan it ended with. The first-run column (a run with
an empty metric store) comes from `policies.sluice.first_run` (bench/merge_reports.py), or
from `cold-NAME.json` in a `--cold DIR` folder.

usage: /usr/bin/python3 bench/planner_table.py [--cold DIR] REPORT.json...
"""

import json
import os
import sys


def short_plan(plan):
    if plan is None:
        return "—"  # the policy did not run
    if not plan or not plan.get("offload", plan.get("policy") not in (None, "none")):
        return "all local"
    cut = plan.get("cut")
    read = (plan.get("read_mode") or "").replace("_read", "")
    text = f"cut={cut}, {plan.get('ratio', 0):.2f}, {read}"
    codec = plan.get("compression")
    if codec and codec != "none":
        text += f", {codec}"
    if plan.get("spill") == "workers":
        text += ", spill=workers"
    shares = [w.get("share", 0) for w in plan.get("workers", [])]
    if len(shares) > 1:
        text += ", shares " + "/".join(f"{s:.2f}" for s in shares)
    return text


def rate(report, name):
    return report["policies"].get(name, {}).get("samples_per_s")


def main(args):
    cold_dir = None
    if args and args[0] == "--cold":
        cold_dir, args = args[1], args[2:]
    head = ["scenario", "none", "oracle", "sluice (first run)", "sluice", "fastflow",
            "sluice / oracle", "sluice / fastflow", "time to plan: sluice first, stored; fastflow",
            "sluice's plan", "fastflow's plan"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for path in args:
        r = json.load(open(path))
        name = r["scenario"]["name"]
        cold = r["policies"].get("sluice", {}).get("first_run")
        if cold is None and cold_dir:
            p = os.path.join(cold_dir, f"cold-{name}.json")
            if os.path.exists(p):
                cold = json.load(open(p))["policies"].get("sluice")
        s, f, o, n = (rate(r, k) for k in ("sluice", "fastflow", "oracle", "none"))
        fmt = lambda v: f"{v:.0f}" if v else "—"
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "—"
        pol = r["policies"]
        ttp = "{} s, {} s; {}".format(
            f"{cold['time_to_plan_s']:.1f}" if cold else "—",
            f"{pol['sluice']['time_to_plan_s']:.1f}" if "sluice" in pol else "—",
            f"{pol['fastflow']['time_to_plan_s']:.0f} s" if "time_to_plan_s" in pol.get(
                "fastflow", {}) else ("failed" if "fastflow" in pol else "—"))
        row = [name, fmt(n), fmt(o), fmt(cold.get("samples_per_s")) if cold else "—", fmt(s),
               fmt(f), ratio(s, o), ratio(s, f), ttp,
               short_plan(pol["sluice"].get("plan", {}) if "sluice" in pol else None),
               ("failed: " + pol["fastflow"]["error"][:60]) if "error" in pol.get("fastflow", {})
               else short_plan(pol["fastflow"].get("plan", {}) if "fastflow" in pol else None)]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
