// A 602 KB sample copied out of an 8 MiB ring into consecutive slots of 38.5 MB batch buffers
// (four of them, used in turn), with memcpy and with non-temporal stores, and each batch read
// whole right after it is written (a consumer that reads at once).
// Build and run: g++ -O2 -o /tmp/copy_micro copy_micro.cc && taskset -c 0 /tmp/copy_micro
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
__attribute__((target("avx2"))) void StreamCopy(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(s + i)), b = _mm_loadu_si128((const __m128i*)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(s + i + 32)), e = _mm_loadu_si128((const __m128i*)(s + i + 48));
    _mm_stream_si128((__m128i*)(d + i), a); _mm_stream_si128((__m128i*)(d + i + 16), b);
    _mm_stream_si128((__m128i*)(d + i + 32), c); _mm_stream_si128((__m128i*)(d + i + 48), e);
  }
  memcpy(d + i, s + i, n - i); _mm_sfence();
}
__attribute__((target("avx2"))) long ReadAll(const char* p, size_t n) {
  __m256i acc = _mm256_setzero_si256();
  for (size_t i = 0; i + 32 <= n; i += 32) acc = _mm256_add_epi64(acc, _mm256_loadu_si256((const __m256i*)(p + i)));
  long out[4]; _mm256_storeu_si256((__m256i*)out, acc); return out[0] + out[1] + out[2] + out[3];
}
int main() {
  const size_t n = 602112, ring = 8 << 20, batch = 64, nbuf = 4;
  char* s = (char*)aligned_alloc(64, ring); char* d = (char*)aligned_alloc(64, nbuf * batch * n);
  memset(s, 1, ring); memset(d, 2, nbuf * batch * n);
  long sink = 0;
  for (int rep = 0; rep < 3; ++rep) for (int mode = 0; mode < 2; ++mode) {
    double wr = 0, rd = 0; size_t so = 0;
    for (int b = 0; b < 12; ++b) {
      char* out = d + (b % nbuf) * batch * n;
      auto a = std::chrono::steady_clock::now();
      for (size_t j = 0; j < batch; ++j) {
        if (so + n > ring) so = 0;
        if (mode) StreamCopy(out + j * n, s + so, n); else memcpy(out + j * n, s + so, n);
        so += n;
      }
      auto m = std::chrono::steady_clock::now();
      sink += ReadAll(out, batch * n);
      auto e = std::chrono::steady_clock::now();
      wr += std::chrono::duration<double, std::micro>(m - a).count(); rd += std::chrono::duration<double, std::micro>(e - m).count();
    }
    printf("%s: write %.1f us/sample, read right after %.1f us/sample, sum %.1f\n", mode ? "stream" : "memcpy", wr / (12 * batch), rd / (12 * batch), (wr + rd) / (12 * batch));
  }
  return sink == 42;
}
