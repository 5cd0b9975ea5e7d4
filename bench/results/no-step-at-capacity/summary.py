"""Each run's steady rate, final ratio and decisions (steps, trials, rollbacks), and each
build's median: summary.py OUT (the folder ab.sh wrote)."""
import glob
import json
import statistics
import sys

out = sys.argv[1]
rates = {}
for f in sorted(glob.glob(out + "/*-[0-9]*.json")):
    if f.endswith(".train.json"):
        continue
    build = f.split("/")[-1].split("-")[0]
    run = json.load(open(f))["policies"]["sluice"]
    timeline = run["timeline"]
    print(f.split("/")[-1], round(run["samples_per_s"]), "ratio",
          round(run["plan"].get("ratio") or 0, 3), "decisions",
          " ".join(e["kind"] for e in timeline))
    for e in timeline:
        if e["kind"] in ("adjust_ratio", "trial", "rollback"):
            print("     ", round(e["t_s"], 1), e["kind"], e["reason"][:120])
    rates.setdefault(build, []).append(run["samples_per_s"])
for build, v in rates.items():
    print(build, "median", round(statistics.median(v)), [round(x) for x in v])
