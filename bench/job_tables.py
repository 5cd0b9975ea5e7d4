#!/usr/bin/python3
"""The per-job tables of examples/pipelines/README.md: for each of the seven jobs, `sluice run
JOB.yaml --threads T --json` on its data, then per op the CPU ms per sample and the bytes per
sample a worker would ship if the pipeline were cut after that op. Prints Markdown.

usage: /usr/bin/python3 bench/job_tables.py [--sluice build/bin/sluice] [--data bench-data/jobs]
       [--threads 1]
(the data is the one bench/jobs_bench.py generates under --data)
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = [  # letter, file, data folder, glob
    ("T", "t_asr.yaml", "wav16k", "**/*.wav"),
    ("C", "c_ctc.yaml", "wav16k", "**/*.wav"),
    ("S", "s_speaker.yaml", "wav16k", "**/*.wav"),
    ("M", "m_melgan.yaml", "wav22k", "**/*.wav"),
    ("G", "g_gan.yaml", "boxes", "**/*.jpg"),
    ("R", "r_resnet.yaml", "imagenet", "**/*.jpg"),
    ("L", "l_resizer.yaml", "imagenet", "**/*.jpg"),
]


def size(b):
    if b >= 2**20:
        return f"{b / 2**20:.2f} MiB"
    if b >= 2**10:
        return f"{b / 2**10:.1f} KiB"
    return f"{b:.0f} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin", "sluice"))
    ap.add_argument("--data", default=os.path.join(ROOT, "bench-data", "jobs"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    summary = []
    sections = []
    for letter, name, folder, glob in JOBS:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([args.sluice, "run", os.path.join(ROOT, "examples", "pipelines", name),
                            "--files", os.path.join(args.data, folder, glob),
                            "--threads", str(args.threads), "--json", out.name],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            r = json.load(open(out.name))
        total = sum(op["cpu_ms_per_sample"] for op in r["ops"])
        summary.append(f"| {letter} | `{name}` | {r['samples']} | {r['samples_per_s']:.0f} | "
                       f"{total:.2f} |")
        lines = [f"### {letter}: `{name}` (data: `{folder}`)", "",
                 "| cut after | CPU ms/sample (op) | CPU ms/sample (cumulative) | "
                 "bytes/sample shipped at this cut |", "|---|---|---|---|"]
        cum = 0.0
        for op in r["ops"]:
            cum += op["cpu_ms_per_sample"]
            lines.append(f"| `{op['name']}` | {op['cpu_ms_per_sample']:.3f} | {cum:.3f} | "
                         f"{size(op['bytes_per_sample'])} |")
        sections.append("\n".join(lines))
    print(f"| job | file | samples | samples/s ({args.threads} thread) | CPU ms/sample (all ops) |")
    print("|---|---|---|---|---|")
    print("\n".join(summary))
    print()
    print("\n\n".join(sections))


if __name__ == "__main__":
    main()
