#!/usr/bin/python3
"""What an offloaded sample costs the trainer, build against build: the trainer's whole CPU
(user + system, from the kernel's accounting of the child process) and its voluntary
context switches per sample, at the given plans, for each `--sluice` binary, runs
interleaved (A B A B ...). The trainer is pinned to core 0 with one pipeline thread, one
`sluice worker --threads 1` to core 1, on loopback; the accelerator step is 0, so the
trainer takes samples as fast as it can. The same start-up is in every run of a binary, so
the figures compare across binaries and plans; `none` gives the local cost per sample.

Usage: bench/receive_cost.py --sluice OLD,NEW --files 'demo-data/**/*.jpg' [--repeats 3]
       [--policies fixed:cut=4,ratio=1.0,fixed:cut=batch,ratio=1.0,none] [--json OUT]
Run from the folder the --files glob is relative to (the worker's --data-root).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINE = os.path.join(ROOT, "examples", "pipelines", "imagenet_train.yaml")
DEFAULT_POLICIES = ["fixed:cut=4,ratio=1.0", "fixed:cut=batch,ratio=1.0", "none"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(sluice, port):
    """A worker on 127.0.0.1:port, once it accepts connections (builds without --ready-file
    are compared too)."""
    proc = subprocess.Popen(["taskset", "-c", "1", sluice, "worker", "--listen",
                             f"127.0.0.1:{port}", "--threads", "1", "--data-root", os.getcwd()],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"receive_cost: {sluice} worker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit(f"receive_cost: {sluice} worker did not start in 30 s")


def one_run(sluice, files, steps, policy, scratch):
    """Trainer CPU (us) and voluntary context switches per sample, and samples/s."""
    port = free_port()
    worker = start_worker(sluice, port) if policy != "none" else None
    try:
        out = os.path.join(scratch, "train.json")
        cmd = ["taskset", "-c", "0", sluice, "train", PIPELINE, "--files", files,
               "--steps", str(steps), "--threads", "1", "--epochs", "-1",
               "--metric-store", "off", "--policy", policy, "--json", out]
        if worker is not None:
            cmd += ["--workers", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read()
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"receive_cost: {' '.join(cmd)} failed:\n{err}")
        report = json.load(open(out))
    finally:
        if worker is not None:
            worker.kill()
            worker.wait()
    n = report["samples"]
    return {"cpu_us_per_sample": 1e6 * (usage.ru_utime + usage.ru_stime) / n,
            "switches_per_sample": usage.ru_nvcsw / n,
            "samples_per_s": report["samples_per_s"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sluice", required=True, help="comma-separated binaries (A,B,...)")
    p.add_argument("--files", required=True)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--policies", default="")
    p.add_argument("--json", default="")
    args = p.parse_args()
    binaries = args.sluice.split(",")
    # Policies hold commas themselves: split before each "fixed:" or "none".
    policies = DEFAULT_POLICIES
    if args.policies:
        policies, cur = [], ""
        for part in args.policies.split(","):
            if part.startswith("fixed:") or part in ("none",):
                if cur:
                    policies.append(cur)
                cur = part
            else:
                cur += "," + part
        policies.append(cur)
    runs = {b: {pol: [] for pol in policies} for b in binaries}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.repeats):
            for pol in policies:
                for b in binaries:
                    res = one_run(b, args.files, args.steps, pol, scratch)
                    runs[b][pol].append(res)
                    print(f"round {r + 1}: {pol:28s} {b}: {res['cpu_us_per_sample']:6.0f} us, "
                          f"{res['switches_per_sample']:5.1f} switches per sample, "
                          f"{res['samples_per_s']:7.1f} samples/s", flush=True)
    print("\nmedians (trainer CPU per sample / local CPU per sample of the same binary):")
    summary = {}
    for b in binaries:
        med = {pol: {k: statistics.median(x[k] for x in runs[b][pol]) for k in runs[b][pol][0]}
               for pol in policies}
        local = med.get("none", {}).get("cpu_us_per_sample")
        for pol in policies:
            m = med[pol]
            ratio = f", {m['cpu_us_per_sample'] / local:.2f} of local" if local else ""
            print(f"  {b}: {pol:28s} {m['cpu_us_per_sample']:6.0f} us{ratio}, "
                  f"{m['switches_per_sample']:.1f} switches per sample")
        summary[b] = med
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "steps": args.steps,
                       "files": args.files, "runs": runs, "medians": summary,
                       "loadavg": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
