#!/usr/bin/python3
"""PyTorch DataLoader versions of the seven example jobs (examples/pipelines/?_*.yaml).

Each job is written the way a PyTorch user would write it: a Dataset whose __getitem__ reads
one file and transforms it (Python's `wave` + NumPy + torch.stft / torch.fft for audio,
torchvision.io.decode_jpeg + torchvision transforms for images), and a DataLoader with the
job's batch size, shuffled, labels from the parent folder. The work is the one the Sluice
pipeline does: same sizes, windows, padding, normalisation and output dtypes. FIDELITY below
says, per job, where the two are not the same computation.

One pass over the files matching --files (or --batches batches). torch.set_num_threads(1) in
the main process and in every worker, so num_workers is the number of CPU-bound processes
(num_workers=0: everything in the main process, one core).

Prints a human line on stderr and one JSON object on stdout:
  samples_per_s     samples / wall time from the creation of the DataLoader iterator to the
                    last batch (worker start-up and the first batch included, as in
                    `sluice run`'s figure)
  steady_samples_per_s  the same after the first batch
  loop_cpu_s        CPU seconds of the main process during the pass plus those of the
                    DataLoader workers (reaped at the end); interpreter and import start-up
                    are not in it
  worker_peak_rss_bytes  the largest peak RSS of a worker (0 without workers)
"""

import argparse
import glob
import json
import os
import resource
import sys
import time
import wave

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data
from torchvision import transforms
from torchvision.io import ImageReadMode, decode_jpeg, read_file

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

# Where a reference differs from the Sluice pipeline beyond random draws (which no two
# libraries share) and floating-point rounding.
FIDELITY = {
    "T": "same computation (torch.stft with a periodic Hann window, centred, reflect padding; "
         "|X|^2, log(x + 1e-6), per-feature population-variance normalisation, eps 1e-5; "
         "pad/trim to 2754 frames with the unpadded length)",
    "C": "same computation as T without the fixed length; the collate function pads each "
         "batch to its longest utterance and records every sample's shape as padded_batch does",
    "S": "same computation (white gaussian noise at 15 dB SNR from the signal's mean power, "
         "|rfft| of 32768 points); the noise comes from torch's generator, not Sluice's "
         "per-sample seed, so the values differ sample by sample",
    "M": "same computation (decode, pad/trim to 8192 samples)",
    "G": "box crop and [-1, 1] scaling and clip are the same; the 64x64 'area' resize is "
         "torch's adaptive average pooling on floats (bins of whole pixels), not OpenCV's "
         "INTER_AREA (fractional pixel weights, rounded to u8 before normalising): the "
         "pixels differ slightly, the cost is comparable",
    "R": "same transforms (RandomResizedCrop 224 bilinear without antialiasing, as OpenCV's "
         "resize; horizontal flip; torchvision's RandAugment(2, 9) on uint8 tensors, which "
         "Sluice's rand_augment re-implements; normalize to CHW f32); torchvision decodes "
         "the whole JPEG, Sluice only the scale and region the crop reads (an engine "
         "optimisation, the crop box is the same)",
    "L": "same computation (bilinear 300x300 without antialiasing, as OpenCV's resize; "
         "uint8 image; one-hot f32 labels); the image is CHW here, HWC in Sluice (same bytes)",
}

BATCH_SIZE = {"T": 64, "C": 32, "S": 128, "M": 16, "G": 128, "R": 256, "L": 64}


def read_wav(path):
    """16-bit (or 8/32-bit) PCM WAV -> f32[samples, 1] in [-1, 1], channels averaged."""
    with wave.open(path, "rb") as w:
        channels, width, frames = w.getnchannels(), w.getsampwidth(), w.getnframes()
        raw = w.readframes(frames)
    if width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 1:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 4:
        x = np.frombuffer(raw, dtype="<i4").astype(np.float32) / 2147483648.0
    else:
        raise ValueError(f"{path}: unsupported sample width {width}")
    x = x.reshape(-1, channels).mean(axis=1, keepdims=True, dtype=np.float32)
    return torch.from_numpy(x)


def pad_or_trim(x, length):
    """Cuts dimension 0 to `length` or pads it with zeros at the end."""
    n = x.shape[0]
    if n >= length:
        return x[:length].contiguous()
    pad = torch.zeros((length - n,) + tuple(x.shape[1:]), dtype=x.dtype)
    return torch.cat([x, pad], dim=0)


class LogSpectrogram:
    """T and C: power STFT (20 ms frames, 10 ms hop at 16 kHz) -> log -> per-utterance
    mean/variance normalisation per feature. f32[frames, 161]."""

    def __init__(self):
        self.window = torch.hann_window(320, periodic=True)

    def __call__(self, audio):
        spec = torch.stft(audio[:, 0], n_fft=320, hop_length=160, win_length=320,
                          window=self.window, center=True, pad_mode="reflect",
                          return_complex=True)
        spec = spec.abs().pow(2).transpose(0, 1)  # [frames, bins]
        spec = torch.log(spec + 1e-6)
        mean = spec.mean(dim=0, keepdim=True)
        var = spec.var(dim=0, unbiased=False, keepdim=True)
        return ((spec - mean) / torch.sqrt(var + 1e-5)).contiguous()


