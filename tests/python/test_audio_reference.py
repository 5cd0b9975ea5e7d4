"""Spectrogram, mel and rfft against NumPy/SciPy references.

Writes speech-like WAV files (16-bit PCM, 16 kHz and 22.05 kHz), runs them through the ops
with the C++ test `AudioReferenceDumpTest` of `sluice_ops_test` (which writes each op's output
next to the WAVs), and compares with NumPy/SciPy computations of the same definitions.

Error measure: max |sluice - reference| / max |reference| over each output (the peak-relative
error; element-wise relative error is meaningless for bins that are numerically zero). Bound:
1e-4. The references read the same 16-bit samples the C++ side decodes.

Where the binary is: $SLUICE_OPS_TEST (a path), else $SLUICE_BUILD_DIR/src/sluice/ops/
sluice_ops_test, else build/src/sluice/ops/sluice_ops_test under the repository root.
"""
import os
import pathlib
import subprocess
import wave

import numpy as np
import pytest
import scipy.fft
import scipy.signal

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4


def ops_test_binary():
    if os.environ.get("SLUICE_OPS_TEST"):
        return pathlib.Path(os.environ["SLUICE_OPS_TEST"]).resolve()
    build = pathlib.Path(os.environ.get("SLUICE_BUILD_DIR", ROOT / "build"))
    return (build / "src" / "sluice" / "ops" / "sluice_ops_test").resolve()


def speech_like(rate, seconds, seed):
    """Voiced harmonics under a gliding pitch, an amplitude envelope, and a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    pitch = 120 + 40 * np.sin(2 * np.pi * 0.7 * t + seed)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2
    x = 0.2 * voiced * envelope + 0.01 * rng.standard_normal(t.size)
    return np.clip(x, -0.99, 0.99)


def write_wav(path, x, rate):
    pcm = np.clip(np.round(x * 32768), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return pcm.astype(np.float64) / 32768  # what decode_wav reads


def spectrogram(x, n_fft, hop, window, power, center):
    if center:
        x = np.pad(x, n_fft // 2, mode="reflect")
    w = scipy.signal.get_window(window, n_fft)  # periodic, as torch's default
    frames = 1 + (x.size - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    return np.abs(scipy.fft.rfft(x[idx] * w, axis=1)) ** power


def hz_to_mel(f, scale):
    f = np.asarray(f, dtype=np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    logstep = np.log(6.4) / 27.0
    return np.where(f < min_log_hz, f / f_sp,
                    min_log_hz / f_sp + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep)


def mel_to_hz(m, scale):
    m = np.asarray(m, dtype=np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(m < min_log_mel, m * f_sp, min_log_hz * np.exp(logstep * (m - min_log_mel)))


def mel_filterbank(n_bins, rate, n_mels, f_min, f_max, scale, norm):
    """torchaudio.functional.melscale_fbanks, written out in NumPy: [n_bins, n_mels]."""
    freqs = np.linspace(0, rate // 2, n_bins)
    f_pts = mel_to_hz(np.linspace(hz_to_mel(f_min, scale), hz_to_mel(f_max, scale), n_mels + 2),
                      scale)
    f_diff = np.diff(f_pts)
    slopes = f_pts[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = np.maximum(0, np.minimum(down, up))
    if norm == "slaney":
        fb *= 2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels])
    return fb


def load(base, kind):
    shape = tuple(int(v) for v in pathlib.Path(f"{base}.{kind}.shape").read_text().split())
    return np.fromfile(f"{base}.{kind}.f32", dtype="<f4").reshape(shape)


def peak_relative_error(got, want):
    assert got.shape == want.shape
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    binary = ops_test_binary()
    assert binary.exists(), f"{binary} is missing: build sluice_ops_test first"
    folder = tmp_path_factory.mktemp("audio")
    signals = {}
    for name, rate, seconds, seed in [("a16k", 16000, 1.5, 1), ("b22k", 22050, 2.2, 2),
                                      ("c16k", 16000, 3.0, 3)]:
        signals[name] = (write_wav(folder / f"{name}.wav", speech_like(rate, seconds, seed), rate),
                         rate)
    env = dict(os.environ, SLUICE_REFERENCE_DIR=str(folder))
    run = subprocess.run([str(binary), "--gtest_filter=AudioReferenceDumpTest.*"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[  PASSED  ] 1 test." in run.stdout, run.stdout
    return folder, signals


NAMES = ["a16k", "b22k", "c16k"]


@pytest.mark.parametrize("name", NAMES)
def test_power_spectrogram(dumped, name):
    folder, signals = dumped
    x, _ = signals[name]
    want = spectrogram(x, 400, 160, "hann", 2, center=True)
    assert peak_relative_error(load(folder / name, "spec_power"), want) < TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_magnitude_spectrogram_hamming_uncentred(dumped, name):
    folder, signals = dumped
    x, _ = signals[name]
    want = spectrogram(x, 512, 128, "hamming", 1, center=False)
    assert peak_relative_error(load(folder / name, "spec_magnitude"), want) < TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_mel_htk(dumped, name):
    folder, signals = dumped
    x, rate = signals[name]
    fb = mel_filterbank(201, rate, 80, 0.0, rate / 2, "htk", None)
    want = spectrogram(x, 400, 160, "hann", 2, center=True) @ fb
    assert peak_relative_error(load(folder / name, "mel_htk"), want) < TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_mel_slaney(dumped, name):
    folder, signals = dumped
    x, rate = signals[name]
    fb = mel_filterbank(201, rate, 64, 50.0, 7000.0, "slaney", "slaney")
    want = spectrogram(x, 400, 160, "hann", 2, center=True) @ fb
    assert peak_relative_error(load(folder / name, "mel_slaney"), want) < TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_rfft_whole_signal(dumped, name):
    folder, signals = dumped
    x, _ = signals[name]
    want = np.abs(np.fft.rfft(x))
    assert peak_relative_error(load(folder / name, "rfft"), want) < TOLERANCE


@pytest.mark.parametrize("name", NAMES)
def test_rfft_frames(dumped, name):
    folder, signals = dumped
    x, _ = signals[name]
    frames = x.size // 512
    want = np.abs(np.fft.rfft(x[:frames * 512].reshape(frames, 512), axis=1))
    assert peak_relative_error(load(folder / name, "rfft_frames"), want) < TOLERANCE

