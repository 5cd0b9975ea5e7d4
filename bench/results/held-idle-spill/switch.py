"""The seconds around a `sluice` run's switch from its all-local start window to its first
plan, from the reports ab.sh keeps (KEEP=1: OUT/SIDE-ROUND.train.json): the rate over the
1.5 s before the switch, over the 1.5 s after it, and from 3 s after it to the run's end;
then per side the medians of after / before and of the samples the first 1.5 s lost against
the later rate, as a fraction of the samples from the switch on.
  switch.py OUT"""
import glob
import json
import statistics
import sys

from phases import rate, switch_loss

sides = {}
for path in sorted(glob.glob(sys.argv[1] + "/*.train.json")):
    side, rnd = path.rsplit("/", 1)[1][: -len(".train.json")].rsplit("-", 1)
    d = json.load(open(path))
    tl = d.get("timeline") or []
    if not tl or not tl[0]["plan"].get("offload"):
        continue
    t0 = tl[0]["t_s"]
    before, loss = rate(d, t0 - 1.5, t0), switch_loss(d, t0, 1.5, 3)
    if before <= 0 or loss is None:
        continue
    lost, after, later = loss
    sides.setdefault(side, []).append((after / before, lost))
    print(f"{side:5} round {rnd:>2}  before {before:5.0f}  after {after:5.0f}  later {later:5.0f}"
          f"  after/before {after / before:.2f}  lost {100 * lost:4.1f}%")
for side, v in sides.items():
    print(f"{side}: {len(v)} runs, median after/before {statistics.median(a for a, _ in v):.2f}, "
          f"median lost {100 * statistics.median(l for _, l in v):.1f}% of the samples after the switch")
