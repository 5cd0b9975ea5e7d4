// normalize u8 HWC -> f32 CHW into cold slots of 38.5 MB batches: ordinary vs streaming stores.
// Build and run: g++ -O2 -o norm_micro norm_micro.cc && taskset -c 0 ./norm_micro
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
constexpr int kStepPixels = 8, kStepReach = 9;
__attribute__((target("avx2"))) void LoadMasks(__m256i masks[3]) {
  for (int k = 0; k < 3; ++k) { alignas(32) int8_t m[32];
    for (int lane = 0; lane < 2; ++lane) for (int j = 0; j < 4; ++j) {
      m[16*lane+4*j] = 3*j+k; m[16*lane+4*j+1] = m[16*lane+4*j+2] = m[16*lane+4*j+3] = -1; }
    masks[k] = _mm256_load_si256((const __m256i*)m); }
}
template <bool kStream>
__attribute__((target("avx2"))) void Norm(const uint8_t* in, int64_t pixels, float* out) {
  __m256i masks[3]; LoadMasks(masks);
  const __m256 s = _mm256_set1_ps(0.0171f), t = _mm256_set1_ps(-2.1f);
  int64_t i = 0;
  for (; i + kStepReach <= pixels; i += kStepPixels) {
    const uint8_t* p = in + 3 * i;
    const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)p)), _mm_loadu_si128((const __m128i*)(p + 12)), 1);
    for (int k = 0; k < 3; ++k) {
      __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, masks[k])), s), t);
      if (kStream) _mm256_stream_ps(out + k * pixels + i, v); else _mm256_storeu_ps(out + k * pixels + i, v);
    }
  }
  for (; i < pixels; ++i) for (int k = 0; k < 3; ++k) out[k * pixels + i] = in[3 * i + k] * 0.0171f - 2.1f;
  if (kStream) _mm_sfence();
}
int main() {
  const int64_t pixels = 224 * 224; const size_t n = pixels * 12, batch = 64, nbuf = 4;
  uint8_t* in = (uint8_t*)aligned_alloc(64, 64 * pixels * 3); for (int64_t i = 0; i < 64 * pixels * 3; ++i) in[i] = i * 7;
  char* d = (char*)aligned_alloc(64, nbuf * batch * n); memset(d, 2, nbuf * batch * n);
  double sink = 0;
  for (int round = 0; round < 5; ++round) for (int mode = 0; mode < 2; ++mode) {
    auto t0 = std::chrono::steady_clock::now(); int count = 0;
    for (size_t b = 0; b < nbuf * 3; ++b) for (size_t k = 0; k < batch; ++k, ++count) {
      float* o = (float*)(d + ((b % nbuf) * batch + k) * n);
      const uint8_t* src = in + (k % 64) * pixels * 3;
      if (mode) Norm<true>(src, pixels, o); else Norm<false>(src, pixels, o);
      sink += o[k];
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / count;
    printf("%s %.1f us/sample\n", mode ? "stream  " : "ordinary", us);
  }
  return sink == 12345.0;
}
