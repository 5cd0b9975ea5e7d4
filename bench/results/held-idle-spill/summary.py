"""ab.sh's rounds: each run's rate, its plans in order, and what a spill-over trial read of
the trainer's CPU; then each side's median and the paired ratios:  summary.py OUT"""
import glob
import json
import re
import statistics
import sys

out = sys.argv[1]
rates = {}
paths = [p for p in glob.glob(f"{out}/*-*.json") if not p.endswith(".train.json")]
for path in sorted(paths, key=lambda p: (int(p.rsplit("-", 1)[1][:-5]), p)):
    side, rnd = path.rsplit("/", 1)[1][:-5].rsplit("-", 1)
    for key, r in json.load(open(path))["policies"].items():
        rate = r.get("samples_per_s") or 0
        rates.setdefault(side, {})[int(rnd)] = rate
        plans = " > ".join(f"{t['kind']} {t['plan'].get('ratio') or 0:.3f}"
                           f"{' spill' if t['plan'].get('spill') == 'all' else ''} @{t['t_s']:.1f}"
                           for t in r.get("timeline", []))
        busy = re.findall(r"it used ([\d.]+%) of its CPU", json.dumps(r.get("timeline", [])))
        print(f"round {rnd} {side:5} {rate:7.0f}  {plans}  {' '.join(busy)}")
rounds = sorted(set.intersection(*(set(v) for v in rates.values())))
for side, v in rates.items():
    print(f"{side}: median {statistics.median(v[r] for r in rounds):.0f} over {len(rounds)} rounds")
if {"old", "new", "fixed"} <= set(rates):
    for a, b in (("new", "old"), ("new", "fixed"), ("old", "fixed")):
        ratios = [rates[a][r] / rates[b][r] for r in rounds]
        print(f"{a}/{b}: median of paired {statistics.median(ratios):.3f}, "
              f"ratio of medians {statistics.median(rates[a][r] for r in rounds) / statistics.median(rates[b][r] for r in rounds):.3f}")
