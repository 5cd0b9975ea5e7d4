#!/usr/bin/python3
"""Markdown tables from `sluice bench` reports: one row per scenario with each policy's
samples/s and stall, the oracle's plan and its gain over `none` and `full`, and the
testbed's verification figures (measured link rate and CPU quotas against the spec).

usage: /usr/bin/python3 bench/scenario_table.py REPORT.json...
"""

import json
import sys


def plan_text(plan):
    if not plan or plan.get("policy") == "none":
        return "all local"
    cut = plan.get("cut")
    read = (plan.get("read_mode") or "").replace("_read", "")
    text = f"cut={cut}, ratio={plan.get('ratio', 0):.1f}, read={read}"
    shares = [w.get("share", 0) for w in plan.get("workers", [])]
    if len(shares) > 1:
        text += ", shares " + "/".join(f"{s:.2f}" for s in shares)
    return text


def main(paths):
    reports = [json.load(open(p)) for p in paths]
    policies = []
    for r in reports:
        for name in r["policies"]:
            if name not in policies:
                policies.append(name)
    order = {"none": 0, "full": 1, "fastflow": 2, "sluice": 3, "oracle": 9}
    policies.sort(key=lambda n: order.get(n, 5))

    head = ["scenario"] + [f"{p} samples/s (stall)" for p in policies]
    head += ["oracle plan", "oracle / none", "oracle / full"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in reports:
        row = [r["scenario"]["name"]]
        pol = r["policies"]
        for p in policies:
            v = pol.get(p, {})
            if "samples_per_s" in v:
                row.append(f"{v['samples_per_s']:.0f} ({100 * v.get('stall_fraction', 0):.0f}%)")
            else:
                row.append("—")
        oracle = pol.get("oracle", {})
        row.append(plan_text(oracle.get("plan")) if oracle else "—")
        for base in ("none", "full"):
            if "samples_per_s" in oracle and pol.get(base, {}).get("samples_per_s"):
                row.append(f"{oracle['samples_per_s'] / pol[base]['samples_per_s']:.2f}x")
            else:
                row.append("—")
        print("| " + " | ".join(row) + " |")

    print()
    print("| scenario | link spec → measured (Mbit/s) | CPUs spec → measured | verified |")
    print("|---|---|---|---|")
    for r in reports:
        m = r.get("testbed", {}).get("measured", {})
        links = ", ".join(
            f"w{l['worker']}: {l['spec_bps'] / 1e6:.0f} → {l['measured_bps'] / 1e6:.0f}"
            for l in m.get("links", []))
        cpus = ", ".join(f"{h}: {c['spec_cpus']:.2f} → {c['measured_cpus']:.2f}"
                         for h, c in m.get("cpus", {}).items())
        ok = "yes" if m.get("ok") else ("not run" if not m else "**no**")
        print(f"| {r['scenario']['name']} | {links or '—'} | {cpus or '—'} | {ok} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
