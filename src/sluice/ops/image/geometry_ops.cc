// resize, center_crop, random_resized_crop, random_flip: ops that move pixels around.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <opencv2/imgproc.hpp>

#include "sluice/ops/image/flip_kernel.h"
#include "sluice/ops/image/image_ops.h"
#include "sluice/ops/image/image_util.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

// Python's round(): halves to even (std::nearbyint in the default rounding mode).
int64_t RoundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// OpenCV flag for `name`. (Bilinear on u8 runs in fixed point, so its SIMD variants agree;
// INTER_LINEAR_EXACT would cost 2.5x more for no difference on one OpenCV build.)
int ResizeFlag(const std::string& name, DType dtype) { return InterpolationFlag(name); }

// The smallest decode scale that still leaves `out` pixels for `in` source pixels on both
// axes.
double MinScale(int64_t in_height, int64_t in_width, int64_t out_height, int64_t out_width) {
  if (in_height <= 0 || in_width <= 0) return 1.0;
  double s = std::max(static_cast<double>(out_height) / static_cast<double>(in_height),
                      static_cast<double>(out_width) / static_cast<double>(in_width));
  return std::min(1.0, s);
}

// Resamples `src` (any region of an image) to out_height x out_width into a fresh tensor.
StatusOr<Tensor> ResizeMat(const cv::Mat& src, DType dtype, int64_t channels, int64_t out_height,
                           int64_t out_width, int flag) {
  cv::Mat dst;
  Tensor out = NewImage(dtype, out_height, out_width, channels, &dst);
  SLUICE_RETURN_IF_ERROR(CvGuard([&] {
    cv::resize(src, dst, cv::Size(static_cast<int>(out_width), static_cast<int>(out_height)), 0, 0,
               flag);
  }));
  return out;
}

// --- resize ---------------------------------------------------------------------------------

class ResizeOp final : public Op {
 public:
  ResizeOp(const OpSchema* schema, Args args, Schema input, Schema output, ImageField image)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        image_(image),
        height_(this->args().IntList("size")[0]),
        width_(this->args().IntList("size")[1]),
        flag_(ResizeFlag(this->args().String("interpolation"), image.dtype)) {}

  Geometry geometry() const override { return Geometry::kScaleConsumer; }

  DecodeRequest NeededInput(const Element& element, const OpContext& ctx, int64_t full_height,
                            int64_t full_width) const override {
    DecodeRequest r;
    r.min_scale = MinScale(full_height, full_width, height_, width_);
    return r;
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, input_schema().field(image_.index).name));
    element.decoded_region = ImageRegion{};
    if (in->dim(0) == height_ && in->dim(1) == width_) return absl::OkStatus();
    SLUICE_ASSIGN_OR_RETURN(
        Tensor out, ResizeMat(MatView(*in), in->dtype(), in->dim(2), height_, width_, flag_));
    element.tensors[image_.index] = std::move(out);
    return absl::OkStatus();
  }

 private:
  ImageField image_;
  int64_t height_;
  int64_t width_;
  int flag_;
};

// --- center_crop ----------------------------------------------------------------------------

class CenterCropOp final : public Op {
 public:
  CenterCropOp(const OpSchema* schema, Args args, Schema input, Schema output, ImageField image)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        image_(image),
        height_(this->args().IntList("size")[0]),
        width_(this->args().IntList("size")[1]) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    const std::string& field = input_schema().field(image_.index).name;
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, field));
    const int64_t h = in->dim(0), w = in->dim(1), c = in->dim(2);
    if (h < height_ || w < width_) {
      return absl::InvalidArgumentError(absl::StrCat("field '", field, "' is ", h, "x", w,
                                                     " (HxW), smaller than the crop size [",
                                                     height_, ", ", width_, "]"));
    }
    element.decoded_region = ImageRegion{};
    if (h == height_ && w == width_) return absl::OkStatus();
    // As torchvision: the offset is round((h - height) / 2), halves to even.
    const int64_t top = RoundHalfEven(static_cast<double>(h - height_) / 2.0);
    const int64_t left = RoundHalfEven(static_cast<double>(w - width_) / 2.0);
    Tensor out = Tensor::Empty(in->dtype(), {height_, width_, c});
    const size_t pixel = static_cast<size_t>(c) * DTypeSize(in->dtype());
    const size_t row = static_cast<size_t>(width_) * pixel;
    for (int64_t y = 0; y < height_; ++y) {
      std::memcpy(out.mutable_raw() + y * row,
                  in->raw() + ((top + y) * w + left) * static_cast<int64_t>(pixel), row);
    }
    element.tensors[image_.index] = std::move(out);
    return absl::OkStatus();
  }

 private:
  ImageField image_;
  int64_t height_;
  int64_t width_;
};

// --- random_resized_crop --------------------------------------------------------------------

