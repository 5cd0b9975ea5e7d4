// The signal processing under the audio ops: windows, STFT, real-FFT magnitudes, mel
// filterbanks and windowed-sinc resampling. Single long FFTs are kissfft's: a kissfft plan
// keeps scratch space and so cannot be shared between threads, and making one costs more
// than the transform (twiddles), so each thread keeps its plans per size. The STFT's many
// short transforms run eight frames at a time in SIMD lanes (LaneRealFft, when n_fft / 2
// factors into 2, 3, 5), else through OpenCV's row-wise DFT in one call (either is faster
// than one kissfft per frame).
#include <kiss_fft.h>
#include <kiss_fftr.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <numeric>
#include <opencv2/core.hpp>

#include "sluice/ops/audio/audio_ops.h"
#include "sluice/ops/audio/lane_fft.h"

namespace sluice::ops {
namespace {

struct FftrFree {
  void operator()(kiss_fftr_cfg cfg) const { kiss_fftr_free(cfg); }
};
using FftrPlan = std::unique_ptr<std::remove_pointer_t<kiss_fftr_cfg>, FftrFree>;

struct FftFree {
  void operator()(kiss_fft_cfg cfg) const { kiss_fft_free(cfg); }
};
using FftPlan = std::unique_ptr<std::remove_pointer_t<kiss_fft_cfg>, FftFree>;

// This thread's plan for a transform of size n, made on first use. A few sizes are kept
// (pipelines use one or two); the oldest goes when a new size needs room.
template <typename Plan, typename Alloc>
auto* CachedPlan(std::vector<std::pair<int64_t, Plan>>& cache, int64_t n, Alloc alloc) {
  for (auto& [size, plan] : cache) {
    if (size == n) return plan.get();
  }
  constexpr size_t kMaxPlans = 4;
  if (cache.size() == kMaxPlans) cache.erase(cache.begin());
  cache.emplace_back(n, Plan(alloc(static_cast<int>(n))));
  return cache.back().second.get();
}

kiss_fftr_cfg RealPlan(int64_t n) {
  thread_local std::vector<std::pair<int64_t, FftrPlan>> cache;
  return CachedPlan(cache, n, [](int size) { return kiss_fftr_alloc(size, 0, nullptr, nullptr); });
}

kiss_fft_cfg ComplexPlan(int64_t n) {
  thread_local std::vector<std::pair<int64_t, FftPlan>> cache;
  return CachedPlan(cache, n, [](int size) { return kiss_fft_alloc(size, 0, nullptr, nullptr); });
}

// This thread's lane-parallel FFT of size n, or nullptr when there is none for n.
LaneRealFft* CachedLaneFft(int64_t n) {
  thread_local std::vector<std::pair<int64_t, std::unique_ptr<LaneRealFft>>> cache;
  for (auto& [size, fft] : cache) {
    if (size == n) return fft.get();
  }
  if (cache.size() == 4) cache.erase(cache.begin());
  cache.emplace_back(n, LaneRealFft::Make(n));
  return cache.back().second.get();
}

// This thread's long lane-parallel FFT of size n, or nullptr when there is none for n.
LongRealFft* CachedLongFft(int64_t n) {
  thread_local std::vector<std::pair<int64_t, std::unique_ptr<LongRealFft>>> cache;
  for (auto& [size, fft] : cache) {
    if (size == n) return fft.get();
  }
  if (cache.size() == 4) cache.erase(cache.begin());
  cache.emplace_back(n, LongRealFft::Make(n));
  return cache.back().second.get();
}

// The window of each (kind, length), made once per thread.
const std::vector<float>& CachedWindow(Window window, int64_t length) {
  thread_local std::vector<std::pair<std::pair<Window, int64_t>, std::vector<float>>> cache;
  for (const auto& [key, w] : cache) {
    if (key.first == window && key.second == length) return w;
  }
  if (cache.size() == 4) cache.erase(cache.begin());
  cache.emplace_back(std::make_pair(window, length), MakeWindow(window, length));
  return cache.back().second;
}

double HzToMel(double hz, MelScale scale) {
  if (scale == MelScale::kHtk) return 2595.0 * std::log10(1.0 + hz / 700.0);
  constexpr double kFSp = 200.0 / 3;
  constexpr double kMinLogHz = 1000.0;
  constexpr double kMinLogMel = kMinLogHz / kFSp;
  const double logstep = std::log(6.4) / 27.0;
  if (hz < kMinLogHz) return hz / kFSp;
  return kMinLogMel + std::log(hz / kMinLogHz) / logstep;
}

double MelToHz(double mel, MelScale scale) {
  if (scale == MelScale::kHtk) return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
  constexpr double kFSp = 200.0 / 3;
  constexpr double kMinLogHz = 1000.0;
  constexpr double kMinLogMel = kMinLogHz / kFSp;
  const double logstep = std::log(6.4) / 27.0;
  if (mel < kMinLogMel) return mel * kFSp;
  return kMinLogHz * std::exp(logstep * (mel - kMinLogMel));
}

}  // namespace

std::vector<float> MakeWindow(Window window, int64_t length) {
  std::vector<float> w(static_cast<size_t>(length));
  const double a0 = window == Window::kHann ? 0.5 : 0.54;
  for (int64_t i = 0; i < length; ++i) {
    w[i] =
        static_cast<float>(a0 - (1 - a0) * std::cos(2 * std::numbers::pi * static_cast<double>(i) /
                                                    static_cast<double>(length)));
  }
  return w;
}

StatusOr<Tensor> Spectrogram(const float* signal, int64_t n, const StftParams& p) {
  const int64_t pad = p.center ? p.n_fft / 2 : 0;
  if (p.center && n <= pad) {
    return absl::InvalidArgumentError(absl::StrCat("signal of ", n, " samples is too short for ",
                                                   "centred frames of n_fft=", p.n_fft,
                                                   " (needs more than ", pad, ")"));
  }
  if (!p.center && n < p.n_fft) {
    return absl::InvalidArgumentError(
        absl::StrCat("signal of ", n, " samples is shorter than one frame (n_fft=", p.n_fft, ")"));
  }
  const int64_t padded = n + 2 * pad;
  const int64_t frames = 1 + (padded - p.n_fft) / p.hop;
  const int64_t bins = p.n_fft / 2 + 1;
  // Reflect padding as torch.stft / numpy.pad(mode="reflect"): x[-i] = x[i].
  auto at = [&](int64_t i) -> float {
    i -= pad;
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return signal[i];
  };
  const std::vector<float>& window = CachedWindow(p.window, p.n_fft);
  Tensor out = Tensor::Empty(DType::kF32, {frames, bins});
  float* o = out.mutable_data<float>();
  if (LaneRealFft* fft = CachedLaneFft(p.n_fft)) {
    // kLanes frames at a time, lane-interleaved; the last group is padded with zero frames.
    constexpr int64_t kLanes = LaneRealFft::kLanes;
    thread_local std::vector<float> in, power;
    in.resize(static_cast<size_t>(p.n_fft * kLanes));
    power.resize(static_cast<size_t>(bins * kLanes));
    for (int64_t f0 = 0; f0 < frames; f0 += kLanes) {
      const int64_t group = std::min(kLanes, frames - f0);
      for (int64_t l = 0; l < kLanes; ++l) {
        const int64_t start = (f0 + l) * p.hop;
        if (l >= group) {
          for (int64_t k = 0; k < p.n_fft; ++k) in[k * kLanes + l] = 0.0f;
        } else if (start >= pad && start + p.n_fft <= pad + n) {
          const float* x = signal + (start - pad);
          for (int64_t k = 0; k < p.n_fft; ++k) in[k * kLanes + l] = window[k] * x[k];
        } else {
          for (int64_t k = 0; k < p.n_fft; ++k) in[k * kLanes + l] = window[k] * at(start + k);
        }
      }
      fft->Power(in.data(), power.data());
      for (int64_t l = 0; l < group; ++l) {
        float* dst = o + (f0 + l) * bins;
        for (int64_t b = 0; b < bins; ++b) dst[b] = power[b * kLanes + l];
        if (p.power == 1) {
          for (int64_t b = 0; b < bins; ++b) dst[b] = std::sqrt(dst[b]);
        }
      }
    }
    return out;
  }
  // All windowed frames in one matrix, transformed row by row in one call; the buffers are
  // this thread's, reused from call to call.
  thread_local std::vector<float> frames_buf, spectra_buf;
  const size_t cells = static_cast<size_t>(frames * p.n_fft);
  if (frames_buf.size() < cells) {
    frames_buf.resize(cells);
    spectra_buf.resize(cells);
  }
  for (int64_t f = 0; f < frames; ++f) {
    const int64_t start = f * p.hop;
    float* frame = frames_buf.data() + f * p.n_fft;
    if (start >= pad && start + p.n_fft <= pad + n) {
      const float* x = signal + (start - pad);
      for (int64_t k = 0; k < p.n_fft; ++k) frame[k] = window[k] * x[k];
    } else {
      for (int64_t k = 0; k < p.n_fft; ++k) frame[k] = window[k] * at(start + k);
    }
  }
  const cv::Mat in(static_cast<int>(frames), static_cast<int>(p.n_fft), CV_32F, frames_buf.data());
  cv::Mat spectra(static_cast<int>(frames), static_cast<int>(p.n_fft), CV_32F, spectra_buf.data());
  try {
    cv::dft(in, spectra, cv::DFT_ROWS);
  } catch (const cv::Exception& e) {
    return absl::InternalError(absl::StrCat("OpenCV dft: ", e.what()));
  }
  // Each row is in OpenCV's packed (CCS) layout for even n_fft:
  // [Re 0, Re 1, Im 1, ..., Re n/2-1, Im n/2-1, Re n/2].
  const int64_t last = p.n_fft - 1;
  for (int64_t f = 0; f < frames; ++f) {
    const float* row = spectra_buf.data() + f * p.n_fft;
    float* dst = o + f * bins;
    dst[0] = row[0] * row[0];
    for (int64_t b = 1; b < bins - 1; ++b) {
      dst[b] = row[2 * b - 1] * row[2 * b - 1] + row[2 * b] * row[2 * b];
    }
    dst[bins - 1] = row[last] * row[last];
    if (p.power == 1) {
      for (int64_t b = 0; b < bins; ++b) dst[b] = std::sqrt(dst[b]);
    }
  }
  return out;
}

void RfftMagnitude(const float* signal, int64_t n, int64_t n_fft, float* out) {
  const int64_t bins = n_fft / 2 + 1;
  const int64_t used = std::min(n, n_fft);
  if (n_fft % 2 == 0) {
    thread_local std::vector<float> in;
    thread_local std::vector<kiss_fft_cpx> spectrum;
    in.resize(static_cast<size_t>(n_fft));
    std::copy(signal, signal + used, in.begin());
    std::fill(in.begin() + used, in.end(), 0.0f);
    if (LongRealFft* fft = CachedLongFft(n_fft)) {
      fft->Magnitude(in.data(), out);
      return;
    }
    spectrum.resize(static_cast<size_t>(bins));
    kiss_fftr(RealPlan(n_fft), in.data(), spectrum.data());
    for (int64_t b = 0; b < bins; ++b) {
      out[b] = std::sqrt(spectrum[b].r * spectrum[b].r + spectrum[b].i * spectrum[b].i);
    }
    return;
  }
  // kiss_fftr needs an even size; odd sizes take the complex transform.
  std::vector<kiss_fft_cpx> in(static_cast<size_t>(n_fft), kiss_fft_cpx{0, 0});
  for (int64_t i = 0; i < used; ++i) in[i].r = signal[i];
  std::vector<kiss_fft_cpx> spectrum(static_cast<size_t>(n_fft));
  kiss_fft(ComplexPlan(n_fft), in.data(), spectrum.data());
  for (int64_t b = 0; b < bins; ++b) out[b] = std::hypot(spectrum[b].r, spectrum[b].i);
}

std::vector<float> MelFilterbank(int64_t n_bins, int64_t sample_rate, int64_t n_mels, double f_min,
                                 double f_max, MelScale scale, bool slaney_norm) {
  // torchaudio.functional.melscale_fbanks, transposed to [n_mels, n_bins].
  std::vector<double> freqs(static_cast<size_t>(n_bins));
  const double nyquist = static_cast<double>(sample_rate / 2);
  for (int64_t b = 0; b < n_bins; ++b) {
    freqs[b] =
        n_bins == 1 ? 0.0 : nyquist * static_cast<double>(b) / static_cast<double>(n_bins - 1);
  }
  const double m_min = HzToMel(f_min, scale);
  const double m_max = HzToMel(f_max, scale);
  std::vector<double> f_pts(static_cast<size_t>(n_mels + 2));
  for (int64_t i = 0; i < n_mels + 2; ++i) {
    f_pts[i] = MelToHz(
        m_min + (m_max - m_min) * static_cast<double>(i) / static_cast<double>(n_mels + 1), scale);
  }
  std::vector<float> fb(static_cast<size_t>(n_mels * n_bins));
  for (int64_t m = 0; m < n_mels; ++m) {
    const double lo = f_pts[m], center = f_pts[m + 1], hi = f_pts[m + 2];
    const double norm = slaney_norm ? 2.0 / (hi - lo) : 1.0;
    for (int64_t b = 0; b < n_bins; ++b) {
      const double down = (freqs[b] - lo) / (center - lo);
      const double up = (hi - freqs[b]) / (hi - center);
      fb[m * n_bins + b] = static_cast<float>(std::max(0.0, std::min(down, up)) * norm);
    }
  }
  return fb;
}

Tensor ResampleAudio(const Tensor& samples, int64_t from, int64_t to, int zeros, double rolloff) {
  const int64_t n = samples.dim(0);
  const int64_t channels = samples.dim(1);
  const int64_t g = std::gcd(from, to);
  const int64_t up = to / g, down = from / g;
  const int64_t out_n = (n * up + down - 1) / down;
  Tensor out = Tensor::Empty(DType::kF32, {out_n, channels});
  if (out_n == 0) return out;
  // Cutoff in cycles per input sample, and the kernel's half width in input samples.
  const double fc = 0.5 * rolloff * std::min(1.0, static_cast<double>(up) / down);
  const double half_width = zeros / (2 * fc);
  const int64_t taps = static_cast<int64_t>(std::ceil(half_width));
  const int64_t width = 2 * taps + 1;
  // kernel(phase)[k] weighs input i0 + k - taps for an output at i0 + phase / up.
  auto fill = [&](int64_t phase, float* kernel) {
    const double frac = static_cast<double>(phase) / static_cast<double>(up);
    for (int64_t k = 0; k < width; ++k) {
      const double d = frac - static_cast<double>(k - taps);
      if (std::abs(d) >= half_width) {
        kernel[k] = 0;
        continue;
      }
      const double x = 2 * fc * d;
      const double sinc = x == 0 ? 1.0 : std::sin(std::numbers::pi * x) / (std::numbers::pi * x);
      const double hann = 0.5 * (1 + std::cos(std::numbers::pi * d / half_width));
      kernel[k] = static_cast<float>(2 * fc * sinc * hann);
    }
  };
  // One kernel per phase when the table is small; otherwise one at a time.
  const bool table = up * width <= (1 << 20);
  std::vector<float> kernels(static_cast<size_t>(table ? up * width : width));
  if (table) {
    for (int64_t phase = 0; phase < up; ++phase) fill(phase, kernels.data() + phase * width);
  }
  const float* in = samples.data<float>();
  float* o = out.mutable_data<float>();
  for (int64_t j = 0; j < out_n; ++j) {
    const int64_t pos = j * down;
    const int64_t i0 = pos / up, phase = pos % up;
    const float* kernel = kernels.data() + (table ? phase * width : 0);
    if (!table) fill(phase, kernels.data());
    const int64_t first = i0 - taps;
    const int64_t k_lo = std::max<int64_t>(0, -first);
    const int64_t k_hi = std::min<int64_t>(width, n - first);
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0;
      for (int64_t k = k_lo; k < k_hi; ++k) acc += kernel[k] * in[(first + k) * channels + c];
      o[j * channels + c] = static_cast<float>(acc);
    }
  }
  return out;
}

}  // namespace sluice::ops
