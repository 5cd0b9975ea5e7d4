// Short real FFTs computed on kLanes signals at once (the frames of an STFT), with every
// arithmetic step a loop over the lanes so that it runs in SIMD registers. The size n is
// even and n / 2 must factor into 2, 3, 4 and 5; the complex FFT of size n / 2 is a
// mixed-radix Stockham transform (no bit reversal), and the real spectrum is recovered from it
// with the usual even/odd split. Accuracy is that of any float FFT (about 1e-6 of the peak).
//
// A LaneRealFft is immutable once made except for its scratch space: use one per thread.
#ifndef SLUICE_OPS_AUDIO_LANE_FFT_H_
#define SLUICE_OPS_AUDIO_LANE_FFT_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::ops {

class LaneRealFft {
 public:
  static constexpr int kLanes = 8;

  // nullptr when n is odd, below 4, or n / 2 has a prime factor above 5.
  static std::unique_ptr<LaneRealFft> Make(int64_t n);

  int64_t size() const { return n_; }

  // in: n samples of each lane, lane-interleaved (in[i * kLanes + lane]). power: the n / 2 + 1
  // values |X_k|^2 of each lane, lane-interleaved the same way.
  void Power(const float* in, float* power);

  // The same transform's complex values X_k, k in [0, n / 2], lane-interleaved into re, im.
  void Spectrum(const float* in, float* re, float* im);

 private:
  LaneRealFft() = default;

  int64_t n_ = 0;
  int64_t m_ = 0;  // n / 2, the complex transform's size
  std::vector<int> radices_;
  // Per stage: the twiddles w^(r * (j mod Ns)) for j mod Ns in [0, Ns), r in [0, R).
  std::vector<std::vector<float>> tw_re_, tw_im_;
  // The post-processing twiddles exp(-2 pi i k / n), k in [0, m].
  std::vector<float> post_re_, post_im_;
  // Scratch: two complex arrays of m lane-vectors (re block, then im block).
  std::vector<float> a_, b_;
};

// |rfft(x)| of one long signal of n = 8 M points through LaneRealFft: the eight interleaved
// subsequences x[8t + l] (which is x's own memory layout read lane-interleaved) are
// transformed as the lanes of one size-M transform, and a radix-8 step joins their spectra:
// X[j + qM] = sum_l W_n^(l j) Y_l[j] W_8^(l q). Scratch space inside: use one per thread.
class LongRealFft {
 public:
  // nullptr when n is not a multiple of 64 of at least 1024, or LaneRealFft has no plan for
  // n / 8.
  static std::unique_ptr<LongRealFft> Make(int64_t n);

  int64_t size() const { return n_; }

  // x: n samples; out: the n / 2 + 1 magnitudes |X_k|.
  void Magnitude(const float* x, float* out);

 private:
  LongRealFft() = default;

  int64_t n_ = 0;
  int64_t m_ = 0;  // n / 8
  std::unique_ptr<LaneRealFft> lanes_;
  std::vector<float> tw_re_, tw_im_;  // W_n^(l j) at [j * 8 + l], j in [0, m)
  std::vector<float> y_re_, y_im_;    // the lanes' spectra, k in [0, m / 2]
  std::vector<float> t_;              // twiddled spectra, lane-major: re, then im
};

}  // namespace sluice::ops

#endif  // SLUICE_OPS_AUDIO_LANE_FFT_H_
