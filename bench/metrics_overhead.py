#!/usr/bin/python3
"""What serving metrics costs an offloaded run, on loopback.

Starts one `sluice worker` (1 thread) and runs `sluice train` against it at a fixed
offloading plan, --repeats times with metrics off and on, interleaved (off, on, off, on, ...).
With metrics on, the worker and the trainer both serve /metrics and a scraper reads both
every --scrape-s seconds (1 s: fifteen times Prometheus' default interval, so the figure is
an upper bound). Reports each run's steady samples/s (`sluice train --json`), the medians,
and on/off.

usage: /usr/bin/python3 bench/metrics_overhead.py --sluice build/bin/sluice [--repeats 7]
           [--steps 400] [--accelerator-ms 2] [--scrape-s 1] [--out OUT.json]
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_loop(urls, period_s, stop):
    while not stop.wait(period_s):
        for url in urls:
            try:
                urllib.request.urlopen(url, timeout=5).read()
            except OSError:
                pass  # the trainer has not started serving yet, or has finished


def run_train(args, worker, data, metrics_port, worker_metrics):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [args.sluice, "train", os.path.join(ROOT, "examples/pipelines/imagenet_train.yaml"),
           "--files", os.path.join(data, "**", "*.jpg"), "--workers", worker,
           "--policy", args.policy, "--accelerator-ms", str(args.accelerator_ms),
           "--steps", str(args.steps), "--epochs", "-1", "--metric-store", "off", "--json", out]
    stop = threading.Event()
    scraper = None
    if metrics_port:
        cmd += ["--metrics-listen", f"127.0.0.1:{metrics_port}"]
        urls = [f"http://127.0.0.1:{metrics_port}/metrics", worker_metrics]
        scraper = threading.Thread(target=scrape_loop, args=(urls, args.scrape_s, stop))
        scraper.start()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop.set()
    if scraper:
        scraper.join()
    report = json.load(open(out))
    os.unlink(out)
    return report["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sluice", default=os.path.join(ROOT, "build/bin/sluice"))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--accelerator-ms", type=float, default=2)
    p.add_argument("--policy", default="fixed:cut=4,ratio=0.5")
    p.add_argument("--scrape-s", type=float, default=1.0)
    p.add_argument("--out", default="")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="sluice-metrics-bench-")
    data = os.path.join(work, "data")
    subprocess.run([args.sluice, "gen-data", "--kind", "jpeg", "--count", "512", "--out", data,
                    "--width", "320", "--height", "240"], check=True, stdout=subprocess.DEVNULL)
    worker_metrics_port = free_port()
    worker = subprocess.Popen(
        [args.sluice, "worker", "--listen", "127.0.0.1:0", "--threads", "1", "--data-root", data,
         "--metrics-listen", f"127.0.0.1:{worker_metrics_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = re.search(r"listening on (\S+)", worker.stdout.readline()).group(1)
    worker_url = f"http://127.0.0.1:{worker_metrics_port}/metrics"
    runs = {"off": [], "on": []}
    try:
        for i in range(args.repeats):
            for mode in ("off", "on"):
                rate = run_train(args, address, data, free_port() if mode == "on" else 0,
                                 worker_url)
                runs[mode].append(rate)
                print(f"metrics_overhead: repeat {i + 1} {mode}: {rate:.1f} samples/s", flush=True)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    result = {"runs": runs, "median_off": off, "median_on": on, "on_over_off": on / off,
              "policy": args.policy, "steps": args.steps, "accelerator_ms": args.accelerator_ms,
              "scrape_s": args.scrape_s}
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    if args.out:
        json.dump(result, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
