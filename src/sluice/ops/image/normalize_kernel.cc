#include "sluice/ops/image/normalize_kernel.h"

#include <cpuid.h>
#include <immintrin.h>

#include "sluice/ops/half.h"

namespace sluice::ops {
namespace {

// Pixels [begin, end) one value at a time; `Out` is float, or uint16_t for binary16.
template <typename Out>
void NormalizeScalar(const uint8_t* in, int64_t begin, int64_t end, int64_t pixels,
                     const float scale[3], const float shift[3], Out* out) {
  for (int64_t i = begin; i < end; ++i) {
    for (int k = 0; k < 3; ++k) {
      const float v = NormalizeValue(in[3 * i + k], scale[k], shift[k]);
      if constexpr (sizeof(Out) == sizeof(float)) {
        out[k * pixels + i] = v;
      } else {
        out[k * pixels + i] = FloatToHalf(v);
      }
    }
  }
}

// Eight pixels per step: pixels 0-3 in the low 128-bit lane and 4-7 in the high one (two
// 16-byte loads, 12 bytes apart, each starting on a pixel), so one in-lane byte shuffle per
// channel picks its four bytes of each lane into the low byte of a 32-bit integer, zeroing
// the rest; then convert, multiply, add. A step reads 28 bytes from its first pixel (the
// second load runs 4 bytes past the eighth pixel), so it runs while 10 pixels remain.
constexpr int64_t kStepPixels = 8;
constexpr int64_t kStepReach = 10;

struct Planes8 {
  __m256 v[3];
};

__attribute__((target("avx2,f16c"))) inline Planes8 Normalize8(const uint8_t* p,
                                                               const __m256i* masks,
                                                               const __m256* scale,
                                                               const __m256* shift) {
  const __m256i bytes = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12)), 1);
  Planes8 out;
  for (int k = 0; k < 3; ++k) {
    const __m256 x = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, masks[k]));
    out.v[k] = _mm256_add_ps(_mm256_mul_ps(x, scale[k]), shift[k]);
  }
  return out;
}

// Channel k's shuffle: 32-bit integer j of each lane takes byte 3j + k (-1 zeroes a byte).
__attribute__((target("avx2,f16c"))) inline void LoadMasks(__m256i masks[3]) {
  for (int k = 0; k < 3; ++k) {
    alignas(32) int8_t m[32];
    for (int lane = 0; lane < 2; ++lane) {
      for (int j = 0; j < 4; ++j) {
        m[16 * lane + 4 * j] = static_cast<int8_t>(3 * j + k);
        m[16 * lane + 4 * j + 1] = m[16 * lane + 4 * j + 2] = m[16 * lane + 4 * j + 3] = -1;
      }
    }
    masks[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(m));
  }
}

// `Out` float: f32 planes; uint16_t: binary16 planes (converted with F16C, round to nearest
// even, as FloatToHalf). Every AVX2 machine has F16C; both are required for either.
template <typename Out>
__attribute__((target("avx2,f16c"))) void NormalizeAvx2(const uint8_t* in, int64_t pixels,
                                                        const float scale[3], const float shift[3],
                                                        Out* out) {
  __m256i masks[3];
  LoadMasks(masks);
  const __m256 s[3] = {_mm256_set1_ps(scale[0]), _mm256_set1_ps(scale[1]),
                       _mm256_set1_ps(scale[2])};
  const __m256 t[3] = {_mm256_set1_ps(shift[0]), _mm256_set1_ps(shift[1]),
                       _mm256_set1_ps(shift[2])};
  int64_t i = 0;
  for (; i + kStepReach <= pixels; i += kStepPixels) {
    const Planes8 p = Normalize8(in + 3 * i, masks, s, t);
    for (int k = 0; k < 3; ++k) {
      if constexpr (sizeof(Out) == sizeof(float)) {
        _mm256_storeu_ps(out + k * pixels + i, p.v[k]);
      } else {
        const __m128i h = _mm256_cvtps_ph(p.v[k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k * pixels + i), h);
      }
    }
  }
  NormalizeScalar(in, i, pixels, pixels, scale, shift, out);
}

// F16C from CPUID (leaf 1, ECX bit 29): not every compiler's __builtin_cpu_supports knows it.
bool HasAvx2AndF16c() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return yes;
}

// The instruction set's kernel into `out`; false when the machine lacks it.
template <typename Out>
bool NormalizeWith(NormalizeIsa isa, const uint8_t* in, int64_t pixels, const float scale[3],
                   const float shift[3], Out* out) {
  if (isa == NormalizeIsa::kAvx2) {
    if (!HasAvx2AndF16c()) return false;
    NormalizeAvx2(in, pixels, scale, shift, out);
    return true;
  }
  NormalizeScalar(in, 0, pixels, pixels, scale, shift, out);
  return true;
}

}  // namespace

bool NormalizeRgbToPlanesWith(NormalizeIsa isa, const uint8_t* in, int64_t pixels,
                              const float scale[3], const float shift[3], float* out) {
  return NormalizeWith(isa, in, pixels, scale, shift, out);
}

bool NormalizeRgbToHalfPlanesWith(NormalizeIsa isa, const uint8_t* in, int64_t pixels,
                                  const float scale[3], const float shift[3], uint16_t* out) {
  return NormalizeWith(isa, in, pixels, scale, shift, out);
}

void NormalizeRgbToPlanes(const uint8_t* in, int64_t pixels, const float scale[3],
                          const float shift[3], float* out) {
  if (!NormalizeRgbToPlanesWith(NormalizeIsa::kAvx2, in, pixels, scale, shift, out)) {
    NormalizeRgbToPlanesWith(NormalizeIsa::kScalar, in, pixels, scale, shift, out);
  }
}

void NormalizeRgbToHalfPlanes(const uint8_t* in, int64_t pixels, const float scale[3],
                              const float shift[3], uint16_t* out) {
  if (!NormalizeRgbToHalfPlanesWith(NormalizeIsa::kAvx2, in, pixels, scale, shift, out)) {
    NormalizeRgbToHalfPlanesWith(NormalizeIsa::kScalar, in, pixels, scale, shift, out);
  }
}

float NormalizeValue(uint8_t v, float scale, float shift) {
  return static_cast<float>(v) * scale + shift;
}

}  // namespace sluice::ops
