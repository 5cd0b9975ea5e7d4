"""Pools the offload bench's A/B folders at cut 5 (bench/results/shared-ring/ab.sh): per build,
every round's best mixed / all-local, best mixed rate, remote-only rate and the trainer's CPU
per offloaded sample over a local one, with their medians; and the per-round paired ratio of
the best mixed rates (new / old, the same round).
Usage: pooled.py DIR[:ROUNDS] ..."""
import json
import statistics
import sys

keys = ("mixed_over_local", "best_mixed_samples_per_s", "remote_samples_per_s", "trainer_cpu_share")
vals = {b: {k: [] for k in keys} for b in ("old", "new")}
paired = []
for arg in sys.argv[1:]:
    d, _, n = arg.partition(":")
    for r in range(1, int(n or 4) + 1):
        got = {}
        for b in ("old", "new"):
            j = json.load(open(f"{d}/r{r}-{b}.json"))
            c = j["cuts"]["5"]
            c = dict(c, remote_samples_per_s=c["remote_over_local"] * j["local_samples_per_s"])
            for k in keys:
                vals[b][k].append(c[k])
            got[b] = c["best_mixed_samples_per_s"]
        paired.append(got["new"] / got["old"])
for b in ("old", "new"):
    for k in keys:
        xs = vals[b][k]
        print(f"{b} {k}: " + ", ".join(f"{x:.3f}" for x in xs) + f"  median {statistics.median(xs):.3f}")
print("paired best mixed new/old: " + ", ".join(f"{x:.3f}" for x in paired) +
      f"  median {statistics.median(paired):.3f}")
