#!/usr/bin/python3
"""Puts the policies of later `sluice bench` reports of the same scenario into an earlier one.

  --replace B.json   B's policies replace (or join) A's
  --first-run C.json C's `sluice` run (made with an empty metric store) is kept as
                     A.policies.sluice.first_run: its samples/s, time to plan and plan

usage: /usr/bin/python3 bench/merge_reports.py A.json [--replace B.json] [--first-run C.json]
The merged report is written back to A.json (each merged policy says where it came from).
"""

import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report")
    ap.add_argument("--replace", action="append", default=[])
    ap.add_argument("--first-run", default=None)
    args = ap.parse_args()
    a = json.load(open(args.report))
    name = a["scenario"]["name"]
    for path in args.replace:
        b = json.load(open(path))
        if b["scenario"]["name"] != name:
            raise SystemExit(f"{path} is scenario {b['scenario']['name']}, not {name}")
        for policy, result in b["policies"].items():
            result["merged_from"] = path
            a["policies"][policy] = result
    if args.first_run:
        c = json.load(open(args.first_run))
        s = c["policies"]["sluice"]
        a["policies"]["sluice"]["first_run"] = {
            "samples_per_s": s.get("samples_per_s"),
            "stall_fraction": s.get("stall_fraction"),
            "time_to_plan_s": s.get("time_to_plan_s"),
            "policy_string": s.get("plan", {}).get("policy_string"),
            "merged_from": args.first_run,
        }
    json.dump(a, open(args.report, "w"), indent=1)


if __name__ == "__main__":
    main()
