#include "sluice/ops/image/image_ops.h"

#include "sluice/ops/generic/generic_ops.h"

namespace sluice::ops {

void RegisterImageOps(Registry* registry) {
  CheckRegistered(registry->Register(DecodeJpegOpDef()));
  CheckRegistered(registry->Register(DecodePngOpDef()));
  CheckRegistered(registry->Register(DecodeImageOpDef()));
  CheckRegistered(registry->Register(ResizeOpDef()));
  CheckRegistered(registry->Register(CenterCropOpDef()));
  CheckRegistered(registry->Register(RandomResizedCropOpDef()));
  CheckRegistered(registry->Register(RandomFlipOpDef()));
  CheckRegistered(registry->Register(ColorJitterOpDef()));
  CheckRegistered(registry->Register(NormalizeOpDef()));
}

}  // namespace sluice::ops
