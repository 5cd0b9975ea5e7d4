#!/usr/bin/python3
"""The randomized scenario suite: clusters nobody tuned the planner on.

Draws N testbed scenarios from a seed across the space users live in, runs each with
`sluice bench`, and summarizes how the `sluice` planner fares against the oracle's sweep and
against FastFlow:

  generate  writes N scenario files (deterministic for a seed) and an index;
  run       runs `sluice bench` on each (none, sluice twice: the first run measures, the
            second plans from the metric store the first left, fastflow where its profiling
            fits, and the oracle sweep), one report per scenario;
  table     a Markdown table (one row per scenario) and the distribution of sluice/oracle
            and sluice/fastflow, with a plot;
  pool      the same ratios per scenario over several whole runs of one planner, their
            rounds taken together, and for each under a line whether it is beyond noise.

What is drawn, per scenario:
  - the pipeline: the standard image pipeline (half the draws) or one of the seven job
    pipelines, each with the data set of its shipped scenario (bench/scenarios/);
  - the trainer's CPU quota, uniform in [0.3, 1.0];
  - one to three workers, each of 0.2-1.5 CPU: equal mixes (one quota for all) and unequal
    ones (drawn apart), scaled down so that all quotas together stay within 1.9 CPUs of the
    machine's 2;
  - per worker a link, log-uniform between 50 Mbit and 10 Gbit, and its storage: shared
    (70%), none (15%, read=local only) or slow (15%, 2-20 MB/s);
  - the accelerator step, from the template's all-local step scaled to the trainer's quota:
    a sixth of the scenarios are not stalled (1.5x the all-local step), the rest stall
    between 20% and 85% all-local. The all-local step of each template on a 0.5-CPU trainer
    is measured (`calibrate`, kept in bench/scenarios/random/calibration.json): the shipped
    scenarios' own steps are set for their stories (job-m is made not to stall at all), so
    a stall derived from them missed its target (4 of the first 12 draws of seed 1 did not
    stall).
The run length is set so that a stalled all-local run lasts about 12 s (at least the
template's steps): the closed loop needs seconds to measure and correct. A count cap alone
would cut the fast templates short (job-m's all-local step is about 1.5 ms: 600 steps
were 1-3 s, less than one all-local check), so the cap is on time; MAX_STEPS only bounds
the count.

usage:
  /usr/bin/python3 bench/random_suite.py calibrate [--sluice build/bin/sluice]
      [--out bench/scenarios/random/calibration.json]
  /usr/bin/python3 bench/random_suite.py generate --n 24 --seed 1 --out DIR
  /usr/bin/python3 bench/random_suite.py run DIR --sluice build/bin/sluice [--only NAME,...]
      [--policies none,sluice,sluice,fastflow,oracle] [--work-dir W] [--data-dir D]
      [--results R] [--oracle-plan-from SWEPT_RESULTS --repeats N]
  /usr/bin/python3 bench/random_suite.py table DIR [--results R] [--plot OUT.png]
      [--reference EARLIER_RESULTS [--beside]]
  /usr/bin/python3 bench/random_suite.py pool DIR --results R1,R2 --reference EARLIER_RESULTS
The oracle's sweep takes minutes a scenario. `run --oracle-plan-from` runs the plan that won
an earlier sweep beside `none` and `sluice` instead, all of them `--repeats` times
interleaved (every second round in reverse order), and `table --beside` judges sluice
against the median of those runs: a ratio measured in the same minutes, not against a rate
carried from another run. Its "paired"
column is the median of round-by-round ratios (each sluice run against the oracle's or
FastFlow's run of the same round, a minute apart), which the machine's drift between rounds
does not move; the medians' ratio is kept beside it.
Needs root for `calibrate` and `run` (the testbed).
"""

import argparse
import functools
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Templates: a shipped scenario's pipeline and data (its accelerator step and workers are
# not used: `calibrate` measures the template's all-local step on a 0.5-CPU trainer).
TEMPLATES = [
    ("image", "image-7to14.yaml"),
    ("job-c", "job-c.yaml"),
    ("job-g", "job-g.yaml"),
    ("job-l", "job-l.yaml"),
    ("job-m", "job-m.yaml"),
    ("job-r", "job-r.yaml"),
    ("job-s", "job-s.yaml"),
    ("job-t", "job-t.yaml"),
]
CALIBRATION = os.path.join(HERE, "scenarios", "random", "calibration.json")
CALIBRATION_CPUS = 0.5  # the trainer quota the all-local steps are measured on
MACHINE_CPUS = 1.9  # all quotas together: the 2-CPU machine, a little left for the kernel
RUN_S = 12.0        # a stalled all-local run lasts about this long
MAX_STEPS = 20000   # a bound on the count; at job-m's 1.5 ms all-local step still ~30 s


