"""Each policy's runs in the reports given (rate, the worker's share of the samples, the
link's mean MB/s to the trainer) and its median rate:  summary.py REPORT.json ..."""
import json
import statistics
import sys

runs = {}
for path in sys.argv[1:]:
    for key, r in json.load(open(path))["policies"].items():
        if not r.get("samples_per_s"):
            continue
        base = key.split("#")[0]
        mbs = r["link_bytes"][0]["to_trainer"] / r["wall_s"] / 1e6 if r.get("link_bytes") else 0
        runs.setdefault(base, []).append((r["samples_per_s"], r["share"].get("w0", 0), mbs))
for base, v in runs.items():
    print(f"{base}: median {statistics.median(x[0] for x in v):.0f} over {len(v)} runs")
    print("   ", ", ".join(f"{x[0]:.0f} (w0 {x[1]:.3f}, {x[2]:.1f} MB/s)" for x in v))
