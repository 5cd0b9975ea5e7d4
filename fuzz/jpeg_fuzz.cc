// Fuzzes the JPEG decoder behind decode_jpeg: a whole-image decode to RGB, and a scaled
// region decode to gray whose scale and region come from the input's last 4 bytes (the
// path random_resized_crop's NeededInput takes).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/ops/image/codecs.h"

namespace {

// The decoders refuse an image over their pixel limit before allocating for it: the
// harness gives them a small one (4 Mpx) so that a header announcing a huge image is refused
// as it would be in a pipeline, and an image under it decodes in milliseconds.
constexpr int64_t kMaxPixels = int64_t{1} << 22;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)sluice::ops::DecodeJpeg(bytes, 3, nullptr, kMaxPixels);
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
  (void)sluice::ops::DecodeJpeg(bytes, 1, planner, kMaxPixels);
  return 0;
}