class RandomResizedCropOp final : public Op {
 public:
  RandomResizedCropOp(const OpSchema* schema, Args args, Schema input, Schema output,
                      ImageField image)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        image_(image),
        height_(this->args().IntList("size")[0]),
        width_(this->args().IntList("size")[1]),
        scale_(this->args().FloatList("scale")),
        ratio_(this->args().FloatList("ratio")),
        flag_(ResizeFlag(this->args().String("interpolation"), image.dtype)) {}

  Geometry geometry() const override { return Geometry::kScaleConsumer; }

  DecodeRequest NeededInput(const Element& element, const OpContext& ctx, int64_t full_height,
                            int64_t full_width) const override {
    CropBox box = Box(element, ctx, full_height, full_width);
    DecodeRequest r;
    r.min_scale = MinScale(box.height, box.width, height_, width_);
    r.x = box.x;
    r.y = box.y;
    r.width = box.width;
    r.height = box.height;
    return r;
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, input_schema().field(image_.index).name));
    const int64_t h = in->dim(0), w = in->dim(1);
    const ImageRegion region = element.decoded_region;
    // The box is drawn on the full-resolution image, whatever part of it was decoded, so
    // that the crop does not depend on how the decoder was driven.
    const bool partial = !region.empty() && region.width > 0 && region.height > 0;
    CropBox box = partial ? Box(element, ctx, region.full_height, region.full_width)
                          : Box(element, ctx, h, w);
    int64_t x0 = box.x, y0 = box.y, x1 = box.x + box.width, y1 = box.y + box.height;
    if (partial) {
      const double sx = static_cast<double>(w) / region.width;
      const double sy = static_cast<double>(h) / region.height;
      x0 = std::lround((box.x - region.x) * sx);
      x1 = std::lround((box.x + box.width - region.x) * sx);
      y0 = std::lround((box.y - region.y) * sy);
      y1 = std::lround((box.y + box.height - region.y) * sy);
    }
    x0 = std::clamp<int64_t>(x0, 0, w - 1);
    y0 = std::clamp<int64_t>(y0, 0, h - 1);
    x1 = std::clamp<int64_t>(x1, x0 + 1, w);
    y1 = std::clamp<int64_t>(y1, y0 + 1, h);
    cv::Mat roi = MatView(*in)(cv::Rect(static_cast<int>(x0), static_cast<int>(y0),
                                        static_cast<int>(x1 - x0), static_cast<int>(y1 - y0)));
    SLUICE_ASSIGN_OR_RETURN(Tensor out,
                            ResizeMat(roi, in->dtype(), in->dim(2), height_, width_, flag_));
    element.tensors[image_.index] = std::move(out);
    element.decoded_region = ImageRegion{};
    return absl::OkStatus();
  }

 private:
  CropBox Box(const Element& element, const OpContext& ctx, int64_t h, int64_t w) const {
    Rng rng = ctx.MakeRng(element);
    return RandomResizedCropBox(rng, h, w, scale_[0], scale_[1], ratio_[0], ratio_[1]);
  }

  ImageField image_;
  int64_t height_;
  int64_t width_;
  std::vector<double> scale_;
  std::vector<double> ratio_;
  int flag_;
};

// --- random_flip ----------------------------------------------------------------------------

class RandomFlipOp final : public Op {
 public:
  RandomFlipOp(const OpSchema* schema, Args args, Schema input, Schema output, ImageField image)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        image_(image),
        p_(this->args().Float("p")),
        horizontal_(this->args().String("direction") == "horizontal") {}

  Geometry geometry() const override { return Geometry::kSizeIndependent; }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, input_schema().field(image_.index).name));
    Rng rng = ctx.MakeRng(element);
    const bool flip = rng.Bernoulli(p_);
    // The last op before the batcher writes every sample into its batch slot (OpContext::
    // NewOutput), one it does not flip too: a sample left out would make its batch a copy.
    const bool to_slot = ctx.HasBatchSlots(image_.index);
    if (!flip && !to_slot) return absl::OkStatus();
    Tensor out = ctx.NewOutput(image_.index, in->dtype(), in->shape());
    if (!flip) {
      std::memcpy(out.mutable_raw(), in->raw(), in->nbytes());
      element.tensors[image_.index] = std::move(out);
      return absl::OkStatus();
    }
    if (horizontal_ && in->dtype() == DType::kU8 && in->dim(2) == 3) {
      FlipRgbHorizontally(in->raw(), in->dim(0), in->dim(1), out.mutable_raw());
    } else {
      cv::Mat dst = MatView(out);
      SLUICE_RETURN_IF_ERROR(CvGuard([&] { cv::flip(MatView(*in), dst, horizontal_ ? 1 : 0); }));
    }
    element.tensors[image_.index] = std::move(out);
    // The pixels now show the mirrored full image; keep the decoded region consistent.
    ImageRegion& r = element.decoded_region;
    if (!r.empty()) {
      if (horizontal_) {
        r.x = r.full_width - r.x - r.width;
      } else {
        r.y = r.full_height - r.y - r.height;
      }
    }
    return absl::OkStatus();
  }

 private:
  ImageField image_;
  double p_;
  bool horizontal_;
};

