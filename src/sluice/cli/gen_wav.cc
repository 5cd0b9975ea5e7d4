#include "sluice/cli/gen_wav.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numbers>
#include <thread>

#include "absl/strings/str_format.h"
#include "sluice/core/rng.h"
#include "sluice/core/tensor.h"
#include "sluice/ops/audio/audio_ops.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;

// Random streams, distinct from those of the JPEG generator.
constexpr uint32_t kSpeechStream = 0x3A7E0001;
constexpr uint32_t kWavCorruptChoice = 0x3A7E0002;
constexpr uint32_t kWavCorruptBytes = 0x3A7E0003;
constexpr uint32_t kBoxStream = 0x3A7E0004;

double Gaussian(Rng& rng) {
  const double u1 = 1.0 - rng.Uniform(), u2 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

// Gain of a formant bump at `f` Hz centred on `centre` with bandwidth `width`.
double Formant(double f, double centre, double width) {
  const double d = (f - centre) / width;
  return std::exp(-0.5 * d * d);
}

Status WriteBytes(const fs::path& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

}  // namespace

std::vector<float> SynthesizeSpeech(const WavOptions& options, uint64_t seed, uint64_t index) {
  Rng rng(SeedFor(seed, 0, index, kSpeechStream));
  const double rate = options.sample_rate;
  const double seconds = rng.Uniform(options.min_seconds, options.max_seconds);
  const int64_t n = static_cast<int64_t>(seconds * rate);
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  const double base = rng.Uniform(90, 240);      // the speaker's pitch
  const double vibrato = rng.Uniform(0.5, 2.0);  // Hz of the pitch glide
  const double f1 = rng.Uniform(500, 800), f2 = rng.Uniform(1100, 2200);
  double phase = 0;
  int64_t i = 0;
  while (i < n) {
    // A syllable, then a pause.
    const int64_t syllable = static_cast<int64_t>(rng.Uniform(0.12, 0.4) * rate);
    const int64_t pause = static_cast<int64_t>(rng.Uniform(0.03, 0.2) * rate);
    const double loudness = rng.Uniform(0.4, 1.0);
    const double shift = rng.Uniform(0.85, 1.2);  // intonation of this syllable
    const int64_t end = std::min(n, i + syllable);
    for (int64_t j = i; j < end; ++j) {
      const double t = static_cast<double>(j) / rate;
      const double f0 = base * shift * (1 + 0.12 * std::sin(2 * std::numbers::pi * vibrato * t));
      phase += 2 * std::numbers::pi * f0 / rate;
      const double u = static_cast<double>(j - i) / static_cast<double>(syllable);
      const double envelope = loudness * std::sin(std::numbers::pi * u);  // rise and fall
      double v = 0;
      const int harmonics = std::min(40, static_cast<int>(4000 / f0));
      for (int k = 1; k <= harmonics; ++k) {
        const double f = k * f0;
        const double gain = (0.3 + Formant(f, f1, 150) + 0.6 * Formant(f, f2, 250)) / k;
        v += gain * std::sin(k * phase);
      }
      x[j] = static_cast<float>(0.25 * envelope * v);
    }
    i = end + pause;
  }
  float peak = 1e-6f;
  for (float v : x) peak = std::max(peak, std::abs(v));
  const float scale = 0.8f / peak;
  for (float& v : x) v = v * scale + static_cast<float>(0.003 * Gaussian(rng));
  return x;
}

std::string SynthesizeWav(const WavOptions& options, uint64_t seed, uint64_t index) {
  const std::vector<float> x = SynthesizeSpeech(options, seed, index);
  Tensor samples = Tensor::Empty(DType::kF32, {static_cast<int64_t>(x.size()), 1});
  std::copy(x.begin(), x.end(), samples.mutable_data<float>());
  return ops::EncodeWav16(samples, options.sample_rate);
}

std::string WavRelativePath(int64_t index, int64_t classes) {
  return absl::StrFormat("class_%03d/utt_%06d.wav", index % classes, index);
}

StatusOr<GenDataResult> GenerateWavDataset(const GenDataOptions& options, const WavOptions& wav) {
  if (options.out_dir.empty()) return absl::InvalidArgumentError("--out: missing output folder");
  if (options.count < 0) return absl::InvalidArgumentError("--count: must be >= 0");
  if (options.classes < 1) return absl::InvalidArgumentError("--classes: must be >= 1");
  if (wav.sample_rate != 16000 && wav.sample_rate != 22050) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sample-rate: must be 16000 or 22050, got ", wav.sample_rate));
  }
  if (!(wav.min_seconds > 0 && wav.min_seconds <= wav.max_seconds)) {
    return absl::InvalidArgumentError("durations: need 0 < min_seconds <= max_seconds");
  }
  if (!(options.corrupt_fraction >= 0 && options.corrupt_fraction <= 1)) {
    return absl::InvalidArgumentError("--corrupt-fraction: must be between 0 and 1");
  }
  const std::vector<CorruptKind> kinds =
      ChooseCorrupt(options.count, options.corrupt_fraction, options.seed ^ kWavCorruptChoice);
  return WriteDataset(
      options, kinds,
      [&](int64_t i) -> StatusOr<std::string> {
        std::string data = SynthesizeWav(wav, options.seed, static_cast<uint64_t>(i));
        Rng rng(SeedFor(options.seed, 0, static_cast<uint64_t>(i), kWavCorruptBytes));
        if (kinds[i] == CorruptKind::kTruncated) {
          data.resize(
              static_cast<size_t>(static_cast<double>(data.size()) * rng.Uniform(0.3, 0.7)));
        } else if (kinds[i] == CorruptKind::kGarbage) {
          data.assign(static_cast<size_t>(rng.UniformInt(2048, 20480)), '\0');
          for (char& c : data) c = static_cast<char>(rng.NextU64() & 0xFF);
          data[0] = 'G';  // never "RIFF" by accident
        }
        return data;
      },
      [&](int64_t i) { return WavRelativePath(i, options.classes); });
}

std::array<int64_t, 4> SynthesizeBox(uint64_t seed, uint64_t index, int width, int height) {
  Rng rng(SeedFor(seed, 0, index, kBoxStream));
  const int64_t w = std::max<int64_t>(1, std::llround(width * rng.Uniform(0.3, 0.9)));
  const int64_t h = std::max<int64_t>(1, std::llround(height * rng.Uniform(0.3, 0.9)));
  const int64_t x0 = rng.UniformInt(0, width - w);
  const int64_t y0 = rng.UniformInt(0, height - h);
  return {x0, y0, x0 + w, y0 + h};
}

Status WriteBoxSidecars(const GenDataOptions& options) {
  const fs::path root(options.out_dir);
  for (int64_t i = 0; i < options.count; ++i) {
    const auto box = SynthesizeBox(options.seed, static_cast<uint64_t>(i), options.image.width,
                                   options.image.height);
    fs::path path = root / ImageRelativePath(i, options.classes);
    path.replace_extension(".box");
    SLUICE_RETURN_IF_ERROR(
        WriteBytes(path, absl::StrFormat("%d %d %d %d\n", box[0], box[1], box[2], box[3])));
  }
  return absl::OkStatus();
}

}  // namespace sluice::cli
