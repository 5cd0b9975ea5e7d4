#include "sluice/ops/image/normalize_kernel.h"

namespace sluice::ops {

// A plain loop that the compiler vectorises (three interleaved loads, three planes) in the
// AVX2 clone; the default clone serves other x86-64 machines with the same results.
__attribute__((target_clones("avx2", "default"))) void NormalizeRgbToPlanes(
    const uint8_t* __restrict in, int64_t pixels, const float scale[3], const float shift[3],
    float* __restrict out) {
  const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
  const float t0 = shift[0], t1 = shift[1], t2 = shift[2];
  float* __restrict r = out;
  float* __restrict g = out + pixels;
  float* __restrict b = out + 2 * pixels;
  for (int64_t i = 0; i < pixels; ++i) {
    r[i] = static_cast<float>(in[3 * i]) * s0 + t0;
    g[i] = static_cast<float>(in[3 * i + 1]) * s1 + t1;
    b[i] = static_cast<float>(in[3 * i + 2]) * s2 + t2;
  }
}

float NormalizeValue(uint8_t v, float scale, float shift) {
  return static_cast<float>(v) * scale + shift;
}

}  // namespace sluice::ops
