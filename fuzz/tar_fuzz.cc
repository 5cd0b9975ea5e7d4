// Fuzzes the tar shard scanner (pipeline/tar.h) and the grouping of members into samples:
// whatever the bytes, the scan returns, and every member it lists lies inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "sluice/pipeline/tar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const sluice::pipeline::ReadAt read = [&bytes](int64_t offset,
                                                 int64_t n) -> sluice::StatusOr<std::string> {
    if (offset < 0 || n < 0 || offset > static_cast<int64_t>(bytes.size())) std::abort();
    return bytes.substr(static_cast<size_t>(offset), static_cast<size_t>(n));
  };
  auto scan = sluice::pipeline::ScanTar("fuzz.tar", static_cast<int64_t>(size), read);
  if (!scan.ok()) return 0;
  for (const auto& m : scan->members) {
    if (m.offset < 0 || m.size < 0 || m.offset + m.size > static_cast<int64_t>(size)) std::abort();
  }
  (void)sluice::pipeline::GroupSamples(scan->members);
  return 0;
}
