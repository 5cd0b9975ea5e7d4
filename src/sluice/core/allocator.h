// Process-wide allocator settings for a data-loading process.
//
// Samples of a few hundred KiB and batches of tens of MiB are allocated and freed at a high
// rate. With glibc's defaults, blocks that large come straight from mmap and go back to the
// kernel on free, so every sample pays for fresh pages: page faults, zeroing and unmapping
// cost more CPU than the copies themselves (measured: about half of a worker's CPU at the
// after-batch cut, docs/BENCHMARKS.md). ConfigureAllocator() keeps such blocks in the heap
// for reuse instead. The heap then holds on to its peak size, which a loader reaches within
// its first batches anyway.
//
// Call it once, early, before threads start (the `sluice` binary and the Python module do).
// It changes nothing when the user tuned malloc through the environment (GLIBC_TUNABLES,
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) or when the C library is not glibc.
#ifndef SLUICE_CORE_ALLOCATOR_H_
#define SLUICE_CORE_ALLOCATOR_H_

namespace sluice {

// Returns whether the settings were applied.
bool ConfigureAllocator();

}  // namespace sluice

#endif  // SLUICE_CORE_ALLOCATOR_H_
