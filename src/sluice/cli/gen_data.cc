#include "sluice/cli/gen_data.h"

#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <numbers>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/core/rng.h"
#include "sluice/ops/storage.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/tar.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;

// Distinct RNG streams (the "op position" slot of SeedFor) so pixels, corruption choice and
// corruption contents never share draws.
constexpr uint32_t kPixelStream = 0x6A9E0001;
constexpr uint32_t kCorruptChoiceStream = 0x6A9E0002;
constexpr uint32_t kCorruptBytesStream = 0x6A9E0003;

constexpr float kTwoPi = 2.0f * std::numbers::pi_v<float>;

// A sine table with 1024 entries per period: shape textures need many sines per image.
class SineTable {
 public:
  SineTable() {
    for (int i = 0; i < kSize; ++i) table_[i] = std::sin(kTwoPi * i / kSize);
  }
  // sin(2*pi*t), t in periods.
  float operator()(float t) const {
    const int i = static_cast<int>(std::floor(t * kSize)) & (kSize - 1);
    return table_[i];
  }

 private:
  static constexpr int kSize = 1024;
  float table_[kSize];
};

const SineTable& Sine() {
  static const SineTable* table = new SineTable();
  return *table;
}

struct Rgb {
  float c[3];
};

Rgb RandomColor(Rng& rng, float lo = 10, float hi = 245) {
  return Rgb{{static_cast<float>(rng.Uniform(lo, hi)), static_cast<float>(rng.Uniform(lo, hi)),
              static_cast<float>(rng.Uniform(lo, hi))}};
}

class Canvas {
 public:
  Canvas(int width, int height) : w_(width), h_(height), px_(size_t(width) * height * 3) {}
  int width() const { return w_; }
  int height() const { return h_; }
  float* at(int x, int y) { return &px_[(size_t(y) * w_ + x) * 3]; }
  std::vector<float>& pixels() { return px_; }

 private:
  int w_, h_;
  std::vector<float> px_;
};

// A bilinear blend of four random corner colours plus a slow diagonal colour wave.
void PaintBackground(Canvas& canvas, Rng& rng) {
  const int w = canvas.width(), h = canvas.height();
  Rgb corner[4];
  for (Rgb& c : corner) c = RandomColor(rng, 20, 235);
  const float amp = static_cast<float>(rng.Uniform(8, 24));
  const float fx = static_cast<float>(rng.Uniform(0.4, 2.2)) * kTwoPi / w;
  const float fy = static_cast<float>(rng.Uniform(0.4, 2.2)) * kTwoPi / h;
  float phase[3];
  for (float& p : phase) p = static_cast<float>(rng.Uniform(0, kTwoPi));
  // sin(fx*x + fy*y + p) = sin(fx*x) cos(fy*y + p) + cos(fx*x) sin(fy*y + p).
  std::vector<float> sx(w), cx(w);
  for (int x = 0; x < w; ++x) {
    sx[x] = std::sin(fx * x);
    cx[x] = std::cos(fx * x);
  }
  for (int y = 0; y < h; ++y) {
    const float ty = h > 1 ? static_cast<float>(y) / (h - 1) : 0;
    float cy[3], sy[3], left[3], right[3];
    for (int c = 0; c < 3; ++c) {
      cy[c] = amp * std::cos(fy * y + phase[c]);
      sy[c] = amp * std::sin(fy * y + phase[c]);
      left[c] = corner[0].c[c] + (corner[2].c[c] - corner[0].c[c]) * ty;
      right[c] = corner[1].c[c] + (corner[3].c[c] - corner[1].c[c]) * ty;
    }
    float* row = canvas.at(0, y);
    for (int x = 0; x < w; ++x) {
      const float tx = w > 1 ? static_cast<float>(x) / (w - 1) : 0;
      for (int c = 0; c < 3; ++c) {
        row[3 * x + c] = left[c] + (right[c] - left[c]) * tx + sx[x] * cy[c] + cx[x] * sy[c];
      }
    }
  }
}

