"""What the switch from the start window to the first offloading plan costs a run: for each
`sluice train` report under WORK/random-*/train-*.json whose first plan offloads and stays for
6 s, the samples it would have gained had the first 3 s after the switch run at the rate of the
rest, as a fraction of its samples from the switch on; the median per scenario.
  ramp.py WORK        (WORK: a random_suite.py --work-dir, or ab.sh's runs folder kept)"""
import bisect
import glob
import json
import statistics
import sys

for sdir in sorted(glob.glob(sys.argv[1] + "/random-*")):
    losses = []
    for path in sorted(glob.glob(sdir + "/train-*.json")):
        try:
            d = json.load(open(path))
        except (OSError, ValueError):
            continue
        tl = d.get("timeline") or []
        if not tl or not tl[0]["plan"].get("offload"):
            continue
        t0 = tl[0]["t_s"]
        if len(tl) > 1 and tl[1]["t_s"] < t0 + 6:
            continue
        t, s = d["progress"]["step_end_s"], d["progress"]["samples"]

        def at(x):
            i = min(max(bisect.bisect_left(t, x), 1), len(t) - 1)
            return t[i], s[i]

        a, b, end = at(t0), at(t0 + 3), (t[-1], s[-1])
        if end[0] - b[0] < 3:
            continue
        early = (b[1] - a[1]) / (b[0] - a[0])
        late = (end[1] - b[1]) / (end[0] - b[0])
        losses.append((late - early) * (b[0] - a[0]) / (end[1] - a[1]))
    if losses:
        print(f"{sdir.rsplit('/', 1)[1]:18} runs {len(losses)}: the switch costs "
              f"{100 * statistics.median(losses):.1f}% of the samples after it (median)")
