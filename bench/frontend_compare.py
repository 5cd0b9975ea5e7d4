#!/usr/bin/python3
"""Python trainer against `sluice train` on the same testbed scenario.

For each scenario NAME (bench/scenarios/NAME.yaml and its Python twin NAME-python.yaml,
whose trainer is bench/python_trainer.py), runs `sluice bench --policies none,sluice` on
the CLI scenario and then on the Python one, --repeats times interleaved, each frontend with
its own work folder (so its metric store: the first repeat measures, the later ones plan
from the store, as a user's repeated runs do). Writes every run and the medians to OUT and
prints a Markdown table: per frontend the median samples/s of none and sluice, sluice's
speed-up over none in the same run, and Python's sluice over the CLI's.

--steps N runs every scenario for N steps instead of its own count (the shipped scenarios'
60 steps are about 3.5 s after the plan: shorter than the closed loop needs to measure a
plan and roll it back). --oracle first sweeps each CLI scenario once (`--policies oracle`,
the best measured fixed plan of a grid of cuts, read modes, ratios and codecs), then runs that
plan fixed in every repeat beside none and sluice, from both frontends: the oracle's rate
is the median of those runs, measured interleaved with the runs it is compared with.
--oracle-from EARLIER.json takes each scenario's oracle plan from an earlier output instead
of sweeping again (the same --steps).

usage: /usr/bin/python3 bench/frontend_compare.py --sluice build/bin/sluice
           --scenarios image-7to14,two-workers,storage-none [--repeats 3] [--steps N]
           [--oracle | --oracle-from EARLIER.json] [--data-dir /tmp/sluice-bench-data]
           --out OUT.json        (as root)
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def scenario_file(name, steps, work_dir):
    """bench/scenarios/NAME.yaml, or a copy of it that runs `steps` steps."""
    path = os.path.join(HERE, "scenarios", name + ".yaml")
    if not steps:
        return path
    sc = yaml.safe_load(open(path))
    sc["steps"] = steps
    sc["pipeline"] = os.path.join(ROOT, sc["pipeline"])
    os.makedirs(work_dir, exist_ok=True)
    copy = os.path.join(work_dir, f"{name}-{steps}-steps.yaml")
    with open(copy, "w") as f:
        yaml.safe_dump(sc, f, sort_keys=False)
    return copy


def run_bench(sluice, scenario, work, data_dir, policies):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sluice, "bench", scenario, "--no-verify", "--policies", ",".join(policies), "--json",
           out, "--work-dir", work, "--data-dir", data_dir]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    report = json.load(open(out))
    os.unlink(out)
    return report["policies"]


def bench(sluice, scenario, work, data_dir, oracle_plan=None):
    policies = ["none", "sluice"] + ([oracle_plan] if oracle_plan else [])
    p = run_bench(sluice, scenario, work, data_dir, policies)
    got = {"none": p["none"]["samples_per_s"], "sluice": p["sluice"]["samples_per_s"],
           "time_to_plan_s": p["sluice"].get("time_to_plan_s"),
           "plan": (p["sluice"].get("plan") or {}).get("policy_string")
           or (p["sluice"].get("plan") or {}).get("policy"),
           "timeline": [{k: e.get(k) for k in ("t_s", "kind")} for e in
                        (p["sluice"].get("timeline") or []) if isinstance(e, dict)]}
    if oracle_plan:
        got["oracle_plan"] = p[oracle_plan]["samples_per_s"]
    return got


def sweep(sluice, scenario, work, data_dir):
    """The oracle's best plan for the scenario, as a fixed:... policy, and its sweep rate."""
    o = run_bench(sluice, scenario, work, data_dir, ["oracle"])["oracle"]
    return o["policy_arg"], o["samples_per_s"]


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--sluice", required=True)
    a.add_argument("--scenarios", default="image-7to14,two-workers,storage-none")
    a.add_argument("--repeats", type=int, default=3)
    a.add_argument("--data-dir", default="/tmp/sluice-bench-data")
    a.add_argument("--work-dir", default="/tmp/sluice-frontend-compare")
    a.add_argument("--out", required=True)
    a.add_argument("--steps", type=int, default=0, help="steps per run (0: the scenario's)")
    a.add_argument("--oracle", action="store_true",
                   help="sweep the oracle once per scenario and run its plan in every repeat")
    a.add_argument("--oracle-from", default="",
                   help="an earlier output whose oracle plans to run (no sweep)")
    args = a.parse_args()
    earlier = json.load(open(args.oracle_from)) if args.oracle_from else {}
    args.oracle = args.oracle or bool(earlier)
    results = {}
    for name in args.scenarios.split(","):
        runs = {"cli": [], "python": []}
        files = {"cli": name, "python": name + "-python"}
        scenarios = {f: scenario_file(n, args.steps, args.work_dir) for f, n in files.items()}
        oracle_plan, swept = None, None
        if name in earlier:
            oracle_plan = earlier[name]["oracle_plan"]
            swept = earlier[name]["oracle_sweep_samples_per_s"]
            print(f"{name} oracle (from {args.oracle_from}): {oracle_plan}", flush=True)
        elif args.oracle:
            oracle_plan, swept = sweep(args.sluice, scenarios["cli"],
                                       os.path.join(args.work_dir, name + "-oracle"),
                                       args.data_dir)
            print(f"{name} oracle: {oracle_plan} ({swept:.0f} samples/s in the sweep)",
                  flush=True)
        for frontend in ("cli", "python"):
            # The first repeat must plan cold: no metric store left by an earlier invocation.
            shutil.rmtree(os.path.join(args.work_dir, files[frontend], "metric-store"),
                          ignore_errors=True)
        for r in range(args.repeats):
            for frontend in ("cli", "python"):
                work = os.path.join(args.work_dir, files[frontend])
                got = bench(args.sluice, scenarios[frontend], work, args.data_dir, oracle_plan)
                runs[frontend].append(got)
                extra = f", oracle's plan {got['oracle_plan']:.0f}" if oracle_plan else ""
                print(f"{name} {frontend} {r + 1}: none {got['none']:.0f}, sluice "
                      f"{got['sluice']:.0f}{extra} ({got['plan']}, planned in "
                      f"{got['time_to_plan_s'] or 0:.2f} s)", flush=True)
        keys = ("none", "sluice") + (("oracle_plan",) if oracle_plan else ())
        med = {f: {k: statistics.median(x[k] for x in v) for k in keys}
               for f, v in runs.items()}
        for f, v in runs.items():
            med[f]["speedup"] = statistics.median(x["sluice"] / x["none"] for x in v)
            # The first repeat measures; the later ones plan from the metric store it left.
            later = v[1:] or v
            med[f]["time_to_plan_s"] = statistics.median(x["time_to_plan_s"] or 0 for x in later)
            med[f]["first_time_to_plan_s"] = v[0]["time_to_plan_s"] or 0
        med["python_over_cli"] = med["python"]["sluice"] / med["cli"]["sluice"]
        if oracle_plan:
            # The oracle: its plan fixed, the better frontend's median (both run it each repeat).
            oracle = max(med["cli"]["oracle_plan"], med["python"]["oracle_plan"])
            med["oracle"] = oracle
            med["python_over_oracle"] = med["python"]["sluice"] / oracle
            med["cli_over_oracle"] = med["cli"]["sluice"] / oracle
        results[name] = {"runs": runs, "medians": med, "steps": args.steps or None,
                         "oracle_plan": oracle_plan, "oracle_sweep_samples_per_s": swept}
    json.dump(results, open(args.out, "w"), indent=1)
    print()
    head = ("| scenario | CLI none | CLI sluice | CLI speed-up | Python none | Python sluice |"
            " Python speed-up | Python sluice / CLI sluice |")
    rule = "|---|---|---|---|---|---|---|---|"
    if args.oracle:
        head += " oracle's plan (CLI, Python) | Python sluice / oracle | CLI sluice / oracle |"
        rule += "---|---|---|"
    print(head + " time to plan, first run (CLI, Python) | from the store (CLI, Python) |")
    print(rule + "---|---|")
    for name, r in results.items():
        m = r["medians"]
        c, p = m["cli"], m["python"]
        row = (f"| {name} | {c['none']:.0f} | {c['sluice']:.0f} | {c['speedup']:.2f}x | "
               f"{p['none']:.0f} | {p['sluice']:.0f} | {p['speedup']:.2f}x | "
               f"{m['python_over_cli']:.2f} |")
        if args.oracle:
            row += (f" {c['oracle_plan']:.0f}, {p['oracle_plan']:.0f} | "
                    f"{m['python_over_oracle']:.2f} | {m['cli_over_oracle']:.2f} |")
        print(row + f" {c['first_time_to_plan_s']:.2f} s, {p['first_time_to_plan_s']:.2f} s | "
              f"{c['time_to_plan_s']:.2f} s, {p['time_to_plan_s']:.2f} s |")


if __name__ == "__main__":
    main()
