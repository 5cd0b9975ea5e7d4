// The image built-in ops: decoders (decode_jpeg, decode_png, decode_image), geometry
// (resize, center_crop, random_resized_crop, random_flip), color (color_jitter) and
// normalize. One OpDef per op, gathered by RegisterImageOps() (registry.h). Every op is
// immutable once built (decoders also take their scale consumer at build time, before any
// Apply); Apply() is safe to call from any thread.
#ifndef SLUICE_OPS_IMAGE_IMAGE_OPS_H_
#define SLUICE_OPS_IMAGE_IMAGE_OPS_H_

#include <cstdint>

#include "sluice/core/rng.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {

OpDef DecodeJpegOpDef();
OpDef DecodePngOpDef();
OpDef DecodeImageOpDef();
OpDef ResizeOpDef();
OpDef CenterCropOpDef();
OpDef RandomResizedCropOpDef();
OpDef RandomFlipOpDef();
OpDef ColorJitterOpDef();
OpDef NormalizeOpDef();

// A crop rectangle in pixels of the image it was drawn for.
struct CropBox {
  int64_t x = 0;
  int64_t y = 0;
  int64_t width = 0;
  int64_t height = 0;
};

// torchvision's RandomResizedCrop.get_params: up to 10 tries of an area fraction uniform in
// [scale_lo, scale_hi] and a log-uniform aspect ratio in [ratio_lo, ratio_hi]; then the
// central crop clamped to the ratio range. REQUIRES: height, width >= 1.
CropBox RandomResizedCropBox(Rng& rng, int64_t height, int64_t width, double scale_lo,
                             double scale_hi, double ratio_lo, double ratio_hi);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_IMAGE_IMAGE_OPS_H_
