"""Per round and build: all-local, and at each cut remote-only / all-local, best mixed /
all-local, the trainer's CPU per offloaded sample / local, and the reading's share.
Usage: summary.py DIR ROUNDS"""
import json
import statistics
import sys

d, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for b in ("old", "new"):
    for r in range(1, rounds + 1):
        j = json.load(open(f"{d}/r{r}-{b}.json"))
        for cut, c in j["cuts"].items():
            rows.setdefault((b, cut), []).append(
                (j["local_samples_per_s"], c["remote_over_local"], c["mixed_over_local"],
                 c["best_mixed_samples_per_s"], c["trainer_cpu_share"], c["read_share"]))
for (b, cut), v in sorted(rows.items()):
    cols = list(zip(*v))
    fmt = lambda xs, f: ", ".join(f.format(x) for x in xs) + "  (median " + f.format(statistics.median(xs)) + ")"
    print(f"{b} cut {cut}: all-local {fmt(cols[0], '{:.0f}')}")
    print(f"   remote/local {fmt(cols[1], '{:.3f}')}")
    print(f"   mixed/local  {fmt(cols[2], '{:.2f}')}  rate {fmt(cols[3], '{:.0f}')}")
    print(f"   trainer CPU per offloaded / local {fmt(cols[4], '{:.3f}')}; receive {fmt(cols[5], '{:.3f}')}")
