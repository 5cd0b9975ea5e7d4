#!/usr/bin/python3
"""Side-by-side: the seven example jobs in Sluice and in PyTorch's DataLoader, on one core.

For each job T, C, S, M, G, R, L (examples/pipelines/?_*.yaml) this runs

  sluice run examples/pipelines/<job>.yaml --files <the job's files> --threads 1 --json ...
  /usr/bin/python3 bench/jobs_torch.py --job <J> --files <the same files> --num-workers 0

(and with --with-2 also `--threads 2` against `--num-workers 2`), each --repeats times,
interleaved (every round runs every job and alternates which side goes first), and reports
medians per job: samples/s of each and their ratio, CPU milliseconds per sample of each,
and peak RSS. Both sides make one pass over the same files.

Data: generated once with `sluice gen-data` under --data (default bench-data/jobs/): 16 kHz
utterances for T, C, S; 22.05 kHz ones for M; 500x375 JPEGs with box sidecars for G; plain
500x375 JPEGs for R and L. Each job reads the first <count> files of its set through a folder
of symlinks (--data/subsets/), so that both sides see exactly the same files. Counts per job
are options (--counts T=512,R=1024,...).

How the figures are taken:
  samples/s       Sluice: its own report (wall time from start-up to the last batch).
                  PyTorch: from the creation of the DataLoader iterator to the last batch
                  (measured in jobs_torch.py; the interpreter and `import torch` come before
                  and are not counted).
  CPU ms/sample   Sluice: user + system time of the `sluice run` process (rusage from
                  wait4), start-up included. PyTorch: CPU of the pass (main process during the
                  pass + DataLoader workers); the whole process, imports included, is in the
                  JSON as process_cpu_ms_per_sample.
  peak RSS        the ru_maxrss of the process (wait4). With DataLoader workers, the largest
                  worker's peak is reported beside it (each worker is a process of its own).

Writes --results (default bench/results/jobs.json) and prints a table. Run it with
/usr/bin/python3 (NumPy, PyTorch and torchvision as Debian packages); on a quiet machine.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# job -> (pipeline file, data set, batch size)
JOBS = {
    "T": ("examples/pipelines/t_asr.yaml", "wav16k", 64),
    "C": ("examples/pipelines/c_ctc.yaml", "wav16k", 32),
    "S": ("examples/pipelines/s_speaker.yaml", "wav16k", 128),
    "M": ("examples/pipelines/m_melgan.yaml", "wav22k", 16),
    "G": ("examples/pipelines/g_gan.yaml", "boxes", 128),
    "R": ("examples/pipelines/r_resnet.yaml", "imagenet", 256),
    "L": ("examples/pipelines/l_resizer.yaml", "imagenet", 64),
}
JOB_ORDER = "TCSMGRL"

# data set -> (gen-data flags, file extension)
DATASETS = {
    "wav16k": (["--kind", "wav", "--sample-rate", "16000"], ".wav"),
    "wav22k": (["--kind", "wav", "--sample-rate", "22050"], ".wav"),
    "boxes": (["--kind", "jpeg", "--boxes", "--width", "500", "--height", "375"], ".jpg"),
    "imagenet": (["--kind", "jpeg", "--width", "500", "--height", "375"], ".jpg"),
}

# Samples per job: a round (7 jobs x 2 sides) takes about a minute on one core of a quiet
# machine, so 3 rounds, data generation and --with-2 stay within about 6 minutes.
DEFAULT_COUNTS = {"T": 512, "C": 512, "S": 512, "M": 256, "G": 1024, "R": 1024, "L": 1024}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_measured(cmd):
    """Runs cmd; returns (stdout, rusage of the process). Exits if it fails."""
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            log(f"jobs_bench: command failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                f"{err.read()[-4000:]}")
            sys.exit(1)
        return out.read(), usage


def ensure_dataset(sluice, data_root, name, count):
    """Generates data set `name` with at least `count` files once; returns its folder."""
    folder = os.path.join(data_root, name)
    flags, _ = DATASETS[name]
    marker = os.path.join(folder, ".complete")
    if os.path.exists(marker):
        with open(marker) as f:
            have = int(f.read().strip() or 0)
        if have >= count:
            log(f"jobs_bench: using the {have} files in {folder}/")
            return folder
    log(f"jobs_bench: generating {count} files ({' '.join(flags)}) in {folder}/")
    started = time.time()
    subprocess.run(["rm", "-rf", folder], check=True)
    cmd = [sluice, "gen-data", *flags, "--count", str(count), "--seed", "1", "--classes", "10",
           "--out", folder, "--threads", str(os.cpu_count() or 1)]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        log(f"jobs_bench: gen-data failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
        sys.exit(1)
    with open(marker, "w") as f:
        f.write(f"{count}\n")
    log(f"jobs_bench: generated in {time.time() - started:.1f} s")
    return folder


def subset(data_root, name, folder, count):
    """A folder of symlinks to the first `count` files of a data set (by file name, which is
    the generation index), in their class folders, with their box sidecars. Returns the glob
    both sides read."""
    _, ext = DATASETS[name]
    out = os.path.join(data_root, "subsets", f"{name}-{count}")
    pattern = os.path.join(out, "**", "*" + ext)
    marker = os.path.join(out, ".complete")
    if os.path.exists(marker):
        return pattern
    files = sorted(glob.glob(os.path.join(folder, "**", "*" + ext), recursive=True),
                   key=os.path.basename)
    if len(files) < count:
        sys.exit(f"jobs_bench: {folder} has {len(files)} files, {count} needed")
    subprocess.run(["rm", "-rf", out], check=True)
    for path in files[:count]:
        for src in [path] + ([os.path.splitext(path)[0] + ".box"] if name == "boxes" else []):
            dst = os.path.join(out, os.path.relpath(src, folder))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.symlink(os.path.abspath(src), dst)
    open(marker, "w").close()
    return pattern


def run_sluice(sluice, pipeline, files, threads):
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        _, usage = run_measured([sluice, "run", pipeline, "--files", files, "--threads",
                                 str(threads), "--json", report.name])
        with open(report.name) as f:
            r = json.load(f)
    cpu = usage.ru_utime + usage.ru_stime
    return {"samples_per_s": r["samples_per_s"], "samples": r["samples"],
            "skipped": r.get("skipped", 0), "wall_s": r["wall_s"],
            "cpu_ms_per_sample": 1e3 * cpu / max(r["samples"], 1),
            "peak_rss_bytes": usage.ru_maxrss * 1024}


def run_torch(python, job, files, workers):
    out, usage = run_measured([python, os.path.join(HERE, "jobs_torch.py"), "--job", job,
                               "--files", files, "--num-workers", str(workers)])
    r = json.loads(out.strip().splitlines()[-1])
    n = max(r["samples"], 1)
    return {"samples_per_s": r["samples_per_s"], "steady_samples_per_s":
            r["steady_samples_per_s"], "samples": r["samples"], "wall_s": r["wall_s"],
            "cpu_ms_per_sample": 1e3 * r["loop_cpu_s"] / n,
            "process_cpu_ms_per_sample": 1e3 * (usage.ru_utime + usage.ru_stime) / n,
            "peak_rss_bytes": usage.ru_maxrss * 1024,
            "worker_peak_rss_bytes": r["worker_peak_rss_bytes"], "fidelity": r["fidelity"],
            "torch": r["torch"]}


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "loadavg_1_5_15min": load,
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


def parse_counts(text):
    counts = dict(DEFAULT_COUNTS)
    for item in filter(None, (t.strip() for t in text.split(","))):
        job, _, value = item.partition("=")
        job = job.strip().upper()
        if job not in JOBS or not value.strip().isdigit() or int(value) < 1:
            sys.exit(f"jobs_bench: bad --counts entry {item!r} (expected JOB=N, JOB in "
                     f"{JOB_ORDER})")
        counts[job] = int(value)
    return counts


def summarize(runs):
    """Medians of a side's runs."""
    keys = ["samples_per_s", "cpu_ms_per_sample", "peak_rss_bytes"]
    extra = ["process_cpu_ms_per_sample", "worker_peak_rss_bytes", "steady_samples_per_s"]
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    for k in extra:
        values = [r[k] for r in runs if r.get(k) is not None]
        if values:
            out[k] = statistics.median(values)
    out["runs"] = runs
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin", "sluice"),
                   help="the sluice binary (default: build/bin/sluice)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="interpreter with torch and torchvision")
    p.add_argument("--data", default=os.path.join(ROOT, "bench-data", "jobs"))
    p.add_argument("--results", default=os.path.join(HERE, "results", "jobs.json"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--jobs", default=JOB_ORDER, help="which jobs, e.g. TSR")
    p.add_argument("--counts", default="",
                   help="samples per job, e.g. T=512,R=1024 (defaults: " +
                   ",".join(f"{j}={DEFAULT_COUNTS[j]}" for j in JOB_ORDER) + ")")
    p.add_argument("--with-2", action="store_true",
                   help="also run --threads 2 against --num-workers 2")
    p.add_argument("--skip-torch", action="store_true")
    args = p.parse_args()

    jobs = [j for j in args.jobs.upper() if j in JOBS]
    if not jobs or len(jobs) != len(args.jobs):
        sys.exit(f"jobs_bench: --jobs takes letters of {JOB_ORDER}, got {args.jobs!r}")
    if not os.access(args.sluice, os.X_OK):
        sys.exit(f"jobs_bench: no sluice binary at {args.sluice} (give --sluice)")
    counts = parse_counts(args.counts)
    started = time.time()

    needed = {}
    for j in jobs:
        name = JOBS[j][1]
        needed[name] = max(needed.get(name, 0), counts[j])
    folders = {name: ensure_dataset(args.sluice, args.data, name, n)
               for name, n in needed.items()}
    files = {j: subset(args.data, JOBS[j][1], folders[JOBS[j][1]], counts[j]) for j in jobs}
    generated_s = time.time() - started

    sides = [("sluice1", "torch0")] + ([("sluice2", "torch2")] if args.with_2 else [])
    runs = {j: {s: [] for pair in sides for s in pair} for j in jobs}
    for r in range(args.repeats):
        log(f"jobs_bench: round {r + 1}/{args.repeats}")
        for j in jobs:
            pipeline = os.path.join(ROOT, JOBS[j][0])
            for sluice_side, torch_side in sides:
                order = [sluice_side, torch_side] if r % 2 == 0 else [torch_side, sluice_side]
                for side in order:
                    if side.startswith("sluice"):
                        result = run_sluice(args.sluice, pipeline, files[j], int(side[-1]))
                    elif args.skip_torch:
                        continue
                    else:
                        result = run_torch(args.python, j, files[j], int(side[-1]))
                    runs[j][side].append(result)
                    log(f"  {j} {side:8s} {result['samples_per_s']:8.1f} samples/s "
                        f"{result['cpu_ms_per_sample']:7.2f} CPU ms/sample "
                        f"{result['peak_rss_bytes'] / 2**20:7.1f} MiB")

    report = {"machine": machine(), "repeats": args.repeats, "counts": {j: counts[j]
                                                                        for j in jobs},
              "data": os.path.relpath(args.data, ROOT), "data_generation_s": generated_s,
              "note": "medians; samples/s of sluice include its start-up, torch's the "
                      "DataLoader's (not the interpreter's); CPU ms/sample: the whole sluice "
                      "process vs the torch pass (process totals in process_cpu_ms_per_sample)",
              "jobs": {}}
    lines = [f"machine: {report['machine']['cpus']} CPUs ({report['machine']['cpu_model']}), "
             f"medians of {args.repeats} runs",
             f"{'job':4s} {'sides':17s} {'sluice/s':>9s} {'torch/s':>9s} {'ratio':>6s} "
             f"{'sluice ms':>10s} {'torch ms':>9s} {'sluice MiB':>11s} {'torch MiB':>10s}"]
    for j in jobs:
        entry = {"pipeline": JOBS[j][0], "batch_size": JOBS[j][2], "samples": counts[j]}
        for sluice_side, torch_side in sides:
            s = summarize(runs[j][sluice_side])
            entry[sluice_side] = s
            if args.skip_torch:
                lines.append(f"{j:4s} {sluice_side:17s} {s['samples_per_s']:9.1f}")
                continue
            t = summarize(runs[j][torch_side])
            entry[torch_side] = t
            entry["fidelity"] = runs[j][torch_side][0]["fidelity"]
            ratio = s["samples_per_s"] / t["samples_per_s"]
            cpu_ratio = t["cpu_ms_per_sample"] / s["cpu_ms_per_sample"]
            entry[f"{sluice_side}_over_{torch_side}"] = {"samples_per_s": ratio,
                                                         "cpu_per_sample": cpu_ratio}
            lines.append(f"{j:4s} {sluice_side + ' vs ' + torch_side:17s} "
                         f"{s['samples_per_s']:9.1f} {t['samples_per_s']:9.1f} {ratio:5.2f}x "
                         f"{s['cpu_ms_per_sample']:10.2f} {t['cpu_ms_per_sample']:9.2f} "
                         f"{s['peak_rss_bytes'] / 2**20:11.1f} "
                         f"{t['peak_rss_bytes'] / 2**20:10.1f}")
        report["jobs"][j] = entry
    report["total_s"] = time.time() - started
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print("\n".join(lines))
    print("ratio: sluice samples/s over torch samples/s; ms: CPU ms per sample; MiB: peak RSS "
          "of the main process")
    print(f"results: {args.results}  ({report['total_s']:.0f} s, of which data "
          f"{generated_s:.0f} s)")


if __name__ == "__main__":
    main()
