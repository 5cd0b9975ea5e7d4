// Fuzzes the JPEG decoder behind decode_jpeg: a whole-image decode to RGB, and a scaled
// region decode to gray whose scale and region come from the input's last 4 bytes (the
// path random_resized_crop's NeededInput takes).
#include <turbojpeg.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/ops/image/codecs.h"

namespace {

// Until the decoders enforce a pixel limit, a header announcing a huge image makes the
// decoder allocate it and the run stops at libFuzzer's malloc limit on the first such
// input (or, a little under the limit, takes seconds to fill tens of megabytes). Skip those
// inputs (4 Mpx and up) so the run keeps looking for other bugs.
constexpr int64_t kMaxPixels = int64_t{1} << 22;

bool TooLarge(const uint8_t* data, size_t size) {
  tjhandle handle = tjInitDecompress();
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  int rc = tjDecompressHeader3(handle, data, size, &width, &height, &subsamp, &colorspace);
  tjDestroy(handle);
  if (rc == 0) return int64_t{width} * height > kMaxPixels;
  // TurboJPEG refuses some headers libjpeg decodes (an odd subsampling, say): look for any
  // start-of-frame marker (FF C0-CF but C4, C8, CC) with its height and width.
  for (size_t i = 0; i + 9 <= size; ++i) {
    const uint8_t m = data[i + 1];
    if (data[i] != 0xFF || (m & 0xF0) != 0xC0 || m == 0xC4 || m == 0xC8 || m == 0xCC) continue;
    const int64_t h = data[i + 5] << 8 | data[i + 6];
    const int64_t w = data[i + 7] << 8 | data[i + 8];
    if (h * w > kMaxPixels) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (TooLarge(data, size)) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)sluice::ops::DecodeJpeg(bytes, 3);
  if (size < 4) return 0;
  const uint8_t* knobs = data + size - 4;
  auto planner = [knobs](int64_t full_height, int64_t full_width) {
    sluice::ops::DecodeRequest request;
    request.min_scale = (knobs[0] % 8 + 1) / 8.0;
    if (knobs[1] & 1) {
      request.x = full_width * (knobs[1] >> 1) / 128;
      request.y = full_height * (knobs[2] >> 1) / 128;
      request.width = full_width - request.x - (full_width - request.x) * (knobs[3] >> 1) / 128;
      request.height = full_height - request.y - (full_height - request.y) * (knobs[3] >> 1) / 128;
    }
    return request;
  };
  (void)sluice::ops::DecodeJpeg(bytes, 1, planner);
  return 0;
}
