#include "sluice/core/allocator.h"

#include <cstdlib>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace sluice {

bool ConfigureAllocator() {
#if defined(__GLIBC__)
  for (const char* name : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}) {
    if (std::getenv(name) != nullptr) return false;
  }
  // Blocks up to 256 MiB (any batch a pipeline makes in practice) come from the heap, and
  // the heap is trimmed only when 1 GiB at its top is free.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap_ok && trim_ok;
#else
  return false;
#endif
}

}  // namespace sluice
