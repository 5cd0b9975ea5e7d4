"""Each RandAugment operation against torchvision's own (`_apply_op` on uint8 tensors).

Writes photo-like RGB images (raw u8 HWC), has the C++ test `RandAugmentReferenceDumpTest`
of `sluice_ops_test` apply every operation at magnitude bins 9 and 30 with both signs, and
applies torchvision.transforms.autoaugment._apply_op with the magnitudes of torchvision's
RandAugment(num_magnitude_bins=31) to the same images.

Tolerances (stated per kind of operation):
- pixel-value operations (Identity, Brightness, Color, Contrast, Sharpness, Posterize,
  Solarize, AutoContrast, Equalize): every pixel within 1 of torchvision (float32 sums may
  round differently), and at least 99% of them identical;
- geometric operations (ShearX/Y, TranslateX/Y, Rotate; nearest neighbour): at least 99.5%
  of pixels identical (a source coordinate that lands within float32 rounding of a pixel
  boundary may pick the neighbour).

Where the binary is: as in test_audio_reference.py.
"""
import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms import autoaugment

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
       "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]


def ops_test_binary():
    if os.environ.get("SLUICE_OPS_TEST"):
        return pathlib.Path(os.environ["SLUICE_OPS_TEST"]).resolve()
    build = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build"))
    return (build / "src" / "sluice" / "ops" / "sluice_ops_test").resolve()


def photo_like(h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([
        255 * x / (w - 1) * 0.7 + 40 * np.sin(x / 9 + seed) * np.cos(y / 13),
        255 * y / (h - 1) * 0.7 + 60 * np.exp(-((x - w * 0.3) ** 2 + (y - h * 0.6) ** 2) / 3200),
        90 + 50 * np.sin((x + y) / 17),
    ], axis=-1) + rng.normal(0, 6, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    binary = ops_test_binary()
    assert binary.exists(), f"{binary} is missing: build sluice_ops_test first"
    folder = tmp_path_factory.mktemp("augment")
    images = {}
    for name, h, w, seed in [("wide", 120, 200, 1), ("tall", 151, 97, 2)]:
        img = photo_like(h, w, seed)
        img.tofile(folder / f"{name}.rgb")
        (folder / f"{name}.shape").write_text(f"{h} {w} 3\n")
        images[name] = img
    env = dict(os.environ, SLUICE_REFERENCE_DIR=str(folder))
    run = subprocess.run([str(binary), "--gtest_filter=RandAugmentReferenceDumpTest.*"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[  PASSED  ] 1 test." in run.stdout, run.stdout
    return folder, images


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("bin_", [9, 30])
@pytest.mark.parametrize("sign", ["pos", "neg"])
@pytest.mark.parametrize("name", ["wide", "tall"])
def test_operation_matches_torchvision(dumped, op, bin_, sign, name):
    folder, images = dumped
    img = images[name]
    h, w, _ = img.shape
    space = autoaugment.RandAugment(num_magnitude_bins=31)._augmentation_space(31, (h, w))
    magnitudes, signed = space[op]
    magnitude = float(magnitudes[bin_].item()) if magnitudes.ndim > 0 else 0.0
    if signed and sign == "neg":
        magnitude = -magnitude
    tensor = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    want = autoaugment._apply_op(tensor, op, magnitude, interpolation=InterpolationMode.NEAREST,
                                 fill=None).permute(1, 2, 0).numpy()
    got = np.fromfile(folder / f"{name}.{op}.{bin_}.{sign}.u8", dtype=np.uint8).reshape(img.shape)
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    same = float(np.mean(diff == 0))
    if op in GEOMETRIC:
        assert same >= 0.995, f"{op}: {same:.4f} of pixels identical"
    else:
        assert diff.max() <= 1, f"{op}: max difference {diff.max()}"
        assert same >= 0.99, f"{op}: {same:.4f} of pixels identical"
