// The vectorised kernels under the audio ops: the float log, the seeded gaussian noise, the
// lane-parallel real FFT and the two STFT paths, each against a plain double computation.
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/ops/audio/audio_ops.h"
#include "sluice/ops/audio/fast_math.h"
#include "sluice/ops/audio/lane_fft.h"

namespace sluice::ops {
namespace {

double UlpDistance(float a, float b) {
  const double ulp = std::nextafter(std::fabs(b), std::numeric_limits<float>::infinity()) -
                     std::fabs(b);
  return std::fabs(static_cast<double>(a) - b) / ulp;
}

TEST(FastLogTest, WithinThreeUlpOverTheNormalRange) {
  double worst = 0;
  for (float v = std::numeric_limits<float>::min(); v < 3e38f; v *= 1.0007f) {
    worst = std::max(worst, UlpDistance(fastmath::FastLog(v), std::log(v)));
  }
  // Around 1 the result is near 0, where a few ulp of the input's log are many of the output's.
  for (float v = 0.5f; v < 2.0f; v += 1e-4f) {
    EXPECT_NEAR(fastmath::FastLog(v), std::log(v), 2e-7) << v;
  }
  EXPECT_LE(worst, 3.0);
}

TEST(FastLogTest, LogPlusEpsHandlesEveryValue) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -1.0f, inf, std::nanf(""), 1e-45f, 1.0f, 2.0f, 1e30f};
  for (int i = 0; i < 600; ++i) x.push_back(static_cast<float>(i) * 0.25f);  // several blocks
  std::vector<float> out(x.size());
  fastmath::LogPlusEps(x.data(), 0.0f, static_cast<int64_t>(x.size()), out.data());
  EXPECT_EQ(out[0], -inf);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], inf);
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_FLOAT_EQ(out[4], std::log(1e-45f));  // denormal: std::log
  for (size_t i = 5; i < x.size(); ++i) {
    if (x[i] == 0) continue;
    EXPECT_LE(UlpDistance(out[i], std::log(x[i])), 3.0) << x[i];
  }
  // In place, with eps.
  std::vector<float> y = {0.0f, 1.0f, 3.0f};
  fastmath::LogPlusEps(y.data(), 1.0f, 3, y.data());
  EXPECT_NEAR(y[0], 0.0f, 1e-7);
  EXPECT_NEAR(y[1], std::log(2.0f), 1e-7);
  EXPECT_NEAR(y[2], std::log(4.0f), 1e-6);
}

TEST(GaussianNoiseTest, StandardNormalMomentsAndTails) {
  const int64_t n = 1 << 21;
  std::vector<float> zero(n, 0.0f), z(n);
  fastmath::GaussianNoiseAdd(zero.data(), n, 1.0f, 42, z.data());
  double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
  int64_t beyond2 = 0, beyond3 = 0;
  for (float v : z) {
    const double d = v;
    m1 += d;
    m2 += d * d;
    m3 += d * d * d;
    m4 += d * d * d * d;
    beyond2 += std::fabs(d) > 2;
    beyond3 += std::fabs(d) > 3;
  }
  const double count = static_cast<double>(n);
  // Standard errors for 2^21 draws: mean 7e-4, variance 1e-3, skew 1.7e-3, kurtosis 3.4e-3.
  EXPECT_NEAR(m1 / count, 0.0, 4e-3);
  EXPECT_NEAR(m2 / count, 1.0, 6e-3);
  EXPECT_NEAR(m3 / count, 0.0, 1e-2);
  EXPECT_NEAR(m4 / count, 3.0, 3e-2);
  EXPECT_NEAR(beyond2 / count, 0.0455003, 1e-3);
  EXPECT_NEAR(beyond3 / count, 0.0026998, 2.5e-4);
  // Neighbouring values are uncorrelated (cosine and sine halves of each block included).
  double lag1 = 0, lag128 = 0;
  for (int64_t i = 0; i + 128 < n; ++i) {
    lag1 += static_cast<double>(z[i]) * z[i + 1];
    lag128 += static_cast<double>(z[i]) * z[i + 128];
  }
  EXPECT_NEAR(lag1 / count, 0.0, 4e-3);
  EXPECT_NEAR(lag128 / count, 0.0, 4e-3);
}

TEST(GaussianNoiseTest, SeedDecidesTheNoiseAndSigmaScalesIt) {
  const int64_t n = 1000;
  std::vector<float> in(n), a(n), b(n), c(n), d(n);
  for (int64_t i = 0; i < n; ++i) in[i] = std::sin(0.01f * static_cast<float>(i));
  fastmath::GaussianNoiseAdd(in.data(), n, 0.5f, 7, a.data());
  fastmath::GaussianNoiseAdd(in.data(), n, 0.5f, 7, b.data());
  fastmath::GaussianNoiseAdd(in.data(), n, 0.5f, 8, c.data());
  fastmath::GaussianNoiseAdd(in.data(), n, 1.0f, 7, d.data());
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(a[i], b[i]);
    differ += a[i] != c[i];
    EXPECT_NEAR(2 * (a[i] - in[i]), d[i] - in[i], 1e-5);
  }
  EXPECT_GT(differ, 990);
}

// |X_k|^2 of a real signal by the definition, in double.
std::vector<double> NaivePower(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> p(static_cast<size_t>(n / 2 + 1));
  for (int64_t k = 0; k <= n / 2; ++k) {
    std::complex<double> sum = 0;
    for (int64_t t = 0; t < n; ++t) {
      sum += static_cast<double>(x[t]) *
             std::polar(1.0, -2 * std::numbers::pi * static_cast<double>(k * t) / n);
    }
    p[k] = std::norm(sum);
  }
  return p;
}

