"""Each `sluice train` report under the work folders given (WORK/train-K.json): which policy
ran (`sluice` when it has a timeline or planned), its steady rate, its rate from 8 s to the end
and from 2 s to 8 s (from progress.step_end_s), and its decisions with their ratios.
  phases.py WORK ..."""
import bisect
import glob
import json
import sys


def rate(report, a, b):
    """Samples per second between the first steps ending at or after `a` and before `b`
    (0: fewer than two steps there)."""
    t, s = report["progress"]["step_end_s"], report["progress"]["samples"]
    i, j = bisect.bisect_left(t, a), bisect.bisect_left(t, b) - 1
    return (s[j] - s[i]) / (t[j] - t[i]) if j > i else 0


def switch_loss(report, t0, span, later):
    """What the `span` seconds after a switch at `t0` lost against the rate from `later` s after
    it to the run's end, as a fraction of the samples from `t0` on; with the rates over those
    `span` seconds and from `later` on. None when a rate has fewer than two steps."""
    end = report["progress"]["step_end_s"][-1]
    early, late = rate(report, t0, t0 + span), rate(report, t0 + later, end)
    whole = rate(report, t0, end)
    if min(early, late, whole) <= 0:
        return None
    return (late - early) * span / (whole * (end - t0)), early, late


def reports(work):
    """The train-K.json reports in `work`, in K's order, with their paths."""
    paths = glob.glob(work + "/train-*.json")
    for path in sorted(paths, key=lambda p: int(p.rsplit("-", 1)[1][:-5])):
        try:
            yield path, json.load(open(path))
        except (OSError, ValueError):
            continue


if __name__ == "__main__":
    for work in sys.argv[1:]:
        for path, d in reports(work):
            end = d["progress"]["step_end_s"][-1]
            tl = d["timeline"]
            policy = "sluice" if tl or d["time_to_plan_s"] > 0 else "none"
            decisions = [(round(e["t_s"], 1), e["kind"], round(e["plan"].get("ratio") or 0, 3))
                         for e in tl]
            print(f"{path:28} {policy:7} steady {d['steady']['samples_per_s']:4.0f}  8-end "
                  f"{rate(d, 8, end):4.0f}  2-8 {rate(d, 2, 8):4.0f}  {decisions}")
