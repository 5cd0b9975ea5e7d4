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
// Output blocks [from, width / 16) of one row, then what is left as FlipRowFromSsse3 does.
struct MasksAvx2 {
  Masks128 m128;
  __m256i m[3][3];
};
__attribute__((target("avx2"))) void LoadMasks(MasksAvx2& masks) {
  LoadMasks(masks.m128);
  for (int r = 0; r < 3; ++r) {
    for (int s = 0; s < 3; ++s) masks.m[r][s] = _mm256_broadcastsi128_si256(masks.m128[r][s]);
  }
}

__attribute__((target("avx2"))) void FlipRowFromAvx2(const uint8_t* s, int64_t width, int64_t from,
                                                     const MasksAvx2& masks, uint8_t* d) {
  const auto& m = masks.m;
  const int64_t blocks = width / 16;
  int64_t j = from;
  for (; j + 2 <= blocks; j += 2) {
    const uint8_t* in0 = s + 3 * (width - 16 * (j + 1));  // block j's input
    const uint8_t* in1 = in0 - 48;                        // block j + 1's
    const __m256i a = Load2(in0, in1);
    const __m256i b = Load2(in0 + 16, in1 + 16);
    const __m256i c = Load2(in0 + 32, in1 + 32);
    const __m256i o0 =
        _mm256_or_si256(_mm256_shuffle_epi8(b, m[0][1]), _mm256_shuffle_epi8(c, m[0][2]));
    const __m256i o1 = _mm256_or_si256(
        _mm256_or_si256(_mm256_shuffle_epi8(a, m[1][0]), _mm256_shuffle_epi8(b, m[1][1])),
        _mm256_shuffle_epi8(c, m[1][2]));
    const __m256i o2 =
        _mm256_or_si256(_mm256_shuffle_epi8(a, m[2][0]), _mm256_shuffle_epi8(b, m[2][1]));
    uint8_t* out0 = d + 48 * j;
    uint8_t* out1 = out0 + 48;
    Store2(out0, out1, o0);
    Store2(out0 + 16, out1 + 16, o1);
    Store2(out0 + 32, out1 + 32, o2);
  }
  FlipRowFromSsse3(s, width, j, masks.m128, d);  // an odd block left, and the last pixels
}

__attribute__((target("avx2"))) void FlipRowsAvx2(const uint8_t* src, int64_t height, int64_t width,
                                                  uint8_t* dst) {
  MasksAvx2 masks;
  LoadMasks(masks);
  for (int64_t y = 0; y < height; ++y) {
    FlipRowFromAvx2(src + y * width * 3, width, 0, masks, dst + y * width * 3);
  }
}

// With AVX-512 VBMI a byte permute crosses the whole 64-byte register and draws from two, so
// 64 pixels (192 bytes in, 192 out) take three permutes: output register r holds output
// bytes [64r, 64r + 64), which come from input bytes q = 3 * (63 - o / 3) + o % 3, a span of
// 66 bytes at most: [126, 191] for r = 0, [63, 128] for r = 1, [0, 65] for r = 2. Register r
// draws from the two 64-byte loads at kFrom[r] and kFrom[r] + 64 (inside the 192 bytes);
// kPermutes[r][i] is q - kFrom[r] for o = 64r + i (64 or more picks from the second load).
constexpr int kFrom[3] = {64, 32, 0};
using Permutes = std::array<std::array<uint8_t, 64>, 3>;
constexpr Permutes MakePermutes() {
  Permutes p{};
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 64; ++i) {
      const int o = 64 * r + i;
      const int q = 3 * (63 - o / 3) + o % 3;
      p[r][i] = static_cast<uint8_t>(q - kFrom[r]);
    }
  }
  return p;
}
alignas(64) constexpr Permutes kPermutes = MakePermutes();
// Every output byte's input byte lies in its register's two loads, inside the 192 bytes.
constexpr bool LoadsCoverTheSpans() {
  for (int r = 0; r < 3; ++r) {
    if (kFrom[r] + 128 > 192) return false;
    for (int i = 0; i < 64; ++i) {
      const int o = 64 * r + i;
      const int q = 3 * (63 - o / 3) + o % 3;
      if (q < kFrom[r] || q >= kFrom[r] + 128) return false;
    }
  }
  return true;
}
static_assert(LoadsCoverTheSpans(), "each output register draws from its two loads only");

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void FlipRowsAvx512(const uint8_t* src,
                                                                           int64_t height,
                                                                           int64_t width,
                                                                           uint8_t* dst) {
  MasksAvx2 masks;
  LoadMasks(masks);
  __m512i perm[3];
  for (int r = 0; r < 3; ++r) perm[r] = _mm512_load_si512(kPermutes[r].data());
  const int64_t blocks = width / 64;
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* s = src + y * width * 3;
    uint8_t* d = dst + y * width * 3;
    for (int64_t j = 0; j < blocks; ++j) {
      // Output pixels [64j, 64j + 64) are input pixels [width - 64(j + 1), width - 64j).
      const uint8_t* in = s + 3 * (width - 64 * (j + 1));
      uint8_t* out = d + 192 * j;
      for (int r = 0; r < 3; ++r) {
        const __m512i lo = _mm512_loadu_si512(in + kFrom[r]);
        const __m512i hi = _mm512_loadu_si512(in + kFrom[r] + 64);
        _mm512_storeu_si512(out + 64 * r, _mm512_permutex2var_epi8(lo, perm[r], hi));
      }
    }
    FlipRowFromAvx2(s, width, 4 * blocks, masks, d);  // the 16-pixel blocks left, and the rest
  }
}

}  // namespace

bool FlipRgbHorizontallyWith(FlipIsa isa, const uint8_t* src, int64_t height, int64_t width,
                             uint8_t* dst) {
  static const bool avx512 = __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vbmi");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool ssse3 = __builtin_cpu_supports("ssse3");
  switch (isa) {
    case FlipIsa::kAvx512Vbmi:
      if (!avx512) return false;
      FlipRowsAvx512(src, height, width, dst);
      return true;
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
  for (FlipIsa isa : {FlipIsa::kAvx512Vbmi, FlipIsa::kAvx2, FlipIsa::kSsse3, FlipIsa::kScalar}) {
    if (FlipRgbHorizontallyWith(isa, src, height, width, dst)) return;
  }
}

}  // namespace sluice::ops
