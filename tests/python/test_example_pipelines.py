"""The seven workload pipelines in examples/pipelines/ run end to end with `sluice run`.

Generates a few files of each data set their headers name (in a temp dir laid out as the
pipelines expect: data/wav16k, data/wav22k, data/boxes, data/imagenet), runs every pipeline
there with --json, and checks that every sample came out and nothing was skipped.

Where the binary is: $SLUICE_BIN, else $SLUICE_BUILD_DIR/bin/sluice, else build/bin/sluice.
"""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
JOBS = {"t_asr": "wav16k", "c_ctc": "wav16k", "s_speaker": "wav16k", "m_melgan": "wav22k",
        "g_gan": "boxes", "r_resnet": "imagenet", "l_resizer": "imagenet"}
COUNT = 6


def sluice_binary():
    if os.environ.get("SLUICE_BIN"):
        return pathlib.Path(os.environ["SLUICE_BIN"]).resolve()
    build = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build"))
    return (build / "bin" / "sluice").resolve()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    binary = sluice_binary()
    assert binary.exists(), f"{binary} is missing: build the sluice target first"
    folder = tmp_path_factory.mktemp("jobs")
    recipes = {
        "wav16k": ["--kind", "wav", "--sample-rate", "16000"],
        "wav22k": ["--kind", "wav", "--sample-rate", "22050"],
        "boxes": ["--kind", "jpeg", "--boxes"],
        "imagenet": ["--kind", "jpeg"],
    }
    for name, flags in recipes.items():
        gen = subprocess.run([str(binary), "gen-data", *flags, "--count", str(COUNT), "--out",
                              str(folder / "data" / name), "--threads", "2"],
                             capture_output=True, text=True, timeout=300)
        assert gen.returncode == 0, gen.stderr
    return binary, folder


@pytest.mark.parametrize("job", sorted(JOBS))
def test_job_runs_every_sample(workdir, job):
    binary, folder = workdir
    report = folder / f"{job}.json"
    run = subprocess.run([str(binary), "run", str(ROOT / "examples" / "pipelines" / f"{job}.yaml"),
                          "--threads", "2", "--json", str(report)], cwd=folder,
                         capture_output=True, text=True, errors="replace", timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(report.read_text())
    assert result["samples"] == COUNT
    assert result["skipped"] == 0