class FolderDataset(torch.utils.data.Dataset):
    """Files matching a glob; label = index of the parent folder's name among all of them."""

    def __init__(self, pattern, job):
        self.paths = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        if not self.paths:
            raise SystemExit(f"jobs_torch: no files match {pattern!r}")
        classes = sorted({os.path.basename(os.path.dirname(p)) for p in self.paths})
        index = {name: i for i, name in enumerate(classes)}
        self.labels = [index[os.path.basename(os.path.dirname(p))] for p in self.paths]
        self.job = job
        self.spectrogram = LogSpectrogram()
        self.r_transform = transforms.Compose([
            transforms.RandomResizedCrop(224, scale=(0.08, 1.0), antialias=False),
            transforms.RandomHorizontalFlip(0.5),
            transforms.RandAugment(num_ops=2, magnitude=9),
            transforms.ConvertImageDtype(torch.float32),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ])
        self.l_resize = transforms.Resize((300, 300), antialias=False)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        path, label = self.paths[i], self.labels[i]
        job = self.job
        if job in ("T", "C"):
            spec = self.spectrogram(read_wav(path))
            if job == "C":
                return {"spectrogram": spec, "label": label}
            frames = min(spec.shape[0], 2754)
            return {"spectrogram": pad_or_trim(spec, 2754), "frames": frames, "label": label}
        if job == "S":
            audio = read_wav(path)
            power = audio.pow(2).mean()
            noise_std = torch.sqrt(power / (10.0 ** (15.0 / 10.0)))
            audio = audio + torch.randn_like(audio) * noise_std
            fft = torch.fft.rfft(audio[:, 0], n=32768).abs()
            return {"fft": fft, "label": label}
        if job == "M":
            return {"audio": pad_or_trim(read_wav(path), 8192), "label": label}
        image = decode_jpeg(read_file(path), mode=ImageReadMode.RGB)  # u8[3, H, W]
        if job == "G":
            with open(os.path.splitext(path)[0] + ".box") as f:
                x0, y0, x1, y1 = (int(v) for v in f.read().split())
            h, w = image.shape[1:]
            x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
            if x1 <= x0 or y1 <= y0:
                raise ValueError(f"{path}: box outside the image")
            crop = image[:, y0:y1, x0:x1].float().unsqueeze(0)
            small = F.interpolate(crop, size=(64, 64), mode="area")[0] / 255.0
            return {"image": ((small - 0.5) / 0.5).clamp(-1.0, 1.0), "label": label}
        if job == "R":
            return {"image": self.r_transform(image), "label": label}
        if job == "L":
            one_hot = F.one_hot(torch.tensor(label), num_classes=10).float()
            return {"image": self.l_resize(image), "label": one_hot}
        raise ValueError(f"unknown job {job!r}")


def padded_collate(samples):
    """C's padded_batch: pads the spectrograms to the batch's longest with 0 and records each
    sample's shape in spectrogram_shape (i64[batch, 2])."""
    specs = [s["spectrogram"] for s in samples]
    longest = max(s.shape[0] for s in specs)
    batch = torch.zeros((len(specs), longest, specs[0].shape[1]), dtype=specs[0].dtype)
    for i, s in enumerate(specs):
        batch[i, :s.shape[0]] = s
    shapes = torch.tensor([list(s.shape) for s in specs], dtype=torch.int64)
    labels = torch.tensor([s["label"] for s in samples], dtype=torch.int64)
    return {"spectrogram": batch, "spectrogram_shape": shapes, "label": labels}


def worker_init(_):
    torch.set_num_threads(1)


def rusage_cpu(who):
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, choices=sorted(BATCH_SIZE))
    parser.add_argument("--files", required=True, help="glob of the files ('**' recurses)")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--batches", type=int, default=0, help="stop after N batches (0: all)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dataset = FolderDataset(args.files, args.job)
    batch_size = BATCH_SIZE[args.job]
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=True, num_workers=args.num_workers,
        drop_last=False, collate_fn=padded_collate if args.job == "C" else None,
        worker_init_fn=worker_init if args.num_workers > 0 else None,
        persistent_workers=False)

    self_cpu0 = rusage_cpu(resource.RUSAGE_SELF)
    children_cpu0 = rusage_cpu(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    it = iter(loader)
    samples = batches = first_samples = 0
    first_done = start
    for batch in it:
        n = batch["label"].shape[0]
        samples += n
        batches += 1
        if batches == 1:
            first_done = time.perf_counter()
            first_samples = n
        if args.batches and batches >= args.batches:
            break
    end = time.perf_counter()
    self_cpu = rusage_cpu(resource.RUSAGE_SELF) - self_cpu0
    del it  # joins the workers, so their CPU time is accounted to this process's children
    workers_cpu = rusage_cpu(resource.RUSAGE_CHILDREN) - children_cpu0
    worker_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    wall = end - start
    steady_wall = end - first_done
    result = {
        "job": args.job,
        "samples_per_s": samples / wall,
        "steady_samples_per_s": (samples - first_samples) / steady_wall if batches > 1 else None,
        "samples": samples,
        "batches": batches,
        "batch_size": batch_size,
        "wall_s": wall,
        "loop_cpu_s": self_cpu + workers_cpu,
        "main_cpu_s": self_cpu,
        "workers_cpu_s": workers_cpu,
        "worker_peak_rss_bytes": worker_rss if args.num_workers > 0 else 0,
        "num_workers": args.num_workers,
        "files": len(dataset),
        "fidelity": FIDELITY[args.job],
        "torch": torch.__version__,
    }
    print(f"jobs_torch: job {args.job}, num_workers={args.num_workers}: {samples} samples in "
          f"{wall:.2f} s = {samples / wall:.1f} samples/s", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
