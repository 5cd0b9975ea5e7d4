#!/usr/bin/python3
"""From a trainer's temporary per-batch trace (TRACE lines: time, batches, local and remote
samples, process CPU, Loaders created, minor faults), the faults of the first Loader and of
the first 1.5 s after the switch to the first plan.
usage: faults.py FILE..."""
import re, sys

for f in sys.argv[1:]:
    rows = []
    for line in open(f):
        m = re.match(r"TRACE ([\d.]+) b=(\d+) local=(\d+) remote=(\d+) cpu=([\d.]+) loaders=(\d+) faults=(\d+)", line)
        if m:
            rows.append([float(x) for x in m.groups()])
    if not rows:
        continue
    first = [r for r in rows if r[5] == 1]
    switch = next((r for r in rows if r[5] == 2), None)
    after = [r for r in rows if switch and r[5] == 2 and r[0] <= switch[0] + 1.5]
    start = first[-1][6] if first else 0
    at_switch = after[-1][6] - first[-1][6] if after and first else 0
    print(f"{f}: first Loader {start:.0f} faults by {first[-1][0]:.2f} s; "
          f"switch at {switch[0] if switch else 0:.2f} s, {at_switch:.0f} faults in the 1.5 s after")