// Large soft blobs (out-of-focus objects, sky patches): a smooth bump of compact support.
void PaintBlobs(Canvas& canvas, Rng& rng) {
  const int w = canvas.width(), h = canvas.height();
  const int n = static_cast<int>(rng.UniformInt(2, 5));
  for (int i = 0; i < n; ++i) {
    const float cx = static_cast<float>(rng.Uniform(0, w));
    const float cy = static_cast<float>(rng.Uniform(0, h));
    const float rx = static_cast<float>(rng.Uniform(0.1, 0.45) * w) + 1;
    const float ry = static_cast<float>(rng.Uniform(0.1, 0.45) * h) + 1;
    const float strength = static_cast<float>(rng.Uniform(0.4, 0.9));
    const Rgb color = RandomColor(rng);
    const int x0 = std::max(0, static_cast<int>(cx - rx)), x1 = std::min(w, int(cx + rx) + 1);
    const int y0 = std::max(0, static_cast<int>(cy - ry)), y1 = std::min(h, int(cy + ry) + 1);
    for (int y = y0; y < y1; ++y) {
      const float dy = (y - cy) / ry;
      for (int x = x0; x < x1; ++x) {
        const float dx = (x - cx) / rx;
        const float d2 = dx * dx + dy * dy;
        if (d2 >= 1) continue;
        const float a = strength * (1 - d2) * (1 - d2);
        float* p = canvas.at(x, y);
        for (int c = 0; c < 3; ++c) p[c] += (color.c[c] - p[c]) * a;
      }
    }
  }
}

// Hard-edged objects: ellipses and rotated rectangles, each with its own shading gradient
// and, for some, a stripe texture (fabric, bark, fences...).
void PaintShapes(Canvas& canvas, Rng& rng) {
  const int w = canvas.width(), h = canvas.height();
  const SineTable& sine = Sine();
  const int n = static_cast<int>(rng.UniformInt(6, 16));
  for (int i = 0; i < n; ++i) {
    const bool ellipse = rng.Bernoulli(0.5);
    const float cx = static_cast<float>(rng.Uniform(0, w));
    const float cy = static_cast<float>(rng.Uniform(0, h));
    const float scale = static_cast<float>(std::min(w, h));
    const float a = static_cast<float>(rng.Uniform(0.02, 0.3)) * scale + 1;
    const float b = static_cast<float>(rng.Uniform(0.02, 0.3)) * scale + 1;
    const float angle = static_cast<float>(rng.Uniform(0, std::numbers::pi));
    const float ca = std::cos(angle), sa = std::sin(angle);
    const Rgb color = RandomColor(rng);
    const float alpha = static_cast<float>(rng.Uniform(0.65, 1.0));
    const float shade = static_cast<float>(rng.Uniform(-60, 60));
    const bool striped = rng.Bernoulli(0.5);
    const float stripe_amp = striped ? static_cast<float>(rng.Uniform(6, 22)) : 0;
    const float stripe_freq = 1.0f / static_cast<float>(rng.Uniform(3, 14));  // periods/pixel
    const float stripe_angle = static_cast<float>(rng.Uniform(0, std::numbers::pi));
    const float sdx = std::cos(stripe_angle) * stripe_freq;
    const float sdy = std::sin(stripe_angle) * stripe_freq;
    const float reach = std::sqrt(a * a + b * b);
    const int x0 = std::max(0, static_cast<int>(cx - reach));
    const int x1 = std::min(w, static_cast<int>(cx + reach) + 1);
    const int y0 = std::max(0, static_cast<int>(cy - reach));
    const int y1 = std::min(h, static_cast<int>(cy + reach) + 1);
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        const float dx = x - cx, dy = y - cy;
        const float u = (dx * ca + dy * sa) / a;  // shape-local coordinates
        const float v = (-dx * sa + dy * ca) / b;
        const bool inside = ellipse ? u * u + v * v <= 1 : std::abs(u) <= 1 && std::abs(v) <= 1;
        if (!inside) continue;
        float tone = shade * 0.5f * (u + v);
        if (striped) tone += stripe_amp * sine(x * sdx + y * sdy);
        float* p = canvas.at(x, y);
        for (int c = 0; c < 3; ++c) p[c] += (color.c[c] + tone - p[c]) * alpha;
      }
    }
  }
}

