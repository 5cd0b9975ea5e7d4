// rand_augment, read_box, crop_box and clip: the image ops of the detection/GAN/ResNet workloads,
// gathered by RegisterAugmentOps() (registry.h), plus the RandAugment operations as pure
// functions (for tests and tools).
//
// The 14 RandAugment operations follow torchvision 0.14's tensor implementation
// (`torchvision.transforms.autoaugment._apply_op` on uint8 tensors): the same magnitudes
// (RandAugment with num_magnitude_bins=31), nearest-neighbour geometry with a zero fill,
// float32 blends truncated to uint8. Every op is immutable once built; Apply() and the pure
// functions are safe to call from any thread.
#ifndef SLUICE_OPS_IMAGE_AUGMENT_OPS_H_
#define SLUICE_OPS_IMAGE_AUGMENT_OPS_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "sluice/core/rng.h"
#include "sluice/core/tensor.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {

OpDef RandAugmentOpDef();
OpDef CropBoxOpDef();
OpDef ClipOpDef();
OpDef ReadBoxOpDef();

// In torchvision's order (the index drawn is the index in this list).
enum class AugmentOp {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
};
inline constexpr int kNumAugmentOps = 14;

// torchvision's name: "Identity", "ShearX", ..., "Equalize".
std::string_view AugmentOpName(AugmentOp op);

// The magnitude torchvision uses for `op` at bin `bin` of 31 (0..30), before the sign, for
// an image of height x width. Unsigned ops: posterize bits, solarize threshold, 0 otherwise.
double AugmentMagnitude(AugmentOp op, int bin, int64_t height, int64_t width);
// True if torchvision flips the sign of the magnitude with probability 1/2.
bool AugmentSigned(AugmentOp op);

// `op` at the signed `magnitude` on a u8 HWC image (1 or 3 channels), into a new tensor.
Tensor ApplyAugmentOp(const Tensor& image, AugmentOp op, double magnitude);

struct AugmentChoice {
  AugmentOp op = AugmentOp::kIdentity;
  bool negate = false;
};
// The draws of one sample: `num_ops` operations uniform over the 14 and, for signed ones,
// a fair sign.
std::vector<AugmentChoice> DrawAugmentChoices(Rng& rng, int num_ops);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_IMAGE_AUGMENT_OPS_H_