// A factory for the ops above: checks the image field, computes the output spec.
template <typename OpT>
OpFactory ImageFactory(bool sized) {
  return [sized](const OpSchema& schema, const Args& args,
                 const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(ImageField image,
                            RequireImage(input, args.String("field"), {DType::kU8, DType::kF32}));
    Schema output = input;
    if (sized) {
      FieldSpec spec = input.field(image.index);
      spec.shape[0] = args.IntList("size")[0];
      spec.shape[1] = args.IntList("size")[1];
      output.Set(spec);
    }
    return std::make_unique<OpT>(&schema, args, input, std::move(output), image);
  };
}

Status CheckRange(const Args& args, const std::string& name) {
  const std::vector<double>& v = args.FloatList(name);
  if (v[0] > v[1]) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected [min, max] with min <= max, got ", ArgValueToString(v)));
  }
  return absl::OkStatus();
}

}  // namespace

CropBox RandomResizedCropBox(Rng& rng, int64_t height, int64_t width, double scale_lo,
                             double scale_hi, double ratio_lo, double ratio_hi) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(scale_lo, scale_hi);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t y = rng.UniformInt(0, height - h);
      const int64_t x = rng.UniformInt(0, width - w);
      return CropBox{x, y, w, h};
    }
  }
  // Fallback: the central crop, clamped to the ratio range.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio_lo) {
    h = std::clamp<int64_t>(RoundHalfEven(static_cast<double>(w) / ratio_lo), 1, height);
  } else if (in_ratio > ratio_hi) {
    w = std::clamp<int64_t>(RoundHalfEven(static_cast<double>(h) * ratio_hi), 1, width);
  }
  return CropBox{(width - w) / 2, (height - h) / 2, w, h};
}

OpDef ResizeOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "resize", /*random=*/false,
      "Resamples the whole image to `size` (OpenCV). A decoder right before it may decode at "
      "reduced size (never below `size`).",
      {ImageFieldArg(), SizeArg("output [height, width] (a single int: square)"),
       InterpolationArg()});
  def.factory = ImageFactory<ResizeOp>(/*sized=*/true);
  return def;
}

OpDef CenterCropOpDef() {
  OpDef def;
  def.schema =
      MakeOpSchema("center_crop", /*random=*/false,
                   "Cuts the central `size` window (offsets rounded as torchvision does). An image "
                   "smaller than `size` is an error.",
                   {ImageFieldArg(), SizeArg("crop [height, width] (a single int: square)")});
  def.factory = ImageFactory<CenterCropOp>(/*sized=*/true);
  return def;
}

OpDef RandomResizedCropOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "random_resized_crop", /*random=*/true,
      "torchvision's RandomResizedCrop: a random box with area fraction in `scale` and "
      "aspect ratio in `ratio` (10 tries, then the central crop), resampled to `size`. The box "
      "is drawn on the full-resolution image, so a decoder before it can decode just that "
      "region at reduced size.",
      {ImageFieldArg(), SizeArg("output [height, width] (a single int: square)"),
       Arg("scale", ArgType::kFloatList)
           .Default(ArgValue(std::vector<double>{0.08, 1.0}))
           .Length(2)
           .Range(1e-6, 1.0)
           .Doc("[min, max] fraction of the image area"),
       Arg("ratio", ArgType::kFloatList)
           .Default(ArgValue(std::vector<double>{3.0 / 4.0, 4.0 / 3.0}))
           .Length(2)
           .Range(1e-3, 1e3)
           .Doc("[min, max] aspect ratio (width / height), drawn log-uniformly"),
       InterpolationArg()});
  OpFactory base = ImageFactory<RandomResizedCropOp>(/*sized=*/true);
  def.factory = [base](const OpSchema& schema, const Args& args,
                       const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_RETURN_IF_ERROR(CheckRange(args, "scale"));
    SLUICE_RETURN_IF_ERROR(CheckRange(args, "ratio"));
    return base(schema, args, input);
  };
  return def;
}

OpDef RandomFlipOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "random_flip", /*random=*/true, "Mirrors the image with probability `p`.",
      {ImageFieldArg(),
       Arg("p", ArgType::kFloat).Default(ArgValue(0.5)).Range(0, 1).Doc("probability of a flip"),
       Arg("direction", ArgType::kString)
           .Default("horizontal")
           .Choices({"horizontal", "vertical"})
           .Doc("horizontal: left-right mirror; vertical: top-bottom")});
  def.factory = ImageFactory<RandomFlipOp>(/*sized=*/false);
  return def;
}

}  // namespace sluice::ops
