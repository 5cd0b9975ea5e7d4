#include "sluice/ops/image/flip_kernel.h"

#include <immintrin.h>

#include <array>
#include <cstring>

namespace sluice::ops {
namespace {

// A block is 16 pixels, 48 bytes, three 16-byte registers. Mirrored, output byte o comes from
// input byte 3 * (15 - o / 3) + o % 3; output register r draws from input register s through
// the shuffle kMasks[r][s] (0x80: take nothing from s).
using Masks = std::array<std::array<std::array<uint8_t, 16>, 3>, 3>;
constexpr Masks MakeMasks() {
  Masks m{};
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 16; ++i) {
        const int o = 16 * r + i;
        const int b = 3 * (15 - o / 3) + o % 3;
        m[r][s][i] = b / 16 == s ? static_cast<uint8_t>(b % 16) : 0x80;
      }
    }
  }
  return m;
}
alignas(16) constexpr Masks kMasks = MakeMasks();

// Output pixels [from, width) of one row, one at a time.
void FlipPixels(const uint8_t* s, int64_t width, int64_t from, uint8_t* d) {
  for (int64_t x = from; x < width; ++x) std::memcpy(d + 3 * x, s + 3 * (width - 1 - x), 3);
}

void FlipRowsScalar(const uint8_t* src, int64_t height, int64_t width, uint8_t* dst) {
  for (int64_t y = 0; y < height; ++y) {
    FlipPixels(src + y * width * 3, width, 0, dst + y * width * 3);
  }
}

__attribute__((target("ssse3"))) void FlipRowsSsse3(const uint8_t* src, int64_t height,
                                                     int64_t width, uint8_t* dst) {
  __m128i masks[3][3];
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 3; ++s) {
      masks[r][s] = _mm_load_si128(reinterpret_cast<const __m128i*>(kMasks[r][s].data()));
    }
  }
  const int64_t blocks = width / 16;
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* s = src + y * width * 3;
    uint8_t* d = dst + y * width * 3;
    for (int64_t j = 0; j < blocks; ++j) {
      // Output pixels [16j, 16j + 16) are input pixels [width - 16(j + 1), width - 16j).
      const uint8_t* in = s + 3 * (width - 16 * (j + 1));
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 32));
      for (int r = 0; r < 3; ++r) {
        const __m128i out = _mm_or_si128(
            _mm_or_si128(_mm_shuffle_epi8(a, masks[r][0]), _mm_shuffle_epi8(b, masks[r][1])),
            _mm_shuffle_epi8(c, masks[r][2]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 48 * j + 16 * r), out);
      }
    }
    FlipPixels(s, width, blocks * 16, d);  // the last width % 16: the first input pixels
  }
}

}  // namespace

void FlipRgbHorizontally(const uint8_t* src, int64_t height, int64_t width, uint8_t* dst) {
  static const bool ssse3 = __builtin_cpu_supports("ssse3");
  if (ssse3) {
    FlipRowsSsse3(src, height, width, dst);
  } else {
    FlipRowsScalar(src, height, width, dst);
  }
}

}  // namespace sluice::ops