// Multi-octave value noise (cell sizes 2..32 px) for luminance texture: grass, gravel,
// fabric. A slow envelope makes some regions busy and others smooth, as in photos.
void PaintFractalTexture(Canvas& canvas, Rng& rng) {
  const int w = canvas.width(), h = canvas.height();
  std::vector<float> texture(static_cast<size_t>(w) * h, 0.0f);
  float amp = static_cast<float>(rng.Uniform(10, 18));
  for (int cell = 32; cell >= 2; cell /= 2, amp *= 0.8f) {
    const int gw = w / cell + 2, gh = h / cell + 2;
    std::vector<float> grid(static_cast<size_t>(gw) * gh);
    for (float& g : grid) g = static_cast<float>(rng.Uniform(-1, 1)) * amp;
    std::vector<int> ix(w);
    std::vector<float> fx(w);
    for (int x = 0; x < w; ++x) {
      ix[x] = x / cell;
      const float t = static_cast<float>(x % cell) / cell;
      fx[x] = t * t * (3 - 2 * t);
    }
    for (int y = 0; y < h; ++y) {
      const int iy = y / cell;
      const float t = static_cast<float>(y % cell) / cell;
      const float fy = t * t * (3 - 2 * t);
      const float* g0 = &grid[static_cast<size_t>(iy) * gw];
      const float* g1 = g0 + gw;
      float* out = &texture[static_cast<size_t>(y) * w];
      for (int x = 0; x < w; ++x) {
        const int i = ix[x];
        const float top = g0[i] + (g0[i + 1] - g0[i]) * fx[x];
        const float bottom = g1[i] + (g1[i + 1] - g1[i]) * fx[x];
        out[x] += top + (bottom - top) * fy;
      }
    }
  }
  const SineTable& sine = Sine();
  const float env_fx = static_cast<float>(rng.Uniform(0.3, 1.5)) / w;
  const float env_fy = static_cast<float>(rng.Uniform(0.3, 1.5)) / h;
  const float env_phase = static_cast<float>(rng.Uniform(0, 1));
  for (int y = 0; y < h; ++y) {
    float* row = canvas.at(0, y);
    const float* tex = &texture[static_cast<size_t>(y) * w];
    const float env_y = sine(y * env_fy + env_phase);
    for (int x = 0; x < w; ++x) {
      const float env = 0.55f + 0.45f * env_y * sine(x * env_fx + 0.25f);
      const float v = tex[x] * env;
      for (int c = 0; c < 3; ++c) row[3 * x + c] += v;
    }
  }
}

// Sensor-like noise: mostly luminance, a little chroma.
void PaintNoise(Canvas& canvas, Rng& rng) {
  const int w = canvas.width(), h = canvas.height();
  const float luma_noise = static_cast<float>(rng.Uniform(8, 13)) / 255.0f;
  const float chroma_noise = static_cast<float>(rng.Uniform(1, 3)) / 255.0f;
  for (int y = 0; y < h; ++y) {
    float* row = canvas.at(0, y);
    for (int x = 0; x < w; ++x) {
      const uint64_t r = rng.NextU64();
      // Triangular-distributed luminance noise from two bytes, chroma from three more.
      const float luma =
          (static_cast<float>(r & 0xFF) + static_cast<float>((r >> 8) & 0xFF) - 255.0f) *
          luma_noise;
      for (int c = 0; c < 3; ++c) {
        const float chroma =
            (static_cast<float>((r >> (16 + 8 * c)) & 0xFF) - 127.5f) * chroma_noise;
        row[3 * x + c] += luma + chroma;
      }
    }
  }
}

std::string ErrnoMessage() { return std::strerror(errno); }

Status WriteFile(const fs::path& path, std::string_view data) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) {
    return absl::InternalError(absl::StrCat("cannot create ", path.string(), ": ", ErrnoMessage()));
  }
  if (!data.empty() && std::fwrite(data.data(), 1, data.size(), f.get()) != data.size()) {
    return absl::InternalError(absl::StrCat("cannot write ", path.string(), ": ", ErrnoMessage()));
  }
  if (std::fclose(f.release()) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path.string(), ": ", ErrnoMessage()));
  }
  return absl::OkStatus();
}

// The bytes of file `index` as planted: the JPEG itself, a prefix of it cut inside the
// entropy-coded data, or random bytes that do not even start like a JPEG.
StatusOr<std::string> FileContents(const GenDataOptions& options, int64_t index, CorruptKind kind) {
  Rng rng(SeedFor(options.seed, 0, static_cast<uint64_t>(index), kCorruptBytesStream));
  if (kind == CorruptKind::kGarbage) {
    std::string bytes(static_cast<size_t>(rng.UniformInt(2048, 20480)), '\0');
    for (char& c : bytes) c = static_cast<char>(rng.NextU64() & 0xFF);
    bytes[0] = 'G';  // never 0xFF: no SOI marker by accident
    return bytes;
  }
  SLUICE_ASSIGN_OR_RETURN(
      std::string jpeg, SynthesizeJpeg(options.image, options.seed, static_cast<uint64_t>(index)));
  if (kind == CorruptKind::kTruncated) {
    jpeg.resize(static_cast<size_t>(jpeg.size() * rng.Uniform(0.3, 0.7)));
  }
  return jpeg;
}

}  // namespace