TEST(LaneRealFftTest, MatchesTheDefinitionForMixedRadixSizes) {
  constexpr int L = LaneRealFft::kLanes;
  for (int64_t n : {4, 6, 10, 16, 30, 60, 320, 400, 512}) {
    std::unique_ptr<LaneRealFft> fft = LaneRealFft::Make(n);
    ASSERT_NE(fft, nullptr) << n;
    std::vector<float> in(static_cast<size_t>(n * L)), power(static_cast<size_t>((n / 2 + 1) * L));
    for (int64_t i = 0; i < n * L; ++i) {
      in[i] = std::sin(0.7f * static_cast<float>(i)) + 0.01f * static_cast<float>(i % 17);
    }
    fft->Power(in.data(), power.data());
    for (int l = 0; l < L; ++l) {
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) x[t] = in[t * L + l];
      const std::vector<double> want = NaivePower(x);
      double peak = 0;
      for (double v : want) peak = std::max(peak, v);
      for (int64_t k = 0; k <= n / 2; ++k) {
        EXPECT_NEAR(power[k * L + l], want[k], 1e-5 * peak) << "n " << n << " lane " << l;
      }
    }
  }
}

TEST(LaneRealFftTest, NoPlanForOddOrLargePrimeSizes) {
  EXPECT_EQ(LaneRealFft::Make(2), nullptr);
  EXPECT_EQ(LaneRealFft::Make(9), nullptr);
  EXPECT_EQ(LaneRealFft::Make(14), nullptr);  // 7
  EXPECT_EQ(LaneRealFft::Make(22), nullptr);  // 11
  EXPECT_NE(LaneRealFft::Make(18), nullptr);  // 9 = 3 * 3
}

// Both STFT paths (lanes for n_fft = 320, OpenCV for 14) against the definition, including
// the reflected edge frames and a frame count that is not a multiple of the lane count.
TEST(SpectrogramPathsTest, BothPathsMatchTheDefinition) {
  for (int64_t n_fft : {320, 14}) {
    StftParams p;
    p.n_fft = n_fft;
    p.hop = n_fft / 2;
    const int64_t n = 13 * p.hop + 3;
    std::vector<float> signal(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) signal[i] = std::cos(0.05f * static_cast<float>(i * i % 997));
    for (int power : {1, 2}) {
      p.power = power;
      StatusOr<Tensor> spec = Spectrogram(signal.data(), n, p);
      ASSERT_TRUE(spec.ok()) << spec.status();
      const int64_t frames = 1 + n / p.hop, bins = n_fft / 2 + 1;
      ASSERT_EQ(spec->shape(), (Shape{frames, bins}));
      const std::vector<float> window = MakeWindow(Window::kHann, n_fft);
      for (int64_t f = 0; f < frames; ++f) {
        std::vector<float> frame(static_cast<size_t>(n_fft));
        for (int64_t k = 0; k < n_fft; ++k) {
          int64_t i = f * p.hop + k - n_fft / 2;
          if (i < 0) i = -i;
          if (i >= n) i = 2 * (n - 1) - i;
          frame[k] = window[k] * signal[i];
        }
        const std::vector<double> want = NaivePower(frame);
        double peak = 0;
        for (double v : want) peak = std::max(peak, v);
        for (int64_t b = 0; b < bins; ++b) {
          const double w = power == 2 ? want[b] : std::sqrt(want[b]);
          const double tol = power == 2 ? 1e-5 * peak : 1e-4 * std::sqrt(peak);
          EXPECT_NEAR(spec->data<float>()[f * bins + b], w, tol)
              << "n_fft " << n_fft << " frame " << f << " bin " << b;
        }
      }
    }
  }
}

TEST(LongRealFftTest, MatchesTheDefinition) {
  for (int64_t n : {1024, 1920}) {  // 1920 / 8 = 240 = 4 * 4 * 3 * 5
    std::unique_ptr<LongRealFft> fft = LongRealFft::Make(n);
    ASSERT_NE(fft, nullptr) << n;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      x[i] = std::sin(0.013f * static_cast<float>(i * (1 + i % 5))) +
             0.2f * std::cos(1.7f * static_cast<float>(i));
    }
    std::vector<float> out(static_cast<size_t>(n / 2 + 1));
    fft->Magnitude(x.data(), out.data());
    const std::vector<double> want = NaivePower(x);
    double peak = 0;
    for (double v : want) peak = std::max(peak, std::sqrt(v));
    for (int64_t k = 0; k <= n / 2; ++k) {
      EXPECT_NEAR(out[k], std::sqrt(want[k]), 1e-5 * peak) << "n " << n << " bin " << k;
    }
  }
  EXPECT_EQ(LongRealFft::Make(512), nullptr);    // too short to pay
  EXPECT_EQ(LongRealFft::Make(1000), nullptr);   // not a multiple of 64
  EXPECT_EQ(LongRealFft::Make(7168), nullptr);   // 896 / 2 = 448 = 7 * 64
}

TEST(RfftMagnitudeTest, CachedPlansGiveTheSameResultEveryCall) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * static_cast<float>(i));
  std::vector<float> a(513), b(513), c(33);
  RfftMagnitude(x.data(), 1000, 1024, a.data());
  RfftMagnitude(x.data(), 1000, 64, c.data());  // another size in between
  RfftMagnitude(x.data(), 1000, 1024, b.data());
  EXPECT_EQ(a, b);
  std::vector<float> head(x.begin(), x.begin() + 64);
  const std::vector<double> want = NaivePower(head);
  for (int k = 0; k <= 32; ++k) EXPECT_NEAR(c[k], std::sqrt(want[k]), 1e-4);
}

}  // namespace
}  // namespace sluice::ops
