#include "sluice/core/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace sluice {

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

int CopyWayChooser::TrialWay() const {
  // In turn, the way with fewer times first: a trial's two halves see the same moments.
  return count_[1] < count_[0] ? 1 : 0;
}

bool CopyWayChooser::NextPastCache(size_t n) const {
  if (!trying_ || !Timed(n)) return past_cache_;
  return TrialWay() == 1;
}

void CopyWayChooser::Note(size_t n, int64_t ns) {
  if (!Timed(n)) return;
  if (!trying_) {
    if (++settled_ >= kSettledCopies) {
      trying_ = true;
      count_[0] = count_[1] = 0;
    }
    return;
  }
  // Taken in turn, the counts differ by one at most: the way noted is never full here.
  const int way = TrialWay();
  times_[way][count_[way]++] = std::max<int64_t>(ns, 0) * 1000 / static_cast<int64_t>(n);
  if (count_[1] < kTrialCopies) return;
  const auto median = [this](int w) {
    int64_t* t = times_[w];
    std::nth_element(t, t + kTrialCopies / 2, t + kTrialCopies);
    return t[kTrialCopies / 2];
  };
  // A tie keeps memcpy: it leaves the bytes in the cache for a reader that comes soon.
  past_cache_ = median(1) < median(0);
  trying_ = false;
  settled_ = 0;
  ++trials_;
}

}  // namespace sluice
