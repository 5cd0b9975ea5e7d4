// The audio built-in ops: decode_wav, resample, add_noise, spectrogram, mel, log, rfft,
// normalize_features and pad_or_trim, gathered by RegisterAudioOps() (registry.h), plus the
// pure signal-processing functions they are made of (exposed for tests and tools).
//
// Every op is immutable once built; Apply() is safe to call from any thread. The pure
// functions are safe from any thread (FFT plans and scratch are kept per thread). FFTs:
// lane-parallel SIMD transforms (lane_fft.h) where the size allows, else kissfft / OpenCV.
#ifndef SLUICE_OPS_AUDIO_AUDIO_OPS_H_
#define SLUICE_OPS_AUDIO_AUDIO_OPS_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/core/tensor.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {

OpDef DecodeWavOpDef();
OpDef ResampleOpDef();
OpDef AddNoiseOpDef();
OpDef SpectrogramOpDef();
OpDef MelOpDef();
OpDef LogOpDef();
OpDef RfftOpDef();
OpDef NormalizeFeaturesOpDef();
OpDef PadOrTrimOpDef();

// --- WAV ------------------------------------------------------------------------------------

struct WavAudio {
  Tensor samples;           // f32 [frames, channels], in [-1, 1] for PCM
  int64_t sample_rate = 0;  // Hz
};

// Parses a RIFF/WAVE file: PCM 8 (unsigned), 16, 24, 32-bit and IEEE float 32-bit,
// 1 or 2 channels, WAVE_FORMAT_EXTENSIBLE with those subformats. Unknown chunks are skipped.
// With `mono`, channels are averaged into one. Errors say what is wrong: "truncated",
// "not a RIFF/WAVE file", "unsupported format". `frames_to_decode`, when given, is called
// with the file's frame count once the header is read and returns how many leading frames
// to convert (the rest are not converted and not returned); the whole file is still checked.
StatusOr<WavAudio> ParseWav(
    std::string_view bytes, bool mono,
    const std::function<int64_t(int64_t frames)>& frames_to_decode = nullptr);

// A 16-bit PCM WAV file of `samples` (f32 [frames, channels]; v * 32768, saturated).
std::string EncodeWav16(const Tensor& samples, int64_t sample_rate);

// --- signal processing ----------------------------------------------------------------------

enum class Window { kHann, kHamming };

// A periodic window of `length` (numpy/scipy `get_window(..., fftbins=True)`, torch's
// default `periodic=True`).
std::vector<float> MakeWindow(Window window, int64_t length);

struct StftParams {
  int64_t n_fft = 400;
  int64_t hop = 160;
  Window window = Window::kHann;
  int power = 2;       // 1: magnitude, 2: power
  bool center = true;  // reflect-pad n_fft / 2 on both sides (torch.stft's center=True)
};

// |STFT|^power of a mono signal: f32 [frames, n_fft / 2 + 1]. frames = 1 + n / hop when
// centred, else 1 + (n - n_fft) / hop. REQUIRES: n_fft even and >= 2, hop >= 1.
// Errors: a signal too short for one frame.
StatusOr<Tensor> Spectrogram(const float* signal, int64_t n, const StftParams& params);

// |rfft(x, n_fft)| (numpy.fft.rfft semantics: zero-pad or truncate to n_fft): n_fft / 2 + 1
// magnitudes written to `out`. REQUIRES: n_fft >= 1.
void RfftMagnitude(const float* signal, int64_t n, int64_t n_fft, float* out);

enum class MelScale { kHtk, kSlaney };

// A mel filterbank [n_mels, n_fft / 2 + 1] of triangular filters between f_min and f_max,
// as torchaudio.functional.melscale_fbanks (the `htk` or `slaney` scale; `slaney_norm`
// divides each filter by its width in Hz / 2, librosa's norm="slaney").
std::vector<float> MelFilterbank(int64_t n_bins, int64_t sample_rate, int64_t n_mels, double f_min,
                                 double f_max, MelScale scale, bool slaney_norm);

// Windowed-sinc resampling (a Hann-windowed sinc, `zeros` zero crossings on each side,
// cutoff at `rolloff` times the lower Nyquist frequency), computed polyphase: one kernel per
// output phase of the rational ratio to / from. Channels are resampled independently.
// REQUIRES: from, to >= 1, samples is f32 [frames, channels].
Tensor ResampleAudio(const Tensor& samples, int64_t from, int64_t to, int zeros = 6,
                     double rolloff = 0.99);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_AUDIO_AUDIO_OPS_H_
