// Fuzzes the PNG decoder behind decode_png, to RGB and to gray.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/ops/image/codecs.h"

namespace {

// Until the decoders enforce a pixel limit, an IHDR announcing a huge image makes the
// decoder allocate it and the run stops at libFuzzer's malloc limit on the first such
// input (or, a little under the limit, takes seconds to fill tens of megabytes). Skip those
// inputs (4 Mpx and up) so the run keeps looking for other bugs.
constexpr uint64_t kMaxPixels = uint64_t{1} << 22;

uint32_t BigEndian32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// The signature (8 bytes), then the IHDR chunk: length, "IHDR", width, height.
bool TooLarge(const uint8_t* data, size_t size) {
  return size >= 24 && uint64_t{BigEndian32(data + 16)} * BigEndian32(data + 20) > kMaxPixels;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (TooLarge(data, size)) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)sluice::ops::DecodePng(bytes, 3);
  (void)sluice::ops::DecodePng(bytes, 1);
  return 0;
}
