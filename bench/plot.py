#!/usr/bin/python3
"""Plots a `sluice bench` report.

usage: /usr/bin/python3 bench/plot.py REPORT.json OUT.png

OUT.png: samples/s and stall fraction per policy (bars). When a policy carries a sweep (the
oracle), OUT-sweep.png: samples/s against the offload ratio, one line per (cut, read mode),
with the plans the policies chose marked.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plan_key(plan):
    cut = plan.get("cut")
    read = plan.get("read_mode") or "-"
    return f"cut={cut}, read={read}"


ORDER = {"none": 0, "full": 1, "fastflow": 2, "sluice": 3, "oracle": 9}


def ordered(policies):
    """The report's policies in a stable reading order: baselines first, the oracle last."""
    return sorted(policies.items(), key=lambda kv: (ORDER.get(kv[0], 5), kv[0]))


def bars(report, out):
    policies = [(name, p) for name, p in ordered(report["policies"]) if "samples_per_s" in p]
    names = [n for n, _ in policies]
    rates = [p["samples_per_s"] for _, p in policies]
    stalls = [100.0 * p["stall_fraction"] for _, p in policies]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax1.bar(names, rates, color="#4878a8")
    ax1.set_ylabel("samples/s")
    ax1.set_title("throughput")
    for i, v in enumerate(rates):
        ax1.annotate(f"{v:.0f}", (i, v), ha="center", va="bottom", fontsize=8)
    ax2.bar(names, stalls, color="#c8643c")
    ax2.set_ylabel("stall (% of wall time)")
    ax2.set_ylim(0, 100)
    ax2.set_title("accelerator stall")
    for i, v in enumerate(stalls):
        ax2.annotate(f"{v:.0f}%", (i, v), ha="center", va="bottom", fontsize=8)
    fig.suptitle(report["scenario"]["name"])
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def sweep(report, out):
    lines = {}
    for name, p in report["policies"].items():
        for run in p.get("sweep", []):
            if "samples_per_s" not in run:
                continue
            plan = run["plan"]
            lines.setdefault(plan_key(plan), []).append((plan.get("ratio", 0.0),
                                                         run["samples_per_s"]))
    if not lines:
        return False
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    # One colour per cut, solid for remote reads and dashed for local reads.
    cuts = sorted({key.split(",")[0] for key in lines})
    palette = plt.get_cmap("tab10")
    for key, points in sorted(lines.items()):
        points.sort()
        style = "--" if "local_read" in key else "-"
        ax.plot([100 * r for r, _ in points], [v for _, v in points], marker=".", label=key,
                linestyle=style, color=palette(cuts.index(key.split(",")[0]) % 10))
    markers = ["*", "D", "s", "^", "v", "P"]
    for i, (name, p) in enumerate(ordered(report["policies"])):
        if "samples_per_s" not in p:
            continue
        ratio = p.get("plan", {}).get("ratio", 0.0) or 0.0
        ax.scatter([100 * ratio], [p["samples_per_s"]], marker=markers[i % len(markers)], s=90,
                   zorder=5, edgecolors="black", label=f"chosen: {name}")
    ax.set_xlabel("offloaded share (%)")
    ax.set_ylabel("samples/s")
    ax.set_title(f"{report['scenario']['name']}: offload sweep")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        report = json.load(f)
    out = argv[2]
    bars(report, out)
    root, ext = os.path.splitext(out)
    sweep(report, f"{root}-sweep{ext or '.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
