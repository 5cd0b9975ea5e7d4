#!/usr/bin/python3
"""Trains a small torchvision ResNet on generated JPEGs, on the CPU, with Sluice as the loader.

The images are made here: four classes of 64x64 pictures (a class is a colour and a stripe
direction, with noise), written as JPEGs into class folders. The pipeline reads, decodes,
random-resized-crops to 32x32, flips and normalizes them in C++; the model is torchvision's
resnet18 with four outputs. The script prints the loss as it goes and exits non-zero if the
loss did not go down.

    PYTHONPATH=build/python /usr/bin/python3 examples/train_resnet.py
    # a worker started here on 127.0.0.1; `auto` (the default) measures the loop, plans and
    # offloads when the input pipeline stalls it:
    PYTHONPATH=build/python /usr/bin/python3 examples/train_resnet.py --spawn-worker
    # --step-ms adds a sleep per step, an accelerator's step that costs no CPU:
    ... --spawn-worker --step-ms 5 --threads 1
    # on workers you started yourself (`sluice worker --listen HOST:PORT`), any policy:
    ... --workers 10.0.0.2:7070 --policy fixed:cut=3,ratio=0.5

The output shows the plan (the `sluice` logger: "initial plan: cut=..., ratio ..."), the
stall and the speed-up: samples/s before the plan and after it.

`--checkpoint ckpt.pt` saves the model, the optimizer and the loader's state half-way, and
`--resume ckpt.pt` continues from there with exactly the samples not yet seen (give both runs
the same `--data DIR`: the loader refuses the state of a pipeline over other files).
"""
import argparse
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision
from PIL import Image

import sluice
import sluice.torch

CLASSES = 4


def make_images(folder, count, seed):
    rng = np.random.default_rng(seed)
    colours = np.array([[200, 60, 60], [60, 200, 60], [60, 60, 200], [200, 200, 60]])
    yy, xx = np.mgrid[0:64, 0:64]
    for i in range(count):
        k = i % CLASSES
        stripes = np.sin((xx if k % 2 else yy) * (0.5 + 0.1 * rng.random())) > 0
        image = colours[k] * (0.6 + 0.4 * stripes[..., None]) + rng.normal(0, 25, (64, 64, 3))
        out = folder / f"class_{k}" / f"{i:05d}.jpg"
        out.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(out, quality=90)


def sluice_binary():
    build = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR",
                                        pathlib.Path(__file__).resolve().parents[1] / "build"))
    candidate = build / "bin" / "sluice"
    return str(candidate) if candidate.exists() else shutil.which("sluice")


def spawn_worker(data_root):
    binary = sluice_binary()
    if binary is None:
        raise SystemExit("train_resnet: --spawn-worker needs the sluice binary (SLUICE_BUILD_DIR)")
    proc = subprocess.Popen([binary, "worker", "--listen", "127.0.0.1:0", "--threads", "1",
                             "--data-root", str(data_root)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"listening on (\S+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit("train_resnet: the worker did not start")
    return proc, m.group(1)


def rate(timeline, start, end):
    """Samples per second over the whole seconds of the loop's timeline in [start, end)."""
    buckets = [b for b in timeline if start <= b["t"] < end]
    return sum(b["samples"] for b in buckets) / len(buckets) if buckets else None


def print_report(report):
    where = ", ".join(f"{w['address']} {w['samples']}" for w in report["workers"])
    print(f"data: stall {100 * report['stall_fraction']:.0f}%, "
          f"{report['consumer']['samples_per_s']:.1f} samples/s, processed locally "
          f"{report.get('samples_local', 0)}" + (f", on workers: {where}" if where else ""))
    plan = report["plan"] or {}
    print(f"plan: {plan.get('policy_string', report['policy'])}"
          + (f" ({report['local_reason']})" if report["local_reason"] else ""))
    planned_at = report.get("time_to_plan_s")
    if planned_at is not None and plan.get("offload"):
        # Whole seconds only: the second the plan came in mixes both.
        before = rate(report["timeline"], 0, int(planned_at))
        after = rate(report["timeline"], int(planned_at) + 1, float("inf"))
        if before and after:
            print(f"speed-up: {before:.1f} samples/s before the plan, {after:.1f} after "
                  f"(x{after / before:.2f}; planned after {planned_at:.1f} s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--steps", type=int, default=100, help="at most this many steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", default="", help="HOST:PORT,... of sluice workers")
    parser.add_argument("--spawn-worker", action="store_true", help="start one on 127.0.0.1")
    parser.add_argument("--policy", default="auto",
                        help='"auto" (default), "fastflow", "none" or "fixed:cut=K,ratio=R"')
    parser.add_argument("--step-ms", type=float, default=0,
                        help="sleep this long per step besides the model (an accelerator)")
    parser.add_argument("--measure-s", type=float, default=2.0,
                        help="auto: seconds measured all-local before the first plan")
    parser.add_argument("--checkpoint", help="save model + loader state half-way to this file")
    parser.add_argument("--resume", help="continue from a --checkpoint file")
    parser.add_argument("--data", help="folder for the images (kept; default: a temp folder)")
    args = parser.parse_args()
    logging.basicConfig(format="%(name)s: %(message)s")
    logging.getLogger("sluice").setLevel(logging.INFO)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)

    tmp = pathlib.Path(args.data) if args.data else pathlib.Path(
        tempfile.mkdtemp(prefix="sluice-train-")).resolve()
    worker = None
    try:
        if not (tmp / "data").exists():
            make_images(tmp / "data", args.images, seed=1)
        workers = [w for w in args.workers.split(",") if w]
        if args.spawn_worker:
            worker, address = spawn_worker(tmp)
            workers.append(address)
        spec = (sluice.files(str(tmp / "data" / "**" / "*.jpg"), label="parent_dir",
                             shuffle=True, seed=42)
                .map("read_file").map("decode_jpeg")
                .map("random_resized_crop", size=32, scale=[0.5, 1.0])
                .map("random_flip")
                .map("normalize", mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
                .batch(args.batch_size, drop_remainder=True)
                .options(threads=args.threads))
        loader = sluice.torch.Loader(spec, workers=workers, policy=args.policy,
                                     measure_s=args.measure_s)
        model = torchvision.models.resnet18(num_classes=CLASSES)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        step, losses = 0, []
        if args.resume:
            state = torch.load(args.resume)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            loader.load_state_dict(state["loader"])
            step = state["step"]
            print(f"resumed at step {step}")
        model.train()
        while step < args.steps:
            for batch in loader:
                loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if args.step_ms > 0:
                    time.sleep(args.step_ms / 1e3)
                losses.append(loss.item())
                step += 1
                if step % 10 == 0:
                    print(f"step {step}: loss {np.mean(losses[-10:]):.3f}", flush=True)
                if args.checkpoint and step == args.steps // 2:
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "loader": loader.state_dict(), "step": step}, args.checkpoint)
                    print(f"saved {args.checkpoint} at step {step}")
                if step >= args.steps:
                    break
        report = loader.report()
        loader.close()
        print_report(report)
        window = max(1, min(10, len(losses) // 3))
        first, last = np.mean(losses[:window]), np.mean(losses[-window:])
        print(f"loss {first:.3f} -> {last:.3f}")
        if not args.resume and not last < first:
            print("train_resnet: the loss did not go down", file=sys.stderr)
            return 1
        return 0
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=10)
        if not args.data:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
