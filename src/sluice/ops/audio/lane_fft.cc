// LaneRealFft: see lane_fft.h. Every inner loop runs over the kLanes lanes of one complex
// value, so GCC turns it into SIMD code: SSE2 at the baseline, AVX2 where the CPU has it
// (target_clones picks at load time). No FMA is enabled, so both give the same bits.
#include "sluice/ops/audio/lane_fft.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>

namespace sluice::ops {
namespace {

constexpr int L = LaneRealFft::kLanes;
constexpr int kMaxRadix = 5;

// The radix-R DFT matrix entries exp(-2 pi i q / R), q in [0, R), for R = 3 and 5.
struct SmallDft {
  float re[kMaxRadix];
  float im[kMaxRadix];
};

SmallDft MakeSmallDft(int radix) {
  SmallDft d{};
  for (int q = 0; q < radix; ++q) {
    const double a = -2 * std::numbers::pi * q / radix;
    d.re[q] = static_cast<float>(std::cos(a));
    d.im[q] = static_cast<float>(std::sin(a));
  }
  return d;
}

struct Plan {
  int64_t m;
  const std::vector<int>* radices;
  const std::vector<std::vector<float>>* tw_re;
  const std::vector<std::vector<float>>* tw_im;
  const float* post_re;
  const float* post_im;
};

// The helpers below pass 32-byte vectors by value; they are always inlined, so the ABI note
// GCC gives for them at the baseline target does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// Eight float lanes in a GCC vector type: one AVX register, or two SSE registers at the
// baseline (GCC splits the operations).
typedef float V8 __attribute__((vector_size(32)));
static_assert(sizeof(V8) == L * sizeof(float));

#if defined(__clang__)
// Clang rejects a function returning a 32-byte vector in code built without AVX, even one
// that is always inlined; there Load is an expression instead, an unaligned vector read of
// the same eight floats.
typedef float V8Unaligned __attribute__((vector_size(32), aligned(alignof(float)), may_alias));
#define Load(p) (static_cast<V8>(*reinterpret_cast<const V8Unaligned*>(p)))
#else
[[gnu::always_inline]] inline V8 Load(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
#endif
[[gnu::always_inline]] inline void Store(float* p, const V8& v) { std::memcpy(p, &v, sizeof(v)); }

// One Stockham stage of radix R: reads s (re, im), writes d.
template <int R>
[[gnu::always_inline]] inline void Stage(int64_t m, int64_t ns, const float* twr, const float* twi,
                                         const SmallDft& dft, const float* sre, const float* sim,
                                         float* dre, float* dim) {
  const int64_t stride = m / R;
  int64_t jm = 0, base = 0;  // j mod ns, and (j / ns) * ns * R
  for (int64_t j = 0; j < stride; ++j) {
    V8 vr[R], vi[R];
    vr[0] = Load(sre + j * L);
    vi[0] = Load(sim + j * L);
    for (int r = 1; r < R; ++r) {
      const V8 xr = Load(sre + (j + r * stride) * L);
      const V8 xi = Load(sim + (j + r * stride) * L);
      const float wr = twr[jm * R + r], wi = twi[jm * R + r];
      vr[r] = xr * wr - xi * wi;
      vi[r] = xr * wi + xi * wr;
    }
    V8 yr[R], yi[R];
    if constexpr (R == 2) {
      yr[0] = vr[0] + vr[1];
      yi[0] = vi[0] + vi[1];
      yr[1] = vr[0] - vr[1];
      yi[1] = vi[0] - vi[1];
    } else if constexpr (R == 4) {
      const V8 t0r = vr[0] + vr[2], t0i = vi[0] + vi[2];
      const V8 t1r = vr[0] - vr[2], t1i = vi[0] - vi[2];
      const V8 t2r = vr[1] + vr[3], t2i = vi[1] + vi[3];
      const V8 t3r = vr[1] - vr[3], t3i = vi[1] - vi[3];
      yr[0] = t0r + t2r;
      yi[0] = t0i + t2i;
      yr[2] = t0r - t2r;
      yi[2] = t0i - t2i;
      yr[1] = t1r + t3i;  // t1 - i t3
      yi[1] = t1i - t3r;
      yr[3] = t1r - t3i;  // t1 + i t3
      yi[3] = t1i + t3r;
    } else {
      for (int k = 0; k < R; ++k) {
        yr[k] = vr[0];
        yi[k] = vi[0];
        for (int r = 1; r < R; ++r) {
          const float cr = dft.re[(r * k) % R], ci = dft.im[(r * k) % R];
          yr[k] += vr[r] * cr - vi[r] * ci;
          yi[k] += vr[r] * ci + vi[r] * cr;
        }
      }
    }
    const int64_t out = base + jm;
    for (int r = 0; r < R; ++r) {
      Store(dre + (out + r * ns) * L, yr[r]);
      Store(dim + (out + r * ns) * L, yi[r]);
    }
    if (++jm == ns) {
      jm = 0;
      base += ns * R;
    }
  }
}

// The transform of `in`; writes |X_k|^2 to `power`, or when it is null X_k to out_re, out_im.
__attribute__((target_clones("avx2", "default"))) void TransformImpl(
    const Plan& plan, const float* in, float* power, float* out_re, float* out_im, float* a,
    float* b) {
  const int64_t m = plan.m;
  // z[k] = x[2k] + i x[2k + 1].
  float* sre = a;
  float* sim = a + m * L;
  for (int64_t k = 0; k < m; ++k) {
    Store(sre + k * L, Load(in + (2 * k) * L));
    Store(sim + k * L, Load(in + (2 * k + 1) * L));
  }
  float* dre = b;
  float* dim = b + m * L;
  static const SmallDft kDft3 = MakeSmallDft(3);
  static const SmallDft kDft5 = MakeSmallDft(5);
  // Stockham stages: after a stage, Ns is the product of the radices done so far.
  int64_t ns = 1;
  for (size_t s = 0; s < plan.radices->size(); ++s) {
    const int radix = (*plan.radices)[s];
    const float* twr = (*plan.tw_re)[s].data();
    const float* twi = (*plan.tw_im)[s].data();
    switch (radix) {
      case 2:
        Stage<2>(m, ns, twr, twi, kDft3, sre, sim, dre, dim);
        break;
      case 3:
        Stage<3>(m, ns, twr, twi, kDft3, sre, sim, dre, dim);
        break;
      case 4:
        Stage<4>(m, ns, twr, twi, kDft3, sre, sim, dre, dim);
        break;
      default:
        Stage<5>(m, ns, twr, twi, kDft5, sre, sim, dre, dim);
        break;
    }
    std::swap(sre, dre);
    std::swap(sim, dim);
    ns *= radix;
  }
  // X[k] = E + w^k O with E = (Z[k] + conj Z[m-k]) / 2, O = -i (Z[k] - conj Z[m-k]) / 2.
  for (int64_t k = 0; k <= m; ++k) {
    const int64_t kk = k == m ? 0 : k;
    const int64_t kc = k == 0 ? 0 : m - k;
    const V8 ar = Load(sre + kk * L), ai = Load(sim + kk * L);
    const V8 cr = Load(sre + kc * L), ci = Load(sim + kc * L);
    const float wr = plan.post_re[k], wi = plan.post_im[k];
    const V8 er = 0.5f * (ar + cr);
    const V8 ei = 0.5f * (ai - ci);
    const V8 dr = 0.5f * (ar - cr);
    const V8 di = 0.5f * (ai + ci);
    // O = -i D = (di, -dr)
    const V8 xr = er + (wr * di + wi * dr);
    const V8 xi = ei + (wi * di - wr * dr);
    if (power != nullptr) {
      Store(power + k * L, xr * xr + xi * xi);
    } else {
      Store(out_re + k * L, xr);
      Store(out_im + k * L, xi);
    }
  }
}

// The twiddle and radix-8 join of LongRealFft::Magnitude. y: the lanes' spectra for k in
// [0, m / 2]; tw: W_n^(l j) at [j * 8 + l]; t: scratch for 2 * 8 * m floats. REQUIRES: m a
// multiple of 8.
__attribute__((target_clones("avx2", "default"))) void JoinEight(int64_t m, const float* y_re,
                                                                  const float* y_im,
                                                                  const float* tw_re,
                                                                  const float* tw_im, float* t,
                                                                  float* out) {
  float* t_re = t;
  float* t_im = t + L * m;
  const int64_t half = m / 2;
  // T_l[j] = W_n^(l j) Y_l[j], with Y_l[j] = conj(Y_l[m - j]) above m / 2 (real input),
  // stored lane-major ([l * m + j]) through an 8 x 8 tile so that the join reads along j.
  for (int64_t j0 = 0; j0 < m; j0 += L) {
    float tile_re[L][L], tile_im[L][L];  // [j - j0][l]
    for (int jj = 0; jj < L; ++jj) {
      const int64_t j = j0 + jj;
      const bool mirror = j > half;
      const int64_t s = mirror ? m - j : j;
      const V8 yr = Load(y_re + s * L);
      const V8 yi = mirror ? -Load(y_im + s * L) : Load(y_im + s * L);
      const V8 wr = Load(tw_re + j * L), wi = Load(tw_im + j * L);
      const V8 tr = yr * wr - yi * wi;
      const V8 ti = yr * wi + yi * wr;
      std::memcpy(tile_re[jj], &tr, sizeof(tr));
      std::memcpy(tile_im[jj], &ti, sizeof(ti));
    }
    for (int l = 0; l < L; ++l) {
      for (int jj = 0; jj < L; ++jj) {
        t_re[l * m + j0 + jj] = tile_re[jj][l];
        t_im[l * m + j0 + jj] = tile_im[jj][l];
      }
    }
  }
  float c8[L], s8[L];
  for (int p = 0; p < L; ++p) {
    c8[p] = static_cast<float>(std::cos(-2 * std::numbers::pi * p / L));
    s8[p] = static_cast<float>(std::sin(-2 * std::numbers::pi * p / L));
  }
  // X[j + q m] = sum_l T_l[j] W_8^(l q), eight j at a time.
  for (int q = 0; q < 4; ++q) {
    float* o = out + q * m;
    for (int64_t j = 0; j < m; j += L) {
      V8 xr = Load(t_re + j), xi = Load(t_im + j);
      for (int l = 1; l < L; ++l) {
        const float cr = c8[(l * q) % L], ci = s8[(l * q) % L];
        const V8 tr = Load(t_re + l * m + j), ti = Load(t_im + l * m + j);
        xr += tr * cr - ti * ci;
        xi += tr * ci + ti * cr;
      }
      const V8 mag2 = xr * xr + xi * xi;
      float v[L];
      std::memcpy(v, &mag2, sizeof(v));
      for (int l = 0; l < L; ++l) o[j + l] = std::sqrt(v[l]);
    }
  }
  // k = n / 2 = 4m: q = 4, j = 0, where W_8^(4 l) = (-1)^l.
  float xr = 0, xi = 0;
  for (int l = 0; l < L; ++l) {
    xr += (l % 2 ? -1.0f : 1.0f) * t_re[l * m];
    xi += (l % 2 ? -1.0f : 1.0f) * t_im[l * m];
  }
  out[4 * m] = std::sqrt(xr * xr + xi * xi);
}

#undef Load
}  // namespace

std::unique_ptr<LaneRealFft> LaneRealFft::Make(int64_t n) {
  if (n < 4 || n % 2 != 0) return nullptr;
  const int64_t m = n / 2;
  std::vector<int> radices;
  int64_t rest = m;
  while (rest % 4 == 0) {
    radices.push_back(4);
    rest /= 4;
  }
  while (rest % 2 == 0) {
    radices.push_back(2);
    rest /= 2;
  }
  for (int r : {3, 5}) {
    while (rest % r == 0) {
      radices.push_back(r);
      rest /= r;
    }
  }
  if (rest != 1) return nullptr;
  std::unique_ptr<LaneRealFft> fft(new LaneRealFft());
  fft->n_ = n;
  fft->m_ = m;
  fft->radices_ = radices;
  int64_t ns = 1;
  for (int radix : radices) {
    std::vector<float> re(static_cast<size_t>(ns * radix)), im(re.size());
    for (int64_t j = 0; j < ns; ++j) {
      for (int r = 0; r < radix; ++r) {
        const double a = -2 * std::numbers::pi * static_cast<double>(r * j) /
                         static_cast<double>(ns * radix);
        re[j * radix + r] = static_cast<float>(std::cos(a));
        im[j * radix + r] = static_cast<float>(std::sin(a));
      }
    }
    fft->tw_re_.push_back(std::move(re));
    fft->tw_im_.push_back(std::move(im));
    ns *= radix;
  }
  fft->post_re_.resize(static_cast<size_t>(m + 1));
  fft->post_im_.resize(static_cast<size_t>(m + 1));
  for (int64_t k = 0; k <= m; ++k) {
    const double a = -2 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
    fft->post_re_[k] = static_cast<float>(std::cos(a));
    fft->post_im_[k] = static_cast<float>(std::sin(a));
  }
  fft->a_.resize(static_cast<size_t>(2 * m * L));
  fft->b_.resize(static_cast<size_t>(2 * m * L));
  return fft;
}

void LaneRealFft::Power(const float* in, float* power) {
  const Plan plan{m_, &radices_, &tw_re_, &tw_im_, post_re_.data(), post_im_.data()};
  TransformImpl(plan, in, power, nullptr, nullptr, a_.data(), b_.data());
}

void LaneRealFft::Spectrum(const float* in, float* re, float* im) {
  const Plan plan{m_, &radices_, &tw_re_, &tw_im_, post_re_.data(), post_im_.data()};
  TransformImpl(plan, in, nullptr, re, im, a_.data(), b_.data());
}

std::unique_ptr<LongRealFft> LongRealFft::Make(int64_t n) {
  if (n < 1024 || n % (L * L) != 0) return nullptr;
  std::unique_ptr<LaneRealFft> lanes = LaneRealFft::Make(n / L);
  if (lanes == nullptr) return nullptr;
  std::unique_ptr<LongRealFft> fft(new LongRealFft());
  fft->n_ = n;
  fft->m_ = n / L;
  fft->lanes_ = std::move(lanes);
  const int64_t m = fft->m_;
  fft->tw_re_.resize(static_cast<size_t>(m * L));
  fft->tw_im_.resize(static_cast<size_t>(m * L));
  for (int64_t j = 0; j < m; ++j) {
    for (int l = 0; l < L; ++l) {
      const double a = -2 * std::numbers::pi * static_cast<double>(l * j) / static_cast<double>(n);
      fft->tw_re_[j * L + l] = static_cast<float>(std::cos(a));
      fft->tw_im_[j * L + l] = static_cast<float>(std::sin(a));
    }
  }
  fft->y_re_.resize(static_cast<size_t>((m / 2 + 1) * L));
  fft->y_im_.resize(fft->y_re_.size());
  fft->t_.resize(static_cast<size_t>(2 * m * L));
  return fft;
}

void LongRealFft::Magnitude(const float* x, float* out) {
  lanes_->Spectrum(x, y_re_.data(), y_im_.data());
  JoinEight(m_, y_re_.data(), y_im_.data(), tw_re_.data(), tw_im_.data(), t_.data(), out);
}

}  // namespace sluice::ops
