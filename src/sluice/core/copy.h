// Copies into memory that will not be read before it has left the cache.
//
// A received sample written into its slot of a batch is read next only once the whole batch
// is assembled (by the batcher's consumer); a received batch only once it is whole. When the
// cache cannot hold that batch until then, caching its lines on the way in buys nothing and
// costs a read of every destination line (the cache fetches a line before a store may change
// part of it) and the eviction of data that is still in use. CopyPastCache writes with
// non-temporal stores instead, which go to memory without that read. Measured: a 602 KB copy
// out of the shared-memory ring into a cold slot, 40-46 us with memcpy and 26-28 us past the
// cache (docs/BENCHMARKS.md, "Copies past the cache").
//
// Whether the cache can hold it is not something a process can read off the machine: a
// virtual machine reports its host's whole last-level cache (480 MiB on one, shared with
// every other guest of that host), so a rule on the reported size kept memcpy there, where
// copies past the cache were 15% cheaper. CopyWayChooser decides by timing the copies
// themselves (docs/offload.md, "The receive path").
#ifndef SLUICE_CORE_COPY_H_
#define SLUICE_CORE_COPY_H_

#include <cstddef>
#include <cstdint>

namespace sluice {

// memcpy(dst, src, n) with non-temporal stores where the machine has them (x86-64: SSE2),
// fenced, so the bytes are visible to any thread that synchronizes with this one afterwards
// as after memcpy. Elsewhere, memcpy.
void CopyPastCache(void* dst, const void* src, size_t n);

// Which of the two ways a stream of copies takes, learned from their own times: copies into
// memory read only once a larger unit is whole (a batch's slots, a whole batch). It tries
// both in turn on kTrialCopies timed copies each, takes the one whose median time per byte
// is lower, and tries again after kSettledCopies timed copies, since the machine's load and
// the other processes on its cache change. Only copies of at least kMinTimedBytes are timed
// (and counted); smaller ones take the way chosen. Thread-compatible: one stream, one thread.
class CopyWayChooser {
 public:
  // A clock's reading read twice around a copy costs a few tens of nanoseconds: under 1% of
  // a copy of 64 KiB at 10 GB/s, so a copy this size or larger is timed by its own cost.
  static constexpr size_t kMinTimedBytes = 64 << 10;
  // A median of 16 is moved by neither a copy preempted nor one that met a cold page:
  // it takes eight of them to move it.
  static constexpr int kTrialCopies = 16;
  // The copies between trials: the trials' copies the slower way are then at most 1 in 256
  // (kTrialCopies of 4096), and a change of the machine is met within seconds where there
  // is a copy a sample (slots: thousands a second), within minutes where there is one a
  // batch (after batching: tens a second).
  static constexpr int kSettledCopies = 4096;

  // Whether a copy of `n` bytes is timed and counted (callers need not time the others).
  static bool Timed(size_t n) { return n >= kMinTimedBytes; }
  // Whether the next copy of `n` bytes goes past the cache. A copy made in parts (a ring's
  // wrap) asks once, for the whole.
  bool NextPastCache(size_t n) const;
  // The copy NextPastCache(n) answered for took `ns` (its parts' copies, not the waits
  // between them).
  void Note(size_t n, int64_t ns);
  // The way chosen (before the first trial ends: memcpy) and the trials ended so far.
  bool past_cache() const { return past_cache_; }
  int trials() const { return trials_; }

 private:
  bool trying_ = true;
  bool past_cache_ = false;
  int trials_ = 0;
  int settled_ = 0;  // timed copies since the last trial ended
  // A trial's times per byte (picoseconds), by way: [0] memcpy, [1] past the cache.
  int64_t times_[2][kTrialCopies] = {};
  int count_[2] = {0, 0};

  // The way a trial's next timed copy takes: 0 memcpy, 1 past the cache.
  int TrialWay() const;
};

}  // namespace sluice

#endif  // SLUICE_CORE_COPY_H_
