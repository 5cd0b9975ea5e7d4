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

using Masks128 = __m128i[3][3];
__attribute__((target("ssse3"))) void LoadMasks(Masks128& masks) {
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 3; ++s) {
      masks[r][s] = _mm_load_si128(reinterpret_cast<const __m128i*>(kMasks[r][s].data()));
    }
  }
}

// Output blocks [from, width / 16) of one row, 16 pixels each, then its last width % 16
// pixels (the row's first input pixels).
__attribute__((target("ssse3"))) void FlipRowFromSsse3(const uint8_t* s, int64_t width,
                                                       int64_t from, const Masks128& masks,
                                                       uint8_t* d) {
  const int64_t blocks = width / 16;
  for (int64_t j = from; j < blocks; ++j) {
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
  FlipPixels(s, width, blocks * 16, d);
}

__attribute__((target("ssse3"))) void FlipRowsSsse3(const uint8_t* src, int64_t height,
                                                    int64_t width, uint8_t* dst) {
  Masks128 masks;
  LoadMasks(masks);
  for (int64_t y = 0; y < height; ++y) {
    FlipRowFromSsse3(src + y * width * 3, width, 0, masks, dst + y * width * 3);
  }
}

// Which input registers an output register draws from: 16 output bytes come from 18 input
// bytes at most, so two of the nine shuffles (r 0 from s 0, r 2 from s 2) take nothing.
constexpr bool Draws(int r, int s) {
  for (int i = 0; i < 16; ++i) {
    if (kMasks[r][s][i] != 0x80) return true;
  }
  return false;
}
static_assert(!Draws(0, 0) && !Draws(2, 2) && Draws(0, 1) && Draws(0, 2) && Draws(1, 0) &&
              Draws(1, 1) && Draws(1, 2) && Draws(2, 0) && Draws(2, 1));

// 16 bytes at `lo` in lane 0, 16 at `hi` in lane 1; and back.
__attribute__((target("avx2"))) inline __m256i Load2(const uint8_t* lo, const uint8_t* hi) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
}
__attribute__((target("avx2"))) inline void Store2(uint8_t* lo, uint8_t* hi, __m256i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm256_castsi256_si128(v));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm256_extracti128_si256(v, 1));
}

// Two blocks per step: lane 0 of each 256-bit register holds block j, lane 1 block j + 1
// (vpshufb shuffles within a lane, so both lanes use the same masks), and only the seven
// shuffles that draw anything run. About half the instructions of the SSSE3 loop per pixel.
__attribute__((target("avx2"))) void FlipRowsAvx2(const uint8_t* src, int64_t height, int64_t width,
                                                  uint8_t* dst) {
  Masks128 masks128;
  LoadMasks(masks128);
  __m256i masks[3][3];
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 3; ++s) masks[r][s] = _mm256_broadcastsi128_si256(masks128[r][s]);
  }
  const int64_t blocks = width / 16;
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* s = src + y * width * 3;
    uint8_t* d = dst + y * width * 3;
    int64_t j = 0;
    for (; j + 2 <= blocks; j += 2) {
      const uint8_t* in0 = s + 3 * (width - 16 * (j + 1));  // block j's input
      const uint8_t* in1 = in0 - 48;                        // block j + 1's
      const __m256i a = Load2(in0, in1);
      const __m256i b = Load2(in0 + 16, in1 + 16);
      const __m256i c = Load2(in0 + 32, in1 + 32);
      const __m256i o0 =
          _mm256_or_si256(_mm256_shuffle_epi8(b, masks[0][1]), _mm256_shuffle_epi8(c, masks[0][2]));
      const __m256i o1 = _mm256_or_si256(
          _mm256_or_si256(_mm256_shuffle_epi8(a, masks[1][0]), _mm256_shuffle_epi8(b, masks[1][1])),
          _mm256_shuffle_epi8(c, masks[1][2]));
      const __m256i o2 =
          _mm256_or_si256(_mm256_shuffle_epi8(a, masks[2][0]), _mm256_shuffle_epi8(b, masks[2][1]));
      uint8_t* out0 = d + 48 * j;
      uint8_t* out1 = out0 + 48;
      Store2(out0, out1, o0);
      Store2(out0 + 16, out1 + 16, o1);
      Store2(out0 + 32, out1 + 32, o2);
    }
    FlipRowFromSsse3(s, width, j, masks128, d);  // an odd block left, and the last pixels
  }
}

}  // namespace

bool FlipRgbHorizontallyWith(FlipIsa isa, const uint8_t* src, int64_t height, int64_t width,
                             uint8_t* dst) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool ssse3 = __builtin_cpu_supports("ssse3");
  switch (isa) {
    case FlipIsa::kAvx2:
      if (!avx2) return false;
      FlipRowsAvx2(src, height, width, dst);
      return true;
    case FlipIsa::kSsse3:
      if (!ssse3) return false;
      FlipRowsSsse3(src, height, width, dst);
      return true;
    case FlipIsa::kScalar:
      FlipRowsScalar(src, height, width, dst);
      return true;
  }
  return false;
}

void FlipRgbHorizontally(const uint8_t* src, int64_t height, int64_t width, uint8_t* dst) {
  for (FlipIsa isa : {FlipIsa::kAvx2, FlipIsa::kSsse3, FlipIsa::kScalar}) {
    if (FlipRgbHorizontallyWith(isa, src, height, width, dst)) return;
  }
}

}  // namespace sluice::ops