std::vector<uint8_t> SynthesizeImage(const JpegImageOptions& options, uint64_t seed,
                                     uint64_t index) {
  Canvas canvas(options.width, options.height);
  Rng rng(SeedFor(seed, 0, index, kPixelStream));
  PaintBackground(canvas, rng);
  PaintBlobs(canvas, rng);
  PaintShapes(canvas, rng);
  PaintFractalTexture(canvas, rng);
  PaintNoise(canvas, rng);
  const std::vector<float>& px = canvas.pixels();
  std::vector<uint8_t> out(px.size());
  for (size_t i = 0; i < px.size(); ++i) {
    out[i] = static_cast<uint8_t>(std::clamp(px[i] + 0.5f, 0.0f, 255.0f));
  }
  return out;
}

StatusOr<std::string> SynthesizeJpeg(const JpegImageOptions& options, uint64_t seed,
                                     uint64_t index) {
  const std::vector<uint8_t> rgb = SynthesizeImage(options, seed, index);
  tjhandle handle = tjInitCompress();
  if (handle == nullptr) {
    return absl::InternalError(absl::StrCat("tjInitCompress: ", tjGetErrorStr2(nullptr)));
  }
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(handle, rgb.data(), options.width, 0, options.height, TJPF_RGB, &buf,
                             &size, TJSAMP_420, options.quality, 0);
  std::string jpeg;
  Status status;
  if (rc != 0) {
    status = absl::InternalError(absl::StrCat("tjCompress2: ", tjGetErrorStr2(handle)));
  } else {
    jpeg.assign(reinterpret_cast<const char*>(buf), size);
  }
  tjFree(buf);
  tjDestroy(handle);
  if (!status.ok()) return status;
  return jpeg;
}

std::vector<CorruptKind> ChooseCorrupt(int64_t count, double fraction, uint64_t seed) {
  std::vector<CorruptKind> kinds(static_cast<size_t>(std::max<int64_t>(count, 0)),
                                 CorruptKind::kNone);
  if (count <= 0 || fraction <= 0) return kinds;
  int64_t n = std::llround(static_cast<double>(count) * std::min(fraction, 1.0));
  n = std::clamp<int64_t>(n, 1, count);
  // Partial Fisher-Yates: the first n entries of a seeded permutation.
  std::vector<int64_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[i] = i;
  Rng rng(SeedFor(seed, 0, 0, kCorruptChoiceStream));
  for (int64_t i = 0; i < n; ++i) {
    std::swap(order[i], order[rng.UniformInt(i, count - 1)]);
  }
  std::sort(order.begin(), order.begin() + n);
  for (int64_t i = 0; i < n; ++i) {
    kinds[order[i]] = i % 2 == 0 ? CorruptKind::kTruncated : CorruptKind::kGarbage;
  }
  return kinds;
}

std::string ImageRelativePath(int64_t index, int64_t classes) {
  return absl::StrFormat("class_%03d/img_%06d.jpg", index % classes, index);
}

StatusOr<GenDataResult> GenerateJpegDataset(const GenDataOptions& options) {
  if (options.out_dir.empty()) return absl::InvalidArgumentError("--out: missing output folder");
  if (options.count < 0) return absl::InvalidArgumentError("--count: must be >= 0");
  if (options.classes < 1) return absl::InvalidArgumentError("--classes: must be >= 1");
  if (options.image.width < 8 || options.image.height < 8 || options.image.width > 16384 ||
      options.image.height > 16384) {
    return absl::InvalidArgumentError("--width/--height: must be between 8 and 16384");
  }
  if (options.image.quality < 1 || options.image.quality > 100) {
    return absl::InvalidArgumentError("--quality: must be between 1 and 100");
  }
  if (!(options.corrupt_fraction >= 0 && options.corrupt_fraction <= 1)) {
    return absl::InvalidArgumentError("--corrupt-fraction: must be between 0 and 1");
  }

  const std::vector<CorruptKind> kinds =
      ChooseCorrupt(options.count, options.corrupt_fraction, options.seed);
  return WriteDataset(
      options, kinds, [&](int64_t i) { return FileContents(options, i, kinds[i]); },
      [&](int64_t i) { return ImageRelativePath(i, options.classes); });
}

