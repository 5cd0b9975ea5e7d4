#include "sluice/core/copy.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "sluice/core/files.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace sluice {

namespace {

// A sysfs value of `dir`, its line end stripped; empty when it cannot be read.
std::string SysfsValue(const std::string& dir, const char* name) {
  return std::string(absl::StripTrailingAsciiWhitespace(ReadFile(dir + "/" + name).value_or("")));
}

// A cache's "size" ("32768K", "1M", "512"): bytes; 0 when it does not parse.
size_t SizeBytes(absl::string_view text) {
  size_t shift = 0;
  for (const auto& [suffix, bits] : {std::pair{"K", 10}, std::pair{"M", 20}, std::pair{"G", 30}}) {
    if (absl::ConsumeSuffix(&text, suffix)) shift = bits;
  }
  uint64_t value = 0;
  return absl::SimpleAtoi(text, &value) ? static_cast<size_t>(value) << shift : 0;
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
      const std::string type = SysfsValue(dir, "type");
      if (type.empty()) break;
      if (type != "Data" && type != "Unified") continue;
      int level = 0;
      if (!absl::SimpleAtoi(SysfsValue(dir, "level"), &level)) continue;
      const size_t size = SizeBytes(SysfsValue(dir, "size"));
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