def draw(rng, index, calibration):
    # Half the draws are the image pipeline, the rest the seven jobs evenly.
    if rng.random() < 0.5:
        name, file = TEMPLATES[0]
    else:
        name, file = rng.choice(TEMPLATES[1:])
    template = yaml.safe_load(open(os.path.join(HERE, "scenarios", file)))
    trainer = round(rng.uniform(0.3, 1.0), 2)
    n = rng.choice([1, 2, 3])
    if n > 1 and rng.random() < 0.4:
        cpus = [rng.uniform(0.2, 1.5)] * n  # an equal mix
    else:
        cpus = [rng.uniform(0.2, 1.5) for _ in range(n)]
    room = MACHINE_CPUS - trainer
    if sum(cpus) > room:
        cpus = [c * room / sum(cpus) for c in cpus]
    cpus = [max(0.05, math.floor(c * 100) / 100) for c in cpus]
    workers = []
    for c in cpus:
        mbit = math.exp(rng.uniform(math.log(50), math.log(10000)))
        link = f"{int(round(mbit))}mbit" if mbit < 1000 else f"{mbit / 1000:.1f}gbit"
        roll = rng.random()
        if roll < 0.70:
            storage = "shared"
        elif roll < 0.85:
            storage = "none"
        else:
            storage = f"slow:{rng.randint(2, 20)}MB"
        workers.append({"cpus": c, "bandwidth": link, "latency": "0.2ms", "storage": storage})
    # All-local step: the template's, measured on 0.5 CPU, scaled by the trainer's quota
    # (the pipeline is CPU-bound on it).
    local_step_ms = calibration[name]["local_step_ms"] * CALIBRATION_CPUS / trainer
    if rng.random() < 1 / 6:
        stall = 0.0
        step_ms = 1.5 * local_step_ms
    else:
        stall = rng.uniform(0.20, 0.85)
        step_ms = local_step_ms * (1 - stall)
    steps = int(min(MAX_STEPS, max(template["steps"], RUN_S * 1000 / local_step_ms)))
    scenario = {
        "name": f"random-{index:02d}-{name}",
        "pipeline": template["pipeline"],
        "data": template["data"],
        "trainer": {"cpus": trainer},
        "workers": workers,
        "accelerator_ms": round(step_ms, 1),
        "steps": steps,
    }
    return scenario, stall


