#!/usr/bin/python3
"""PyTorch DataLoader baseline for the standard ImageNet training pipeline.

What torchvision's reference recipe does, over the same files Sluice reads: PIL decode,
RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize, batch 64, shuffled,
labels from the parent folder. Measures samples/s over a fixed number of batches after one
warm-up batch (which also absorbs worker start-up). torch.set_num_threads(1) in the main
process and in every worker, so num_workers is the number of CPU-bound processes.

Prints a human line on stderr and one JSON object on stdout:
  {"samples_per_s", "samples", "batches", "wall_s", "cpu_s", "num_workers", "batch_size", ...}
"""

import argparse
import glob
import json
import os
import resource
import sys
import time

import torch
import torch.utils.data
from PIL import Image
from torchvision import transforms

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


class FolderDataset(torch.utils.data.Dataset):
    """Files matching a glob; label = index of the parent folder name among all of them."""

    def __init__(self, pattern, transform):
        self.paths = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        if not self.paths:
            raise SystemExit(f"torch_baseline: no files match {pattern!r}")
        classes = sorted({os.path.basename(os.path.dirname(p)) for p in self.paths})
        index = {name: i for i, name in enumerate(classes)}
        self.labels = [index[os.path.basename(os.path.dirname(p))] for p in self.paths]
        self.transform = transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            image = Image.open(f).convert("RGB")
        return self.transform(image), self.labels[i]


def worker_init(_):
    torch.set_num_threads(1)


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def self_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", required=True, help="glob of the images ('**' recurses)")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--batches", type=int, default=20, help="timed batches after warm-up")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
    dataset = FolderDataset(args.files, transform)
    needed = (args.batches + 1) * args.batch_size
    if len(dataset) < needed:
        raise SystemExit(f"torch_baseline: {len(dataset)} files, need {needed} "
                         f"for 1 warm-up + {args.batches} timed batches of {args.batch_size}")
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
        drop_last=True, worker_init_fn=worker_init if args.num_workers > 0 else None,
        persistent_workers=False)

    it = iter(loader)
    next(it)  # warm-up: first batch, worker start-up
    cpu0 = self_cpu_s()
    start = time.perf_counter()
    samples = 0
    for _ in range(args.batches):
        images, labels = next(it)
        samples += images.shape[0]
    wall = time.perf_counter() - start
    cpu = self_cpu_s() - cpu0
    del it  # shuts the workers down, so their CPU time is accounted to us
    result = {
        "samples_per_s": samples / wall,
        "samples": samples,
        "batches": args.batches,
        "wall_s": wall,
        # Main-process CPU in the timed window; workers' CPU is not separable per window.
        "main_cpu_s": cpu,
        "num_workers": args.num_workers,
        "batch_size": args.batch_size,
        "files": len(dataset),
        "torch": torch.__version__,
    }
    print(f"torch_baseline: num_workers={args.num_workers}: {samples} samples in {wall:.2f} s "
          f"= {samples / wall:.1f} samples/s", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
