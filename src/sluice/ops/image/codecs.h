// Image decoders used by the decode ops: JPEG through the libjpeg API (with DCT scaling and
// region decoding) and PNG through libpng. Corrupt or truncated input is an error, never a
// partly grey image. Stateless functions, safe to call concurrently.
#ifndef SLUICE_OPS_IMAGE_CODECS_H_
#define SLUICE_OPS_IMAGE_CODECS_H_

#include <cstdint>
#include <functional>
#include <string_view>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/core/tensor.h"
#include "sluice/ops/op.h"

namespace sluice::ops {

enum class ImageFormat { kUnknown, kJpeg, kPng };

// Recognises JPEG (FF D8 FF) and PNG (89 'P' 'N' 'G' 0D 0A 1A 0A) by their magic bytes.
ImageFormat SniffImageFormat(std::string_view data);
// "GIF", "BMP", "WebP", ... for formats we recognise but do not decode; "" otherwise.
std::string_view NameOtherFormat(std::string_view data);

struct DecodedImage {
  Tensor image;  // u8[height, width, channels]
  // The full-resolution region the pixels cover; empty when the whole image was decoded at
  // full size.
  ImageRegion region;
};

// Called once the JPEG header is read, with the full image size; says what to decode.
using DecodePlanner = std::function<DecodeRequest(int64_t full_height, int64_t full_width)>;

// Decodes a JPEG to `channels` (3: RGB, 1: gray) channels. Without a planner (or with a
// request for everything at scale 1) the whole image is decoded at full size. Otherwise the
// image is decoded at the smallest scale n/8 >= request.min_scale with n in {1, 2, 4, 8}
// (the scales libjpeg-turbo accelerates), and only the rows and
// columns covering the requested region (widened to the iMCU grid libjpeg imposes, and to
// whole full-resolution pixels); `region` says what was decoded.
//
// Both decoders read the header first and refuse an image whose width x height is over
// `max_pixels` (ResourceExhausted) before allocating anything for its pixels: a 26 KB JPEG
// may claim 60000x60000.
StatusOr<DecodedImage> DecodeJpeg(std::string_view data, int channels,
                                  const DecodePlanner& planner = nullptr,
                                  int64_t max_pixels = InputLimits::kDefaultMaxImagePixels);

// Decodes a PNG to `channels` (3: RGB, 1: gray) 8-bit channels: palettes are expanded,
// 16-bit samples rounded to 8 bits, alpha dropped, gray replicated or RGB converted to gray
// (0.299 R + 0.587 G + 0.114 B).
StatusOr<Tensor> DecodePng(std::string_view data, int channels,
                           int64_t max_pixels = InputLimits::kDefaultMaxImagePixels);

// The error for an image of `width` x `height` over `max_pixels`; OK when it is not.
Status CheckImagePixels(int64_t width, int64_t height, int64_t max_pixels);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_IMAGE_CODECS_H_
