"""Each `sluice train` report under the work folders given (WORK/train-K.json): which policy
ran (`sluice` when it has a timeline or planned), its steady rate, its rate from 8 s to the end
and from 2 s to 8 s (from progress.step_end_s), and its decisions with their ratios.
  phases.py WORK ..."""
import bisect
import glob
import json
import sys

for work in sys.argv[1:]:
    paths = glob.glob(work + "/train-*.json")
    for path in sorted(paths, key=lambda p: int(p.rsplit("-", 1)[1][:-5])):
        d = json.load(open(path))
        t, s = d["progress"]["step_end_s"], d["progress"]["samples"]

        def rate(a, b):
            i, j = bisect.bisect_left(t, a), bisect.bisect_left(t, b) - 1
            return (s[j] - s[i]) / (t[j] - t[i]) if j > i else 0

        tl = d["timeline"]
        policy = "sluice" if tl or d["time_to_plan_s"] > 0 else "none"
        decisions = [(round(e["t_s"], 1), e["kind"], round(e["plan"].get("ratio") or 0, 3)) for e in tl]
        print(f"{path:28} {policy:7} steady {d['steady']['samples_per_s']:4.0f}  8-end "
              f"{rate(8, t[-1]):4.0f}  2-8 {rate(2, 8):4.0f}  {decisions}")
