// Helpers shared by the image ops: the image-field check done at build time, OpenCV views of
// HWC tensors (no copies), and the argument schemas several ops share. Stateless; safe from
// any thread.
#ifndef SLUICE_OPS_IMAGE_IMAGE_UTIL_H_
#define SLUICE_OPS_IMAGE_IMAGE_UTIL_H_

#include <initializer_list>
#include <opencv2/core.hpp>
#include <string>
#include <string_view>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/ops/op.h"

namespace sluice::ops {

// An image field as found in an input schema: rank 3, height x width x channels.
struct ImageField {
  int index = -1;
  DType dtype = DType::kU8;
  int64_t channels = kUnknownDim;  // known at build time, or kUnknownDim
};

// Checks that `input` has field `name` as an HWC image of one of `dtypes` with 1 to 4
// channels (when known). Errors name the field and what was found.
StatusOr<ImageField> RequireImage(const Schema& input, std::string_view name,
                                  std::initializer_list<DType> dtypes);

// A cv::Mat header over an HWC tensor (u8 or f32), sharing its memory.
// REQUIRES: rank 3, dtype u8 or f32, 1 <= channels <= 4.
cv::Mat MatView(const Tensor& image);
// A fresh HWC tensor and a cv::Mat header over it.
Tensor NewImage(DType dtype, int64_t height, int64_t width, int64_t channels, cv::Mat* mat);

// An error for images with no pixels ("image is empty (0x500)"); OK otherwise.
Status CheckNotEmpty(const Tensor& image, std::string_view field);

// Runs `fn`, turning an OpenCV exception into an Internal error.
template <typename Fn>
Status CvGuard(Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const cv::Exception& e) {
    return absl::InternalError(absl::StrCat("OpenCV: ", e.what()));
  }
}

// Interpolation names accepted by `interpolation` arguments and their OpenCV flags.
const std::vector<std::string>& InterpolationNames();
int InterpolationFlag(const std::string& name);  // REQUIRES: one of InterpolationNames()

// Argument schemas several image ops share.
ArgSchema ImageFieldArg();           // `field`, default "image"
ArgSchema SizeArg(std::string doc);  // `size`: [height, width], required
ArgSchema InterpolationArg();        // `interpolation`, default "bilinear"

// Output spec for an image field: dtype, known height/width (or kUnknownDim), channels.
FieldSpec ImageSpec(std::string name, DType dtype, int64_t height, int64_t width, int64_t channels);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_IMAGE_IMAGE_UTIL_H_
