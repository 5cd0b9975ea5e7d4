"""Malformed WAV files under both `on_error` modes, end to end through `sluice run`.

`sluice gen-data --kind wav --corrupt-fraction F` plants truncated and garbage files (listed
in corrupt.txt). With `on_error: fail` the run stops, naming a planted file and saying what
is wrong with it; with `on_error: skip` it finishes, and reports every planted file skipped.

Where the binary is: $SLUICE_BIN, else $SLUICE_BUILD_DIR/bin/sluice, else build/bin/sluice.
"""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

PIPELINE = """
source:
  files: "{files}"
  label: parent_dir
ops:
  - read_file
  - decode_wav: {{mono: true}}
  - spectrogram: {{}}
padded_batch: {{size: 2, drop_remainder: false}}
options: {{on_error: {mode}}}
"""


def sluice_binary():
    if os.environ.get("SLUICE_BIN"):
        return pathlib.Path(os.environ["SLUICE_BIN"]).resolve()
    build = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build"))
    return (build / "bin" / "sluice").resolve()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    binary = sluice_binary()
    assert binary.exists(), f"{binary} is missing: build the sluice target first"
    folder = tmp_path_factory.mktemp("wavs")
    gen = subprocess.run([str(binary), "gen-data", "--kind", "wav", "--count", "8", "--out",
                          str(folder), "--corrupt-fraction", "0.25", "--threads", "2"],
                         capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    corrupt = (folder / "corrupt.txt").read_text().split()
    assert len(corrupt) == 2
    return binary, folder, corrupt


def run(binary, folder, mode):
    spec = folder / f"{mode}.yaml"
    spec.write_text(PIPELINE.format(files=f"{folder}/**/*.wav", mode=mode))
    return subprocess.run([str(binary), "run", str(spec), "--threads", "2"], capture_output=True,
                          text=True, errors="replace", timeout=300)


def test_fail_mode_stops_naming_the_file_and_the_problem(dataset):
    binary, folder, corrupt = dataset
    result = run(binary, folder, "fail")
    assert result.returncode != 0
    message = result.stderr + result.stdout
    assert any(name in message for name in corrupt), message
    assert "truncated WAV" in message or "not a RIFF/WAVE file" in message, message


def test_skip_mode_finishes_and_counts_every_planted_file(dataset):
    binary, folder, corrupt = dataset
    result = run(binary, folder, "skip")
    assert result.returncode == 0, result.stderr
    assert "skipped: 2" in result.stdout + result.stderr, result.stdout + result.stderr
