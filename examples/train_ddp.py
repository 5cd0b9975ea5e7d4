#!/usr/bin/python3
"""Data-parallel training (PyTorch DDP, gloo on the CPU) with a Sluice loader per rank.

Run it with torchrun; each rank gets its share of every epoch (RANK and WORLD_SIZE come from
torchrun), the same number of batches as every other rank, and optionally a shared pool of
workers:

    PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --standalone \\
        --nproc_per_node 2 --redirects 1 --tee 1 examples/train_ddp.py --data /tmp/ddp-data
    # (`torchrun` is the same command. `--redirects 1 --tee 1` works around Debian 12's
    # torch 1.13 under Python 3.11, whose defaults of 0 fail to parse; newer torch needs
    # neither.)
    # with workers (each rank plans its own offloading on the shared pool):
    ... examples/train_ddp.py --data /tmp/ddp-data --workers dns:sluice-workers:7070
    # save half-way, then resume on another number of ranks (elastic):
    ... --nproc_per_node 2 ... examples/train_ddp.py --data D --steps 40 --checkpoint ckpt.pt
    ... --nproc_per_node 3 ... examples/train_ddp.py --data D --steps 40 --resume ckpt.pt

The checkpoint holds the model, the optimizer and every rank's loader state (gathered on
rank 0); any number of ranks resumes from it, and across them every sample of the epoch not
yet trained on arrives exactly once (docs/distributed.md). The script checks that every rank
took the same number of steps and exits non-zero otherwise.
"""
import argparse
import faulthandler
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torchvision

import sluice
import sluice.torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_resnet import CLASSES, make_images  # noqa: E402  (the same generated images)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder shared by the ranks (made once)")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--steps", type=int, default=40, help="steps per rank in all")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", default="", help="HOST:PORT,... or dns:NAME:PORT")
    parser.add_argument("--policy", default="auto")
    parser.add_argument("--even", default="drop", choices=["drop", "pad"])
    parser.add_argument("--checkpoint", help="save everything at half the steps to this file")
    parser.add_argument("--resume", help="continue from a --checkpoint file")
    parser.add_argument("--deadline-s", type=float, default=0,
                        help="if the rank is still running after this long, print every "
                             "thread's stack and exit non-zero (0: no deadline)")
    args = parser.parse_args()
    if args.deadline_s > 0:
        faulthandler.dump_traceback_later(args.deadline_s, exit=True)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = pathlib.Path(args.data)
    if rank == 0 and not (data / "data").exists():
        make_images(data / "data", args.images, seed=1)
    dist.barrier()  # the images exist for every rank

    spec = (sluice.files(str(data / "data" / "**" / "*.jpg"), label="parent_dir",
                         shuffle=True, seed=42, even=args.even)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=32, scale=[0.5, 1.0])
            .map("random_flip")
            .map("normalize", mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
            .batch(args.batch_size, drop_remainder=True)
            .options(threads=1))
    # rank and world_size come from torchrun's RANK and WORLD_SIZE.
    loader = sluice.torch.Loader(spec, workers=args.workers, policy=args.policy)
    model = torch.nn.parallel.DistributedDataParallel(
        torchvision.models.resnet18(num_classes=CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    step = 0
    if args.resume:
        state = torch.load(args.resume)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loaders"])  # every old rank's state: re-divided here
        step = state["step"]
        if rank == 0:
            print(f"resumed at step {step} on {world} ranks (saved on {len(state['loaders'])})")

    start = time.monotonic()
    per_epoch = []
    while step < args.steps:
        batches = 0
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
            optimizer.zero_grad()
            loss.backward()  # a collective: a rank short of batches would hang here
            optimizer.step()
            step += 1
            batches += 1
            if rank == 0 and step % 10 == 0:
                print(f"step {step}: loss {loss.item():.3f}", flush=True)
            if args.checkpoint and step == args.steps // 2:
                states = [None] * world
                dist.all_gather_object(states, loader.state_dict())
                if rank == 0:
                    torch.save({"model": model.module.state_dict(),
                                "optimizer": optimizer.state_dict(), "loaders": states,
                                "step": step}, args.checkpoint)
                    print(f"saved {args.checkpoint} at step {step}", flush=True)
            if step >= args.steps:
                break
        per_epoch.append(batches)

    # Every rank must have taken the same number of steps in every pass.
    counts = [None] * world
    dist.all_gather_object(counts, per_epoch)
    report = loader.report()
    loader.close()
    if rank == 0:
        print(f"{world} ranks, batches per pass on each: {counts}; "
              f"{step / (time.monotonic() - start):.1f} steps/s; plan of rank 0: "
              f"{(report['plan'] or {}).get('policy_string', report['policy'])}")
    dist.destroy_process_group()
    code = 0
    if any(c != counts[0] for c in counts):
        print("train_ddp: the ranks took different numbers of batches", file=sys.stderr)
        code = 1
    leave(code)


def leave(code):
    """Exits at once, without freeing main()'s objects or the interpreter's teardown.

    Under load a rank was seen to hang (three times so far, in full test runs) with its main
    thread at the line that calls main(), after main()'s last statement: in freeing main()'s
    locals (the DDP model, the optimizer, the batches' tensors), beside one more thread that
    holds a Python thread state but runs no Python. Sluice's extension never takes the GIL from a thread of
    its own, so that thread is torch's; the cause is not identified further. Everything this
    script writes is flushed first, and the process group is already destroyed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
