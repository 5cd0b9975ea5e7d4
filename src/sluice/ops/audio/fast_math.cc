// The array kernels of fast_math.h. Each inner loop is a fixed-size, branch-free loop over
// plain arrays so that GCC vectorises it (this file is compiled with -fno-math-errno, which
// lets sqrt vectorise; it changes no result). The entry points are cloned for AVX2 and the
// baseline (picked at load time); without FMA both clones round the same way.
#include "sluice/ops/audio/fast_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

namespace sluice::ops::fastmath {
namespace {

constexpr int64_t kBlock = 256;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Eight independent xoshiro128++ generators, stepped together in GCC vector types (SSE2
// registers at the baseline instruction set).
class LaneRng {
 public:
  static constexpr int kLanes = 8;

  explicit LaneRng(uint64_t seed) {
    uint64_t state = seed;
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t a = SplitMix64(state), b = SplitMix64(state);
      uint32_t w[4] = {static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                       static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)};
      if ((w[0] | w[1] | w[2] | w[3]) == 0) w[0] = 1;  // the one forbidden state
      for (int k = 0; k < 4; ++k) s_[k][l / 4][l % 4] = w[k];
    }
  }

  // Writes `count` fresh 32-bit values to out (count a multiple of kLanes), lane-interleaved.
  void Fill(uint32_t* out, int64_t count) {
    for (int64_t j = 0; j < count; j += kLanes) {
      for (int h = 0; h < 2; ++h) {
        U32x4& s0 = s_[0][h];
        U32x4& s1 = s_[1][h];
        U32x4& s2 = s_[2][h];
        U32x4& s3 = s_[3][h];
        const U32x4 sum = s0 + s3;
        const U32x4 result = ((sum << 7) | (sum >> 25)) + s0;
        std::memcpy(out + j + 4 * h, &result, sizeof(result));
        const U32x4 t = s1 << 9;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= t;
        s3 = (s3 << 11) | (s3 >> 21);
      }
    }
  }

 private:
  typedef uint32_t U32x4 __attribute__((vector_size(16)));
  U32x4 s_[4][2];  // state word k of lanes 4h..4h+3
};

// cos and sin of 2 pi u for u in [0, 1): the angle is split into a quadrant q and a rest
// theta in [-pi/4, pi/4], where Taylor series to theta^9 / theta^10 are float-exact.
inline void SinCosTurn(float u, float* cos_out, float* sin_out) {
  const float t = u * 4.0f;
  const int32_t q = static_cast<int32_t>(t + 0.5f);  // t >= 0: truncation is floor
  const float theta = (t - static_cast<float>(q)) * (std::numbers::pi_v<float> / 2);
  const float z = theta * theta;
  const float s =
      theta *
      (1.0f + z * (-1.0f / 6 + z * (1.0f / 120 + z * (-1.0f / 5040 + z * (1.0f / 362880)))));
  const float c =
      1.0f +
      z * (-0.5f + z * (1.0f / 24 + z * (-1.0f / 720 + z * (1.0f / 40320 + z * (-1.0f / 3628800)))));
  // Rotate by q quarter turns: (c, s) -> (-s, c) -> (-c, -s) -> (s, -c).
  const bool swap = (q & 1) != 0;
  const bool neg_c = ((q + 1) & 2) != 0;
  const bool neg_s = (q & 2) != 0;
  const float cv = swap ? s : c;
  const float sv = swap ? c : s;
  *cos_out = neg_c ? -cv : cv;
  *sin_out = neg_s ? -sv : sv;
}

}  // namespace

__attribute__((target_clones("avx2", "default"))) void LogPlusEps(const float* x, float eps,
                                                                  int64_t n, float* out) {
  float y[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    uint32_t bad = 0;
    for (int64_t i = 0; i < len; ++i) {
      y[i] = x[b + i] + eps;
      bad |= InFastLogDomain(y[i]) ? 0u : 1u;
    }
    for (int64_t i = 0; i < len; ++i) out[b + i] = FastLog(y[i]);
    if (bad != 0) {
      for (int64_t i = 0; i < len; ++i) {
        if (!InFastLogDomain(y[i])) out[b + i] = std::log(y[i]);
      }
    }
  }
}

__attribute__((target_clones("avx2", "default"))) void GaussianNoiseAdd(const float* in,
                                                                        int64_t n, float sigma,
                                                                        uint64_t seed,
                                                                        float* out) {
  // Each block of kBlock samples takes kBlock / 2 Box-Muller pairs: the cosines go to the
  // first half of the block, the sines to the second.
  constexpr int64_t kPairs = kBlock / 2;
  static_assert(kPairs % LaneRng::kLanes == 0);
  LaneRng rng(seed);
  uint32_t k1[kPairs], k2[kPairs];
  float noise[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    rng.Fill(k1, kPairs);
    rng.Fill(k2, kPairs);
    for (int64_t p = 0; p < kPairs; ++p) {
      // u1 in (0, 1] from 31 bits (never 0, so the log is finite), u2 in [0, 1) from 24.
      const float u1 =
          (static_cast<float>(static_cast<int32_t>(k1[p] >> 1)) + 0.5f) * (1.0f / 2147483648.0f);
      const float u2 = static_cast<float>(static_cast<int32_t>(k2[p] >> 8)) * (1.0f / 16777216.0f);
      const float r = sigma * std::sqrt(-2.0f * FastLog(u1));
      float c, s;
      SinCosTurn(u2, &c, &s);
      noise[p] = r * c;
      noise[kPairs + p] = r * s;
    }
    const int64_t len = std::min(kBlock, n - b);
    for (int64_t i = 0; i < len; ++i) out[b + i] = in[b + i] + noise[i];
  }
}

}  // namespace sluice::ops::fastmath
