"""What the switch from the start window to the first offloading plan costs a run: for each
`sluice train` report under WORK/random-*/train-*.json whose first plan offloads and stays for
6 s, the samples it would have gained had the first 3 s after the switch run at the rate of the
rest, as a fraction of its samples from the switch on; the median per scenario.
  ramp.py WORK        (WORK: a random_suite.py --work-dir, or ab.sh's runs folder kept)"""
import glob
import statistics
import sys

from phases import reports, switch_loss

for sdir in sorted(glob.glob(sys.argv[1] + "/random-*")):
    losses = []
    for _, d in reports(sdir):
        tl = d.get("timeline") or []
        if not tl or not tl[0]["plan"].get("offload"):
            continue
        t0, end = tl[0]["t_s"], d["progress"]["step_end_s"][-1]
        if (len(tl) > 1 and tl[1]["t_s"] < t0 + 6) or end - (t0 + 3) < 3:
            continue
        loss = switch_loss(d, t0, 3, 3)
        if loss is not None:
            losses.append(loss[0])
    if losses:
        print(f"{sdir.rsplit('/', 1)[1]:18} runs {len(losses)}: the switch costs "
              f"{100 * statistics.median(losses):.1f}% of the samples after it (median)")