def calibrate(args):
    """Measures each template's all-local step: its pipeline on a 0.5-CPU trainer, fully
    stalled (a 1 ms accelerator step), with policy none."""
    out = {}
    for name, file in TEMPLATES:
        template = yaml.safe_load(open(os.path.join(HERE, "scenarios", file)))
        pipeline = yaml.safe_load(open(os.path.join(ROOT, template["pipeline"])))
        batch = int((pipeline.get("batch") or pipeline.get("padded_batch") or {}).get("size")
                    or 1)
        work = os.path.join(args.work_dir, "calibrate-" + name)
        os.makedirs(work, exist_ok=True)
        scenario = {
            "name": "calibrate-" + name,
            "pipeline": template["pipeline"],
            "data": template["data"],
            "trainer": {"cpus": CALIBRATION_CPUS},
            "workers": [{"cpus": 0.5, "bandwidth": "1gbit", "latency": "0.2ms",
                         "storage": "shared"}],
            "accelerator_ms": 1,
            "steps": min(600, max(60, 3 * template["steps"])),  # long enough for a steady rate
        }
        path = os.path.join(work, "scenario.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(scenario, f, sort_keys=False)
        rates = []
        for i in range(args.repeats):
            report = os.path.join(work, f"report-{i}.json")
            cmd = [args.sluice, "bench", path, "--policies", "none", "--json", report,
                   "--work-dir", work, "--no-verify"]
            if args.data_dir:
                cmd += ["--data-dir", args.data_dir]
            print("random_suite: " + " ".join(cmd), flush=True)
            if subprocess.run(cmd, cwd=ROOT).returncode != 0:
                sys.exit(f"random_suite: calibrating {name} failed")
            rates.append(json.load(open(report))["policies"]["none"]["samples_per_s"])
        rate = statistics.median(rates)
        out[name] = {"local_step_ms": round(1000 * batch / rate, 2), "batch": batch,
                     "samples_per_s": [round(r, 1) for r in rates],
                     "trainer_cpus": CALIBRATION_CPUS}
        print(f"random_suite: {name}: {rate:.1f} samples/s all-local on {CALIBRATION_CPUS} CPU, "
              f"step {out[name]['local_step_ms']} ms per batch of {batch}", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"random_suite: calibration in {args.out}")


def generate(args):
    if not os.path.exists(args.calibration):
        sys.exit(f"random_suite: no calibration ({args.calibration}); run `calibrate` first")
    calibration = json.load(open(args.calibration))
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    index = []
    for i in range(args.n):
        scenario, stall = draw(rng, i, calibration)
        path = os.path.join(args.out, scenario["name"] + ".yaml")
        with open(path, "w") as f:
            f.write(f"# Drawn by bench/random_suite.py (seed {args.seed}, scenario {i}); the\n"
                    f"# accelerator step aims at a {100 * stall:.0f}% all-local stall.\n")
            yaml.safe_dump(scenario, f, sort_keys=False)
        index.append({"name": scenario["name"], "file": os.path.basename(path),
                      "target_stall": round(stall, 3)})
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump({"seed": args.seed, "n": args.n, "scenarios": index}, f, indent=1)
    print(f"random_suite: {args.n} scenarios (seed {args.seed}) in {args.out}")


def run(args):
    index = json.load(open(os.path.join(args.dir, "index.json")))
    if args.results:
        os.makedirs(args.results, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    for entry in index["scenarios"]:
        if only and entry["name"] not in only:
            continue
        report = os.path.join(args.results or args.dir, entry["name"] + ".json")
        if os.path.exists(report) and not args.again:
            print(f"random_suite: {entry['name']}: done before ({report})")
            continue
        work = os.path.join(args.work_dir, entry["name"])
        # The first sluice run must plan cold: no metric store left by an earlier attempt.
        shutil.rmtree(os.path.join(work, "metric-store"), ignore_errors=True)
        policies = [p for p in args.policies.split(",") if p]
        if args.oracle_plan_from:
            plan = oracle_plan(args.oracle_plan_from, entry["name"])
            if plan is None:
                print(f"random_suite: {entry['name']}: no oracle sweep in "
                      f"{args.oracle_plan_from}: skipped", file=sys.stderr)
                continue
            if plan != "none":
                policies.append(plan)
        if args.fastflow_plan_from:
            plan = fastflow_plan(args.fastflow_plan_from, entry["name"])
            if plan and plan != "none":
                policies.append(plan)
        policies = ",".join(interleaved(policies, args.repeats))
        cmd = [args.sluice, "bench", os.path.join(args.dir, entry["file"]),
               "--policies", policies, "--json", report, "--work-dir", work,
               "--run-timeout", str(args.run_timeout)]
        if args.data_dir:
            cmd += ["--data-dir", args.data_dir]
        print("random_suite: " + " ".join(cmd), flush=True)
        done = subprocess.run(cmd, cwd=ROOT)
        if done.returncode != 0:
            print(f"random_suite: {entry['name']}: sluice bench exited {done.returncode}",
                  file=sys.stderr)


def reports(folders, name):
    """The reports of scenario `name` in `folders` (comma-separated), in that order."""
    for folder in [f for f in folders.split(",") if f]:
        path = os.path.join(folder, name + ".json")
        if os.path.exists(path):
            yield json.load(open(path))


def interleaved(policies, repeats):
    """`repeats` rounds of the list `policies` (a fixed plan's string has commas of its own,
    so each is kept whole), every second round in reverse order (A B, B A, A B, ...): a drift
    within a round then falls on each policy alike, where one fixed order had always put
    `sluice` right after `none` and FastFlow's plan last."""
    return [p for i in range(repeats) for p in (policies if i % 2 == 0 else policies[::-1])]


def oracle_plan(folders, name):
    """The plan that won the oracle's sweep of scenario `name` in the first of `folders`
    (comma-separated) that swept it, as a `fixed:` policy ("none" when all-local won); None
    without a sweep. Run beside `none` and `sluice`, it judges them against the same machine
    minute: a rate carried from another run moves with that run's machine (job-m's all-local
    rate moved by up to 40% between runs)."""
    for report in reports(folders, name):
        policies = report.get("policies", {})
        sweep = (policies.get("oracle") or {}).get("sweep") or []
        runs = [s for s in sweep if s.get("samples_per_s")]
        if runs:
            best = max(runs, key=lambda s: s["samples_per_s"])
            none = (policies.get("none") or {}).get("samples_per_s") or 0
            return best["policy_arg"] if best["samples_per_s"] > none else "none"
    return None


def fastflow_plan(folders, name):
    """The plan FastFlow chose for scenario `name` in the first of `folders` that ran it, as
    a `fixed:` policy ("none" when it offloaded nothing); None where it did not run."""
    for report in reports(folders, name):
        fast = report.get("policies", {}).get("fastflow")
        if fast and fast.get("samples_per_s"):
            plan = fast.get("plan") or {}
            return plan.get("policy_string") if plan.get("offload") else "none"
    return None


def beside_rate(report, plan, none):
    """A plan run beside the others: all-local's median where the plan is all-local, else the
    median of its runs; None where it did not run."""
    if plan == "none":
        return none
    runs = plan_rates(report, plan) if plan else []
    return statistics.median(runs) if runs else None


def plan_rates(report, plan):
    """The rates of the runs of fixed plan `plan` (a policy string) in a report."""
    return [result["samples_per_s"] for key, result in report.get("policies", {}).items()
            if key.split("#")[0] == plan and result.get("samples_per_s")]


# Two standard errors and at least 2% apart: the controller's own test of two measured rates
# (ControllerOptions::noise_z and min_rate_gap, policy/controller.h), so the suite calls a
# plan slower on the same evidence the planner would.
NOISE_Z = 2
MIN_RATE_GAP = 0.02
# The line for sluice against the oracle's plan (docs/BENCHMARKS.md).
ORACLE_LINE = 0.95


def round_ratios(sluice, other):
    """The round-by-round ratios sluice[i] / other[i] (runs interleaved in rounds: a round's
    runs are minutes apart, so the machine's drift between rounds cancels); none without
    equal counts."""
    if not sluice or not other or len(sluice) != len(other):
        return []
    return [s / o for s, o in zip(sluice, other)]


def beside_rounds(report, name, reference):
    """For a report that ran the oracle's and FastFlow's plans beside the policies: their
    rates (all-local's median where the plan is all-local; None where it did not run) and
    sluice's round-by-round ratios to each (to the oracle: to all-local where all-local
    measured at least the oracle's plan)."""
    r = rates(report)
    sluice, none_runs = r.get("sluice", []), r.get("none", [])
    if not none_runs:
        return None, None, [], []
    none = statistics.median(none_runs)
    oplan, fplan = oracle_plan(reference, name), fastflow_plan(reference, name)
    o, f = beside_rate(report, oplan, none), beside_rate(report, fplan, none)
    runs_of = lambda plan: none_runs if plan == "none" else plan_rates(report, plan)
    to_oracle = round_ratios(sluice, none_runs if none >= o else runs_of(oplan)) \
        if o is not None else []
    to_fastflow = round_ratios(sluice, runs_of(fplan)) if f is not None else []
    return o, f, to_oracle, to_fastflow


def pool(args):
    """sluice / oracle and sluice / FastFlow per scenario over several whole runs of the suite
    (reports that ran the plans beside, as `table --beside`), the rounds of all of them taken
    together: the median of every round's ratio. Pool only runs of the same planner code: a
    scenario's rounds then sample one distribution, and six rounds pin its median better than
    one run's three."""
    with open(os.path.join(args.dir, "index.json")) as f:
        index = json.load(f)
    folders = [d for d in args.results.split(",") if d]
    print("| scenario | rounds | sluice / oracle | sluice / FastFlow |")
    print("|---|---|---|---|")
    to_oracle_all, to_fastflow_all = [], []
    under_oracle, under_fastflow = [], []
    pooled_reports, pooled_rounds = [], []  # for print_noise_ceiling
    for entry in index["scenarios"]:
        to_oracle, to_fastflow, reports_of = [], [], []
        for folder in folders:
            path = os.path.join(folder, entry["name"] + ".json")
            if os.path.exists(path):
                reports_of.append(json.load(open(path)))
                _, _, o, f = beside_rounds(reports_of[-1], entry["name"], args.reference)
                to_oracle += o
                to_fastflow += f
        mo = statistics.median(to_oracle) if to_oracle else None
        mf = statistics.median(to_fastflow) if to_fastflow else None
        cv = run_noise(*reports_of)
        if mo is not None:
            to_oracle_all.append(mo)
            if mo < ORACLE_LINE:
                under_oracle.append((entry["name"], mo, cv,
                                     below_beyond_noise(mo, cv, len(to_oracle), ORACLE_LINE)))
        if mf is not None:
            to_fastflow_all.append(mf)
            if mf < 1:
                under_fastflow.append((entry["name"], mf, cv,
                                       below_beyond_noise(mf, cv, len(to_fastflow))))
        fmt = lambda v: f"{v:.3f}" if v is not None else "-"
        print(f"| {entry['name']} | {len(to_oracle)} | {fmt(mo)} | {fmt(mf)} |")
        if mo is not None:
            pooled_reports += reports_of
            pooled_rounds.append(len(to_oracle))
    print()
    if to_oracle_all:
        print(f"pooled sluice / oracle over {len(to_oracle_all)} scenarios: median "
              f"{statistics.median(to_oracle_all):.3f}, min {min(to_oracle_all):.3f}, "
              f">= {ORACLE_LINE} on {sum(v >= ORACLE_LINE for v in to_oracle_all)}, "
              f">= 0.85 on {sum(v >= 0.85 for v in to_oracle_all)}")
    if to_fastflow_all:
        print(f"pooled sluice / fastflow over {len(to_fastflow_all)} scenarios: median "
              f"{statistics.median(to_fastflow_all):.3f}, min {min(to_fastflow_all):.3f}, "
              f">= 1 on {sum(v >= 1 for v in to_fastflow_all)}")
    print_under(under_oracle, under_fastflow)
    if to_oracle_all and pooled_reports:
        print_noise_ceiling(pooled_reports, len(to_oracle_all), statistics.median(pooled_rounds))


def run_noise(*reports):
    """The run-to-run noise of one fixed policy in this scenario: the pooled coefficient of
    variation of the rates of every policy run more than once with no planner in the loop
    (all-local and the replayed plans), within each report (a whole run of the suite; several
    are pooled by their degrees of freedom, as one run's policies are). None with under two
    degrees of freedom (runs beyond the first of each policy)."""
    groups = []
    for report in reports:
        of_report = {}
        for key, result in report.get("policies", {}).items():
            base = key.split("#")[0]
            if (base == "none" or base.startswith("fixed:")) and result.get("samples_per_s"):
                of_report.setdefault(base, []).append(result["samples_per_s"])
        groups += of_report.values()
    sq, dof = 0.0, 0
    for rates_of in groups:
        if len(rates_of) < 2:
            continue
        mean = statistics.mean(rates_of)
        sq += sum((v / mean - 1) ** 2 for v in rates_of)
        dof += len(rates_of) - 1
    return math.sqrt(sq / dof) if dof >= 2 else None


@functools.lru_cache(maxsize=None)
def median_spread(rounds, draws=20000):
    """The spread of the median of `rounds` normal draws, as a multiple of their mean's: 1 for
    one or two (the median is then the mean), ~1.1-1.25 beyond (sqrt(pi / 2) in the limit).
    From a seeded simulation, so the same for every call; `draws` puts the estimate within
    ~0.5% (a standard deviation from n draws is off by about 1 / sqrt(2n))."""
    if rounds <= 2:
        return 1.0
    rng = random.Random(rounds)
    medians = [statistics.median(rng.gauss(0, 1) for _ in range(rounds)) for _ in range(draws)]
    return statistics.pstdev(medians) * math.sqrt(rounds)


def paired_median_spread(cv, rounds):
    """The spread of a paired median of `rounds` round ratios of one plan whose runs vary by
    `cv`: a ratio of two runs has sqrt(2) x cv, the mean of `rounds` of them 1 / sqrt(rounds) of
    that, their median median_spread(rounds) times the mean's."""
    return cv * math.sqrt(2 / rounds) * median_spread(int(rounds))


def below_beyond_noise(ratio, cv, n, line=1.0):
    """Whether a paired median of `n` round ratios lies under `line` by more than NOISE_Z
    times its spread (paired_median_spread) and MIN_RATE_GAP."""
    if ratio is None or cv is None or n < 1:
        return None
    return ratio < line - max(MIN_RATE_GAP, NOISE_Z * paired_median_spread(cv, n))


def noise_ceiling(cv, scenarios, rounds, line=ORACLE_LINE, share=0.9):
    """What a planner that ran the oracle's own plan would score on the paired comparison,
    given the run-to-run noise of a fixed plan (`cv`, the pooled coefficient of variation):
    the paired median of `rounds` rounds spreads by paired_median_spread, so it falls under
    `line` with probability Phi(ln(line) / that spread) on each scenario, independently. Returns (that
    probability, the expected number of `scenarios` under the line, the probability that at
    least `share` of them are at or over it), or None without a noise figure."""
    if cv is None or cv <= 0 or scenarios < 1 or rounds < 1:
        return None
    spread = paired_median_spread(cv, rounds)
    p = 0.5 * (1 + math.erf(math.log(line) / spread / math.sqrt(2)))
    allowed = scenarios - math.ceil(share * scenarios - 1e-9)
    passes = sum(math.comb(scenarios, k) * p ** k * (1 - p) ** (scenarios - k)
                 for k in range(allowed + 1))
    return p, scenarios * p, passes


def print_noise_ceiling(reports, scenarios, rounds):
    """The bar set against the runs' own noise (noise_ceiling): how many of `scenarios` a
    planner that always ran the oracle's plan would leave under the line by chance alone, with
    `rounds` rounds each (their median over scenarios)."""
    cv = run_noise(*reports)
    got = noise_ceiling(cv, scenarios, rounds)
    if got is None:
        return
    p, expected, passes = got
    print(f"noise ceiling: the oracle's own plan in sluice's place ({rounds:g} rounds), with "
          f"these runs' run-to-run noise of a fixed plan ({100 * cv:.1f}%, pooled over "
          f"{len(reports)} reports), would be under {ORACLE_LINE} of itself on {expected:.1f} "
          f"of {scenarios} by chance ({100 * p:.1f}% each), and at or over it on 90% of them "
          f"in {100 * passes:.0f}% of passes")


def print_under(under_oracle, under_fastflow):
    """One line per scenario under a line (ORACLE_LINE of the oracle, FastFlow): its paired
    median, the run-to-run noise of a fixed plan there, and whether the shortfall is beyond
    that noise (below_beyond_noise) or within it."""
    for what, under in ((f"under {ORACLE_LINE} of the oracle", under_oracle),
                        ("under fastflow", under_fastflow)):
        for name, ratio, cv, beyond in under:
            noise = f"{100 * cv:.1f}%" if cv is not None else "unknown"
            verdict = {True: "below beyond noise", False: "within noise",
                       None: "not judged"}[beyond]
            print(f"{what}: {name} paired {ratio:.4f}, run-to-run noise of a fixed plan "
                  f"{noise}: {verdict}")


def sluice_runs(report):
    """Each sluice run's (time to plan, plan ran longest or last) in order."""
    out = []
    for key, result in report.get("policies", {}).items():
        if key.split("#")[0] == "sluice":
            plan = (result.get("plan") or {}).get("policy_string") or \
                (result.get("plan") or {}).get("policy") or "-"
            out.append((result.get("time_to_plan_s"), plan))
    return out


def rates(report):
    """Samples/s per policy; a repeated policy ("sluice", "sluice#2") as a list, in order."""
    out = {}
    for key, result in report.get("policies", {}).items():
        rate = result.get("samples_per_s")
        if rate:
            out.setdefault(key.split("#")[0], []).append(rate)
    return out


def from_reference(folders, name, r, none_now, oracle, fast):
    """The oracle's and FastFlow's rates for a report that did not run them, from the report
    of the same scenario in the first of `folders` (comma-separated) that has one, as
    speed-ups over all-local carried to this run's all-local: rate_ref / none_ref * none_now.
    A run's all-local moves with the machine and the build, and a ratio to the all-local
    measured beside it moves less than a rate does."""
    first = next(reports(folders, name), None)
    if first is None or not none_now:
        return oracle, fast
    ref = rates(first)
    none_ref = ref.get("none", [None])[0]
    if not none_ref:
        return oracle, fast
    scale = none_now / none_ref
    if "oracle" not in r and "oracle" in ref:
        oracle = max(max(ref["oracle"]) * scale, none_now)
    if "fastflow" not in r and "fastflow" in ref:
        fast = ref["fastflow"][0] * scale
    return oracle, fast


def table(args):
    index = json.load(open(os.path.join(args.dir, "index.json")))
    rows, vs_oracle, vs_fastflow = [], [], []
    print("| scenario | target stall | none | sluice (first, store) | fastflow | oracle |"
          " sluice / oracle | sluice / fastflow | paired: / oracle, / fastflow |"
          " time to plan (s) | sluice's last plan |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    paired_oracle, paired_fastflow = [], []
    plan_times = []
    under_fastflow = []  # (scenario, paired ratio, noise, beyond noise)
    under_oracle = []  # the same, under ORACLE_LINE of the oracle
    ceiling_reports, ceiling_rounds = [], []  # for noise_ceiling
    for entry in index["scenarios"]:
        path = os.path.join(args.results or args.dir, entry["name"] + ".json")
        if not os.path.exists(path):
            continue
        report = json.load(open(path))
        r = rates(report)
        runs = sluice_runs(report)
        plan_times += [t for t, _ in runs if t is not None]
        sluice = r.get("sluice", [])
        best = statistics.median(sluice) if sluice else None
        none = statistics.median(r["none"]) if "none" in r else None
        # The oracle's sweep includes all-local; without a sweep there is no oracle.
        oracle = max(r["oracle"] + r.get("none", [0])) if "oracle" in r else None
        fast = r.get("fastflow", [None])[0]
        if args.reference and ("oracle" not in r or "fastflow" not in r):
            oracle, fast = from_reference(args.reference, entry["name"], r, none, oracle, fast)
        po = pf = None
        to_oracle, to_fastflow = [], []
        if args.beside and "oracle" not in r and none:
            # The sweep's winning plan and FastFlow's run beside the others (`run
            # --oracle-plan-from`, `--fastflow-plan-from`): their medians, not carried rates.
            o, f, to_oracle, to_fastflow = beside_rounds(report, entry["name"], args.reference)
            if o is not None:
                oracle = max(o, none)
                po = statistics.median(to_oracle) if to_oracle else None
            if f is not None:
                fast = f
                pf = statistics.median(to_fastflow) if to_fastflow else None
        if po:
            ceiling_reports.append(report)
            ceiling_rounds.append(len(to_oracle))
            paired_oracle.append(po)
            if po < ORACLE_LINE:
                cv = run_noise(report)
                under_oracle.append((entry["name"], po, cv,
                                     below_beyond_noise(po, cv, len(to_oracle), ORACLE_LINE)))
        if pf:
            paired_fastflow.append(pf)
            if pf < 1:
                cv = run_noise(report)
                under_fastflow.append((entry["name"], pf, cv,
                                       below_beyond_noise(pf, cv, len(to_fastflow))))
        so = best / oracle if best and oracle else None
        sf = best / fast if best and fast else None
        if so:
            vs_oracle.append(so)
        if sf:
            vs_fastflow.append(sf)
        fmt = lambda v: f"{v:.0f}" if v else "-"
        print(f"| {entry['name']} | {100 * entry['target_stall']:.0f}% | "
              f"{fmt(none)} | {' / '.join(fmt(v) for v in sluice) or '-'} | "
              f"{fmt(fast)} | {fmt(oracle)} | {so and f'{so:.2f}' or '-'} | "
              f"{sf and f'{sf:.2f}' or '-'} | "
              f"{po and f'{po:.2f}' or '-'}, {pf and f'{pf:.2f}' or '-'} | "
              f"{' / '.join(f'{t:.1f}' for t, _ in runs if t is not None) or '-'} | "
              f"{' / '.join(p for _, p in runs) or '-'} |")
    if vs_oracle:
        print()
        print(f"sluice / oracle over {len(vs_oracle)} scenarios: median "
              f"{statistics.median(vs_oracle):.2f}, min {min(vs_oracle):.2f}, "
              f">= 0.95 on {sum(v >= 0.95 for v in vs_oracle)}")
    if paired_oracle:
        print(f"paired (round by round) sluice / oracle over {len(paired_oracle)} scenarios: "
              f"median {statistics.median(paired_oracle):.2f}, min {min(paired_oracle):.2f}, "
              f">= 0.95 on {sum(v >= 0.95 for v in paired_oracle)}")
    if paired_fastflow:
        print(f"paired sluice / fastflow over {len(paired_fastflow)} scenarios: median "
              f"{statistics.median(paired_fastflow):.2f}, min {min(paired_fastflow):.2f}, "
              f">= 1 on {sum(v >= 1 for v in paired_fastflow)}")
    print_under(under_oracle, under_fastflow)
    if paired_oracle and ceiling_reports:
        print_noise_ceiling(ceiling_reports, len(paired_oracle), statistics.median(ceiling_rounds))
    if plan_times:
        print(f"time to plan: max {max(plan_times):.1f} s over {len(plan_times)} sluice runs")
    if vs_fastflow:
        print(f"sluice / fastflow over {len(vs_fastflow)} scenarios: median "
              f"{statistics.median(vs_fastflow):.2f}, min {min(vs_fastflow):.2f}")
    if args.plot and vs_oracle:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.hist([vs_oracle, vs_fastflow], bins=20, label=["sluice / oracle", "sluice / fastflow"])
        ax.axvline(0.95, color="gray", linestyle="--")
        ax.set_xlabel("ratio of steady samples/s")
        ax.set_ylabel("scenarios")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("--sluice", default=os.path.join(ROOT, "build/bin/sluice"))
    c.add_argument("--out", default=CALIBRATION)
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--work-dir", default="/tmp/sluice-random-suite")
    c.add_argument("--data-dir", default="")
    g = sub.add_parser("generate")
    g.add_argument("--calibration", default=CALIBRATION)
    g.add_argument("--n", type=int, default=24)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--sluice", default=os.path.join(ROOT, "build/bin/sluice"))
    r.add_argument("--policies", default="none,sluice,sluice,fastflow,oracle")
    r.add_argument("--only", default="")
    r.add_argument("--again", action="store_true", help="re-run scenarios with a report")
    r.add_argument("--work-dir", default="/tmp/sluice-random-suite")
    r.add_argument("--data-dir", default="")
    r.add_argument("--run-timeout", type=int, default=300)
    r.add_argument("--results", default="", help="folder for the reports (default: DIR)")
    r.add_argument("--oracle-plan-from", default="",
                   help="folders (comma-separated, first match wins) of reports with the "
                        "oracle's sweep: its winning plan runs beside the policies, as a "
                        "fixed plan")
    r.add_argument("--fastflow-plan-from", default="",
                   help="folders of reports where FastFlow ran: the plan it chose runs beside "
                        "the policies, as a fixed plan (its steady rate without its profiling "
                        "runs)")
    r.add_argument("--repeats", type=int, default=1,
                   help="run the policies (and the oracle's plan) this many times, "
                        "interleaved; the table takes medians")
    t = sub.add_parser("table")
    t.add_argument("dir")
    t.add_argument("--plot", default="")
    t.add_argument("--results", default="", help="folder of the reports (default: DIR)")
    t.add_argument("--reference", default="",
                   help="folders (comma-separated, first match wins) of earlier reports for the "
                        "oracle and FastFlow where a report lacks them (carried over as "
                        "speed-ups over all-local)")
    t.add_argument("--beside", action="store_true",
                   help="the reports ran the oracle's (and FastFlow's) plan beside (run "
                        "--oracle-plan-from / --fastflow-plan-from with the --reference "
                        "folders): their medians, or all-local's where the plan is all-local, "
                        "are the oracle's and FastFlow's rates")
    o = sub.add_parser("pool")
    o.add_argument("dir")
    o.add_argument("--results", required=True,
                   help="folders (comma-separated) of whole runs with the plans beside, of the "
                        "same planner code")
    o.add_argument("--reference", required=True, help="as `table --reference`")
    args = p.parse_args()
    {"calibrate": calibrate, "generate": generate, "run": run, "table": table,
     "pool": pool}[args.command](args)


if __name__ == "__main__":
    main()
