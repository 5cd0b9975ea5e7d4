#include "sluice/core/copy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace sluice {

namespace {

// The first line of `path`, empty when it cannot be read.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "32768K", "1M", "512": bytes; 0 when it does not parse.
size_t SizeBytes(const std::string& text) {
  size_t value = 0, i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = value * 10 + static_cast<size_t>(text[i] - '0');
  }
  if (i == 0) return 0;
  if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) return value << 10;
  if (i < text.size() && (text[i] == 'M' || text[i] == 'm')) return value << 20;
  if (i < text.size() && (text[i] == 'G' || text[i] == 'g')) return value << 30;
  return value;
}

}  // namespace

size_t LastLevelCacheBytes() {
  static const size_t bytes = [] {
    // The kernel's view first (what the CPU's cache of the highest level holds for data):
    // the C library's sysconf derives it from CPUID, which some virtual machines fill
    // oddly (one reported a 320 MiB L3 where the kernel says 32 MiB).
    int best_level = 0;
    size_t best = 0;
    for (int i = 0; i < 16; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
      const std::string type = FirstLine(dir + "/type");
      if (type.empty()) break;
      if (type != "Data" && type != "Unified") continue;
      const int level = std::atoi(FirstLine(dir + "/level").c_str());
      const size_t size = SizeBytes(FirstLine(dir + "/size"));
      if (level > best_level && size > 0) {
        best_level = level;
        best = size;
      }
    }
    if (best > 0) return best;
    for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
      const long v = sysconf(name);
      if (v > 0) return static_cast<size_t>(v);
    }
    return size_t{0};
  }();
  return bytes;
}

bool CopyPastCacheFor(size_t unit_bytes) {
  const size_t cache = LastLevelCacheBytes();
  return cache > 0 && unit_bytes > cache;
}

void CopyPastCache(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  // Up to the destination's first 16-byte boundary as usual (a non-temporal store must be
  // aligned), then 64 bytes (a cache line) a step, the rest as usual.
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, n - i);
  // Non-temporal stores are not ordered with later ones: the fence makes them visible
  // before whatever this thread publishes next (a count, a mutex release).
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace sluice
