// Branch-free float kernels for the audio ops, written so that the compiler vectorises them
// at the baseline instruction set (no -ffast-math, no FMA contraction: the same bits on every
// x86-64 machine, so a sample processed on a worker matches one processed locally).
//
//   FastLog:           natural log of a positive normal float, within 3 ulp of std::log.
//   LogPlusEps:        out[i] = log(x[i] + eps) over an array; values outside the positive
//                      normal range (0, denormals, negatives, inf, NaN) take std::log.
//   GaussianNoiseAdd:  out[i] = in[i] + sigma * N(0, 1), the normals from a seeded lane-
//                      parallel xoshiro128++ through Box-Muller (exact in distribution up to
//                      float rounding; tails reach 6.6 sigma).
//
// Pure functions of their arguments; safe from any thread.
#ifndef SLUICE_OPS_AUDIO_FAST_MATH_H_
#define SLUICE_OPS_AUDIO_FAST_MATH_H_

#include <bit>
#include <cstdint>

namespace sluice::ops::fastmath {

// log(x) for x a positive normal float. The mantissa is brought into [2/3, 4/3) so that
// f = m - 1 is small, and log(1 + f) = 2 atanh(f / (2 + f)) is summed to s^9.
inline float FastLog(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const int32_t e = static_cast<int32_t>(bits - 0x3f2aaaabu) >> 23;  // arithmetic shift
  const float m = std::bit_cast<float>(bits - (static_cast<uint32_t>(e) << 23));
  const float f = m - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s;
  const float poly =
      2.0f + z * (2.0f / 3 + z * (2.0f / 5 + z * (2.0f / 7 + z * (2.0f / 9 + z * (2.0f / 11)))));
  constexpr float kLn2Hi = 0.693145751953125f;   // ln 2 to 16 bits: e * kLn2Hi is exact
  constexpr float kLn2Lo = 1.428606765330187e-6f;
  const float ef = static_cast<float>(e);
  return ef * kLn2Hi + (s * poly + ef * kLn2Lo);
}

// True when `x` is a positive normal finite float (FastLog's domain).
inline bool InFastLogDomain(float x) {
  return std::bit_cast<uint32_t>(x) - 0x00800000u < 0x7f000000u;
}

// out[i] = log(x[i] + eps). `out` may equal `x`.
void LogPlusEps(const float* x, float eps, int64_t n, float* out);

// out[i] = in[i] + sigma * z[i] with z standard normal, drawn from a generator seeded by
// `seed` (the same seed and n give the same noise). `out` may equal `in`.
void GaussianNoiseAdd(const float* in, int64_t n, float sigma, uint64_t seed, float* out);

}  // namespace sluice::ops::fastmath

#endif  // SLUICE_OPS_AUDIO_FAST_MATH_H_
