"""Shared fixtures of the Python package tests (test_package_*.py).

The package is imported from a CMake build, not from an installed copy: $SLUICE_BUILD_DIR
(default: build/) holds python/sluice/ (the _core module next to links to python/sluice/*.py)
and bin/sluice. The other tests of this folder use none of these fixtures.
"""
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build_dir():
    return pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build")).resolve()


def package_path():
    return build_dir() / "python"


@pytest.fixture(scope="session")
def sluice():
    pkg = package_path() / "sluice"
    if not any(pkg.glob("_core*.so")):
        pytest.skip(f"{pkg}/_core*.so is missing: the Python module is built when pybind11-dev "
                    "is installed (scripts/install-deps.sh)")
    sys.path.insert(0, str(package_path()))
    import sluice as module
    return module


@pytest.fixture(scope="session")
def binary():
    path = build_dir() / "bin" / "sluice"
    assert path.exists(), f"{path} is missing: build the sluice target first"
    return path


def gen_images(binary, folder, count, width, height, classes, *extra):
    """`sluice gen-data` JPEGs under folder/data; returns their glob."""
    gen = subprocess.run([str(binary), "gen-data", "--kind", "jpeg", "--count", str(count),
                          "--out", str(folder / "data"), "--width", str(width), "--height",
                          str(height), "--classes", str(classes), "--threads", "2", *extra],
                         capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    return str(folder / "data" / "**" / "*.jpg")


@pytest.fixture(scope="session")
def images(binary, tmp_path_factory):
    """48 small JPEGs in 3 class folders: returns the glob."""
    return gen_images(binary, tmp_path_factory.mktemp("images"), 48, 64, 48, 3)


@pytest.fixture()
def small_spec(sluice, images):
    """read, decode, crop to 24x24, flip, normalize; shuffled; batches of 4."""
    return (sluice.files(images, label="parent_dir", shuffle=True, seed=7)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=24).map("random_flip")
            .map("normalize", mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
            .batch(4).options(threads=2))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """A `sluice worker` subprocess on 127.0.0.1 that reads files under `data_root`."""

    def __init__(self, binary, data_root, threads=1, extra=()):
        self.proc = subprocess.Popen([str(binary), "worker", "--listen", "127.0.0.1:0",
                                      "--threads", str(threads), "--data-root", str(data_root),
                                      *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (\S+)", line)
        assert m, f"worker did not start: {line!r}"
        self.address = m.group(1)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.stdout.close()


@pytest.fixture()
def worker(binary, tmp_path_factory):
    w = Worker(binary, tmp_path_factory.getbasetemp())
    yield w
    w.stop()


@pytest.fixture()
def start_worker(binary, tmp_path_factory):
    started = []

    def start(threads=1, extra=()):
        w = Worker(binary, tmp_path_factory.getbasetemp(), threads, extra)
        started.append(w)
        return w
    yield start
    for w in started:
        w.stop()
