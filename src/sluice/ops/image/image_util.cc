#include "sluice/ops/image/image_util.h"

#include <opencv2/imgproc.hpp>

#include "sluice/ops/op_util.h"

namespace sluice::ops {

StatusOr<ImageField> RequireImage(const Schema& input, std::string_view name,
                                  std::initializer_list<DType> dtypes) {
  std::string want;
  for (DType d : dtypes) absl::StrAppend(&want, want.empty() ? "" : " or ", DTypeName(d));
  absl::StrAppend(&want, "[?,?,C] (height, width, channels)");
  SLUICE_ASSIGN_OR_RETURN(int index, RequireField(input, name, dtypes, 3, want));
  const FieldSpec& field = input.field(index);
  int64_t channels = field.shape[2];
  if (channels != kUnknownDim && (channels < 1 || channels > 4)) {
    return absl::InvalidArgumentError(absl::StrCat("needs field '", Av(name), "' as ", want,
                                                   " with 1 to 4 channels, got ",
                                                   TypeString(field)));
  }
  return ImageField{index, field.dtype, channels};
}

cv::Mat MatView(const Tensor& image) {
  const int depth = image.dtype() == DType::kF32 ? CV_32F : CV_8U;
  return cv::Mat(static_cast<int>(image.dim(0)), static_cast<int>(image.dim(1)),
                 CV_MAKETYPE(depth, static_cast<int>(image.dim(2))),
                 const_cast<uint8_t*>(image.raw()));
}

Tensor NewImage(DType dtype, int64_t height, int64_t width, int64_t channels, cv::Mat* mat) {
  Tensor t = Tensor::Empty(dtype, {height, width, channels});
  *mat = MatView(t);
  return t;
}

Status CheckNotEmpty(const Tensor& image, std::string_view field) {
  if (image.dim(0) > 0 && image.dim(1) > 0 && image.dim(2) > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("field '", Av(field), "' is an empty image (",
                                                 image.dim(0), "x", image.dim(1), "x", image.dim(2),
                                                 ")"));
}

const std::vector<std::string>& InterpolationNames() {
  static const std::vector<std::string> names = {"nearest", "bilinear", "bicubic", "area",
                                                 "lanczos"};
  return names;
}

int InterpolationFlag(const std::string& name) {
  if (name == "nearest") return cv::INTER_NEAREST;
  if (name == "bicubic") return cv::INTER_CUBIC;
  if (name == "area") return cv::INTER_AREA;
  if (name == "lanczos") return cv::INTER_LANCZOS4;
  return cv::INTER_LINEAR;
}

ArgSchema ImageFieldArg() {
  return Arg("field", ArgType::kString).Default("image").Doc("the image field (HWC)");
}

ArgSchema SizeArg(std::string doc) {
  // 16384 per side: 4x the largest training resolutions (4096) and the largest GPU texture;
  // 2^28 pixels at most, 3 GiB as f32 RGB.
  return Arg("size", ArgType::kIntList).Length(2).Range(1, 16384).Doc(std::move(doc));
}

ArgSchema InterpolationArg() {
  return Arg("interpolation", ArgType::kString)
      .Default("bilinear")
      .Choices(InterpolationNames())
      .Doc("resampling filter");
}

FieldSpec ImageSpec(std::string name, DType dtype, int64_t height, int64_t width,
                    int64_t channels) {
  return FieldSpec{std::move(name), dtype, {height, width, channels}};
}

}  // namespace sluice::ops