StatusOr<GenDataResult> WriteDataset(
    const GenDataOptions& options, const std::vector<CorruptKind>& kinds,
    const std::function<StatusOr<std::string>(int64_t)>& make_file,
    const std::function<std::string(int64_t)>& relative_path) {
  const fs::path root(options.out_dir);
  std::error_code ec;
  const int64_t used_classes = std::min(options.classes, options.count);
  for (int64_t c = 0; c < used_classes; ++c) {
    const fs::path dir = root / absl::StrFormat("class_%03d", c);
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
    }
  }
  fs::create_directories(root, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", root.string(), ": ", ec.message()));
  }

  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    while (!failed.load(std::memory_order_relaxed)) {
      const int64_t i = next.fetch_add(1);
      if (i >= options.count) return;
      StatusOr<std::string> data = make_file(i);
      Status status = data.status();
      if (status.ok()) status = WriteFile(root / relative_path(i), *data);
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = status;
        failed = true;
        return;
      }
      bytes.fetch_add(static_cast<int64_t>(data->size()));
      done.fetch_add(1);
    }
  };

  const int threads = static_cast<int>(
      std::clamp<int64_t>(options.threads, 1, std::max<int64_t>(options.count, 1)));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(work);
  if (options.progress) {
    while (done.load() < options.count && !failed.load()) {
      options.progress(done.load(), options.count);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (std::thread& t : workers) t.join();
  if (!first_error.ok()) return first_error;
  if (options.progress) options.progress(done.load(), options.count);

  GenDataResult result;
  result.files = done.load();
  result.bytes = bytes.load();
  for (int64_t i = 0; i < options.count; ++i) {
    if (kinds[i] != CorruptKind::kNone) {
      result.corrupt.push_back(relative_path(i));
    }
  }
  std::sort(result.corrupt.begin(), result.corrupt.end());
  const fs::path list = root / "corrupt.txt";
  if (result.corrupt.empty()) {
    fs::remove(list, ec);  // a stale list from an earlier run would lie
  } else {
    std::string text;
    for (const std::string& name : result.corrupt) absl::StrAppend(&text, name, "\n");
    SLUICE_RETURN_IF_ERROR(WriteFile(list, text));
  }
  return result;
}

StatusOr<int64_t> PackShards(const std::string& out_dir, const std::string& ext,
                             int64_t shard_size) {
  if (shard_size < 1) return absl::InvalidArgumentError("--shard-size must be at least 1");
  pipeline::SourceSpec spec;
  const std::string root = std::filesystem::path(out_dir).lexically_normal().string();
  spec.files = {absl::StrCat(root, "/**/*.", ext)};
  spec.label = pipeline::LabelMode::kParentDir;
  SLUICE_ASSIGN_OR_RETURN(pipeline::SourceFiles files, pipeline::ResolveSource(spec));
  const std::filesystem::path shard_dir = std::filesystem::path(root) / "shards";
  std::error_code ec;
  std::filesystem::create_directories(shard_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create '", shard_dir.string(), "': ", ec.message()));
  }
  int64_t shards = 0;
  std::string tar;
  for (size_t i = 0; i < files.paths.size(); ++i) {
    const std::string& path = files.paths[i];
    std::string key = std::filesystem::path(path).lexically_relative(root).string();
    key.resize(key.size() - ext.size() - 1);
    SLUICE_ASSIGN_OR_RETURN(
        Tensor file, ops::LocalStorage().ReadFile(path, ops::InputLimits::kDefaultMaxFileBytes));
    const std::string_view data = file.bytes();
    SLUICE_RETURN_IF_ERROR(pipeline::AppendTarMember(&tar, absl::StrCat(key, ".", ext), data));
    SLUICE_RETURN_IF_ERROR(pipeline::AppendTarMember(&tar, absl::StrCat(key, ".cls"),
                                                     std::to_string(files.labels[i])));
    const bool last = i + 1 == files.paths.size();
    if ((static_cast<int64_t>(i) + 1) % shard_size == 0 || last) {
      pipeline::AppendTarEnd(&tar);
      const std::string name = (shard_dir / absl::StrFormat("shard-%06d.tar", shards)).string();
      SLUICE_RETURN_IF_ERROR(WriteFile(name, tar));
      SLUICE_RETURN_IF_ERROR(pipeline::WriteLocalShardIndex(name).status());
      ++shards;
      tar.clear();
    }
  }
  return shards;
}

}  // namespace sluice::cli
