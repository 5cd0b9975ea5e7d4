// Test helpers for the op tests (header-only, included by *_test.cc only): synthetic images,
// in-memory JPEG/PNG encoding, elements and a scratch folder.
#ifndef SLUICE_OPS_OP_TEST_UTIL_H_
#define SLUICE_OPS_OP_TEST_UTIL_H_

#include <turbojpeg.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/core/element.h"
#include "sluice/core/tensor.h"
#include "sluice/ops/registry.h"

namespace sluice::ops::test {

// The builtin op `name` with `args` over `input`; null, with a test failure saying why, when
// the registry refuses it.
inline std::unique_ptr<Op> MakeOp(const std::string& name, const std::map<std::string, ArgValue>& args,
                                  const Schema& input) {
  auto op = Registry::Builtin().Create(name, args, input);
  EXPECT_TRUE(op.ok()) << name << ": " << op.status();
  return op.ok() ? std::move(*op) : nullptr;
}

// A photo-like RGB (or gray) image: smooth gradients, a few blobs of color and a fine but
// not pixel-level texture, so that crops, flips and resampling are all visible.
inline Tensor TexturedImage(int64_t height, int64_t width, int64_t channels = 3,
                            uint64_t seed = 1) {
  Tensor t = Tensor::Empty(DType::kU8, {height, width, channels});
  uint8_t* p = t.mutable_raw();
  const double s = static_cast<double>(seed % 97) * 0.37;
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      const double fx = static_cast<double>(x), fy = static_cast<double>(y);
      const double base = 255.0 * fx / static_cast<double>(std::max<int64_t>(1, width - 1));
      const double wave = 40.0 * std::sin(fx / 9.0 + s) * std::cos(fy / 13.0 - s);
      const double blob = 60.0 * std::exp(-((fx - width * 0.3) * (fx - width * 0.3) +
                                            (fy - height * 0.6) * (fy - height * 0.6)) /
                                          (2.0 * 40.0 * 40.0));
      for (int64_t c = 0; c < channels; ++c) {
        double v = (c == 0   ? base
                    : c == 1 ? 255.0 * fy / std::max<int64_t>(1, height - 1)
                             : 128.0) *
                       0.7 +
                   wave * (c == 2 ? -1 : 1) + blob;
        p[(y * width + x) * channels + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  return t;
}

// JPEG bytes of an RGB or gray u8 image, through TurboJPEG.
inline std::string EncodeJpeg(const Tensor& image, int quality = 90, int subsampling = TJSAMP_420) {
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int channels = static_cast<int>(image.dim(2));
  int rc = tjCompress2(handle, image.raw(), static_cast<int>(image.dim(1)), 0,
                       static_cast<int>(image.dim(0)), channels == 1 ? TJPF_GRAY : TJPF_RGB, &out,
                       &size, channels == 1 ? TJSAMP_GRAY : subsampling, quality, 0);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(handle);
  std::string bytes(reinterpret_cast<const char*>(out), size);
  tjFree(out);
  tjDestroy(handle);
  return bytes;
}

// PNG bytes of an RGB or gray u8 image, through OpenCV.
inline std::string EncodePng(const Tensor& image) {
  const int channels = static_cast<int>(image.dim(2));
  cv::Mat rgb(static_cast<int>(image.dim(0)), static_cast<int>(image.dim(1)), CV_8UC(channels),
              const_cast<uint8_t*>(image.raw()));
  cv::Mat bgr;
  if (channels == 3) {
    cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  } else {
    bgr = rgb;
  }
  std::vector<uchar> buf;
  EXPECT_TRUE(cv::imencode(".png", bgr, buf));
  return std::string(buf.begin(), buf.end());
}

// Mean absolute difference of two same-shaped u8 tensors (0..255).
inline double MeanAbsDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape() || a.num_elements() == 0) return 1e9;
  double sum = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    sum += std::abs(static_cast<int>(a.raw()[i]) - static_cast<int>(b.raw()[i]));
  }
  return sum / static_cast<double>(a.num_elements());
}

// `jpeg` with the size in its frame header (SOF0..SOF2) replaced: a small valid file whose
// header claims a huge image, as a decompression bomb does. Empty if there is no SOF marker.
inline std::string WithJpegSize(std::string jpeg, uint16_t height, uint16_t width) {
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(jpeg[k]); };
    if (b(i) == 0xFF && b(i + 1) >= 0xC0 && b(i + 1) <= 0xC2) {
      jpeg[i + 5] = static_cast<char>(height >> 8);
      jpeg[i + 6] = static_cast<char>(height & 0xFF);
      jpeg[i + 7] = static_cast<char>(width >> 8);
      jpeg[i + 8] = static_cast<char>(width & 0xFF);
      return jpeg;
    }
  }
  return "";
}

// `png` with the size in its IHDR replaced (and the chunk's CRC fixed, so that the decoder
// believes it): a small file whose header claims a huge image.
inline std::string WithPngSize(std::string png, uint32_t height, uint32_t width) {
  auto put32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) png[at + k] = static_cast<char>((v >> (24 - 8 * k)) & 0xFF);
  };
  put32(16, width);  // 8 signature bytes, 4 of length, "IHDR", then width and height
  put32(20, height);
  uint32_t crc = 0xFFFFFFFFu;  // CRC-32 over the chunk type and data (bytes 12..28)
  for (size_t i = 12; i < 29; ++i) {
    crc ^= static_cast<uint8_t>(png[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  put32(29, crc ^ 0xFFFFFFFFu);
  return png;
}

inline Element MakeElement(std::vector<Tensor> tensors, uint64_t index = 0, uint32_t epoch = 0) {
  Element e;
  e.id = SampleId{epoch, index};
  e.tensors = std::move(tensors);
  return e;
}

// A fresh folder under the test temp dir, removed with everything in it at destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "sluice_ops_XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    char* made = ::mkdtemp(buf.data());
    EXPECT_NE(made, nullptr);
    path_ = made ? made : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& bytes) const {
    std::string file = path_ + "/" + name;
    std::ofstream(file, std::ios::binary) << bytes;
    return file;
  }

 private:
  std::string path_;
};

}  // namespace sluice::ops::test

#endif  // SLUICE_OPS_OP_TEST_UTIL_H_
