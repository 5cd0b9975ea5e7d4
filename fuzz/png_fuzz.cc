// Fuzzes the PNG decoder behind decode_png, to RGB and to gray.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/ops/image/codecs.h"

namespace {

// The decoder refuses an image over its pixel limit before allocating for it: the harness
// gives it a small one (4 Mpx) so that an IHDR announcing a huge image is refused as it
// would be in a pipeline, and an image under it decodes in milliseconds.
constexpr int64_t kMaxPixels = int64_t{1} << 22;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)sluice::ops::DecodePng(bytes, 3, kMaxPixels);
  (void)sluice::ops::DecodePng(bytes, 1, kMaxPixels);
  return 0;
}
