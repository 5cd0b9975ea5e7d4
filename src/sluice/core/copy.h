// Copies into memory that will not be read before it has left the cache.
//
// A received sample written into its slot of a batch is read next only once the whole batch
// is assembled (by the batcher's consumer); a received batch only once it is whole. When that
// batch is larger than the last-level cache, the first lines written are evicted before the
// last are, so caching them on the way in buys nothing and costs a read of every destination
// line (the cache fetches a line before a store may change part of it) and the eviction of
// data that is still in use. CopyPastCache writes with non-temporal stores instead, which go
// to memory without that read. Measured: a 602 KB copy out of the shared-memory ring into a
// cold slot, 40-46 us with memcpy and 26-28 us past the cache (docs/BENCHMARKS.md, "Copies
// past the cache").
#ifndef SLUICE_CORE_COPY_H_
#define SLUICE_CORE_COPY_H_

#include <cstddef>

namespace sluice {

// The last-level data cache of this machine in bytes, 0 when the C library cannot say.
size_t LastLevelCacheBytes();

// Whether a destination that is handed on only once `unit_bytes` of it are written is better
// written past the cache: `unit_bytes` over the last-level cache (never when its size is
// unknown).
bool CopyPastCacheFor(size_t unit_bytes);

// memcpy(dst, src, n) with non-temporal stores where the machine has them (x86-64: SSE2),
// fenced, so the bytes are visible to any thread that synchronizes with this one afterwards
// as after memcpy. Elsewhere, memcpy.
void CopyPastCache(void* dst, const void* src, size_t n);

}  // namespace sluice

#endif  // SLUICE_CORE_COPY_H_
