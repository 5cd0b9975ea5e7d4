// color_jitter and normalize: ops that change pixel values, not their positions.
#include <algorithm>
#include <array>
#include <cmath>

#include "sluice/ops/half.h"
#include "sluice/ops/image/image_ops.h"
#include "sluice/ops/image/image_util.h"
#include "sluice/ops/image/normalize_kernel.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

// color_jitter strengths: factors are drawn from [max(0, 1 - s), 1 + s], and beyond s = 10
// every pixel saturates; torchvision's recipes use <= 0.4.
constexpr double kMaxJitter = 10;
// normalize: mean and std in the data's units (0..255 for u8 images, or any scaled range);
// 1e6 leaves room for any such scale and keeps (x - mean) / std finite in f32.
constexpr double kMaxNormalize = 1e6;

uint8_t SaturateU8(double v) {
  if (!(v > 0)) return 0;
  if (v >= 255) return 255;
  return static_cast<uint8_t>(v + 0.5);
}

// ITU-R BT.601 luma, as torchvision's rgb_to_grayscale and PIL's "L" conversion.
inline float Gray(const uint8_t* px) { return 0.299f * px[0] + 0.587f * px[1] + 0.114f * px[2]; }

// --- color_jitter ---------------------------------------------------------------------------

class ColorJitterOp final : public Op {
 public:
  ColorJitterOp(const OpSchema* schema, Args args, Schema input, Schema output, ImageField image)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        image_(image),
        strength_{this->args().Float("brightness"), this->args().Float("contrast"),
                  this->args().Float("saturation")} {}

  Geometry geometry() const override { return Geometry::kSizeIndependent; }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, input_schema().field(image_.index).name));
    if (strength_[0] == 0 && strength_[1] == 0 && strength_[2] == 0) return absl::OkStatus();
    // As torchvision: first a random order of the adjustments, then each factor, uniform in
    // [max(0, 1 - x), 1 + x] (adjustments with x = 0 are skipped and draw nothing).
    Rng rng = ctx.MakeRng(element);
    std::array<int, 3> order = {0, 1, 2};
    for (int i = 2; i > 0; --i) std::swap(order[i], order[rng.UniformInt(0, i)]);
    std::array<double, 3> factor = {1, 1, 1};
    for (int k = 0; k < 3; ++k) {
      if (strength_[k] > 0) {
        factor[k] = rng.Uniform(std::max(0.0, 1 - strength_[k]), 1 + strength_[k]);
      }
    }
    Tensor out = in->Clone();
    const int64_t pixels = in->dim(0) * in->dim(1);
    const int64_t channels = in->dim(2);
    uint8_t* p = out.mutable_raw();
    for (int k : order) {
      if (strength_[k] == 0) continue;
      const double f = factor[k];
      if (k == 0) {  // brightness: blend with black
        std::array<uint8_t, 256> lut;
        for (int v = 0; v < 256; ++v) lut[v] = SaturateU8(v * f);
        for (int64_t i = 0; i < pixels * channels; ++i) p[i] = lut[p[i]];
      } else if (k == 1) {  // contrast: blend with the mean of the gray image
        double sum = 0;
        if (channels >= 3) {
          for (int64_t i = 0; i < pixels; ++i) sum += Gray(p + i * channels);
        } else {
          for (int64_t i = 0; i < pixels * channels; ++i) sum += p[i];
          sum /= static_cast<double>(channels);
        }
        const double mean = sum / static_cast<double>(pixels);
        std::array<uint8_t, 256> lut;
        for (int v = 0; v < 256; ++v) lut[v] = SaturateU8(f * v + (1 - f) * mean);
        for (int64_t i = 0; i < pixels * channels; ++i) p[i] = lut[p[i]];
      } else if (channels >= 3) {  // saturation: blend with the gray image
        for (int64_t i = 0; i < pixels; ++i) {
          uint8_t* px = p + i * channels;
          const double gray = Gray(px);
          for (int c = 0; c < 3; ++c) px[c] = SaturateU8(f * px[c] + (1 - f) * gray);
        }
      }
    }
    element.tensors[image_.index] = std::move(out);
    return absl::OkStatus();
  }

 private:
  ImageField image_;
  std::array<double, 3> strength_;  // brightness, contrast, saturation
};

// --- normalize ------------------------------------------------------------------------------

class NormalizeOp final : public Op {
 public:
  NormalizeOp(const OpSchema* schema, Args args, Schema input, Schema output, ImageField image)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        image_(image),
        mean_(this->args().FloatList("mean")),
        std_(this->args().FloatList("std")),
        chw_(this->args().String("layout") == "CHW"),
        f16_(this->args().String("dtype") == "f16") {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, input_schema().field(image_.index).name));
    const int64_t h = in->dim(0), w = in->dim(1), c = in->dim(2);
    if (mean_.size() != 1 && static_cast<int64_t>(mean_.size()) != c) {
      return absl::InvalidArgumentError(
          absl::StrCat("mean has ", mean_.size(), " values but the image has ", c, " channels"));
    }
    if (std_.size() != 1 && static_cast<int64_t>(std_.size()) != c) {
      return absl::InvalidArgumentError(
          absl::StrCat("std has ", std_.size(), " values but the image has ", c, " channels"));
    }
    const DType dtype = f16_ ? DType::kF16 : DType::kF32;
    Tensor out = ctx.NewOutput(image_.index, dtype, chw_ ? Shape{c, h, w} : Shape{h, w, c});
    const int64_t pixels = h * w;
    // Where channel k of pixel i goes.
    const int64_t pixel_step = chw_ ? 1 : c;
    const int64_t channel_step = chw_ ? pixels : 1;
    if (in->dtype() == DType::kU8) {
      // (v / 255 - mean) / std, like torchvision's ToTensor followed by Normalize, as
      // v * scale + shift in float (normalize_kernel.h): RGB to f32 or f16 planes, the
      // standard pipelines' case, runs the vector kernel; the other layouts read a table per
      // channel of the same values.
      std::vector<float> scale(c), shift(c);
      for (int64_t k = 0; k < c; ++k) {
        scale[k] = static_cast<float>(1.0 / (255.0 * Std(k)));
        shift[k] = static_cast<float>(-Mean(k) / Std(k));
      }
      if (c == 3 && chw_) {
        if (f16_) {
          NormalizeRgbToHalfPlanes(in->raw(), pixels, scale.data(), shift.data(),
                                   out.mutable_data<uint16_t>());
        } else {
          NormalizeRgbToPlanes(in->raw(), pixels, scale.data(), shift.data(),
                               out.mutable_data<float>());
        }
        element.tensors[image_.index] = std::move(out);
        return absl::OkStatus();
      }
      std::vector<float> lut(static_cast<size_t>(256 * c));
      for (int64_t k = 0; k < c; ++k) {
        for (int v = 0; v < 256; ++v) {
          lut[k * 256 + v] = NormalizeValue(static_cast<uint8_t>(v), scale[k], shift[k]);
        }
      }
      if (f16_) {
        std::vector<uint16_t> half(lut.size());
        for (size_t i = 0; i < lut.size(); ++i) half[i] = FloatToHalf(lut[i]);
        Scatter(in->raw(), half.data(), out.mutable_data<uint16_t>(), pixels, c, pixel_step,
                channel_step);
      } else {
        Scatter(in->raw(), lut.data(), out.mutable_data<float>(), pixels, c, pixel_step,
                channel_step);
      }
    } else {
      const float* src = in->data<float>();
      std::vector<float> scale(c), shift(c);
      for (int64_t k = 0; k < c; ++k) {
        scale[k] = static_cast<float>(1.0 / Std(k));
        shift[k] = static_cast<float>(-Mean(k) / Std(k));
      }
      for (int64_t i = 0; i < pixels; ++i) {
        for (int64_t k = 0; k < c; ++k) {
          const float v = src[i * c + k] * scale[k] + shift[k];
          const int64_t at = i * pixel_step + k * channel_step;
          if (f16_) {
            out.mutable_data<uint16_t>()[at] = FloatToHalf(v);
          } else {
            out.mutable_data<float>()[at] = v;
          }
        }
      }
    }
    element.tensors[image_.index] = std::move(out);
    return absl::OkStatus();
  }

 private:
  double Mean(int64_t k) const { return mean_.size() == 1 ? mean_[0] : mean_[k]; }
  double Std(int64_t k) const { return std_.size() == 1 ? std_[0] : std_[k]; }

  // out[i * pixel_step + k * channel_step] = lut[k * 256 + in[i * c + k]].
  template <typename T>
  static void Scatter(const uint8_t* in, const T* lut, T* out, int64_t pixels, int64_t c,
                      int64_t pixel_step, int64_t channel_step) {
    if (c == 3 && channel_step != 1) {  // the hot path: RGB HWC -> CHW
      T* r = out;
      T* g = out + channel_step;
      T* b = out + 2 * channel_step;
      const T* lr = lut;
      const T* lg = lut + 256;
      const T* lb = lut + 512;
      for (int64_t i = 0; i < pixels; ++i) {
        r[i] = lr[in[3 * i]];
        g[i] = lg[in[3 * i + 1]];
        b[i] = lb[in[3 * i + 2]];
      }
      return;
    }
    for (int64_t i = 0; i < pixels; ++i) {
      for (int64_t k = 0; k < c; ++k) {
        out[i * pixel_step + k * channel_step] = lut[k * 256 + in[i * c + k]];
      }
    }
  }

  ImageField image_;
  std::vector<double> mean_;
  std::vector<double> std_;
  bool chw_;
  bool f16_;
};

Status CheckPerChannel(const Args& args, const std::string& name, int64_t channels) {
  const size_t n = args.FloatList(name).size();
  if (channels != kUnknownDim && n != 1 && static_cast<int64_t>(n) != channels) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected ", channels, " values (one per channel) or 1, got ", n));
  }
  return absl::OkStatus();
}

}  // namespace

OpDef ColorJitterOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "color_jitter", /*random=*/true,
      "torchvision's ColorJitter without hue: each factor is uniform in [max(0, 1 - x), 1 + x] "
      "and the adjustments run in a random order per sample. Brightness blends with black, "
      "contrast with the mean gray level, saturation with the gray image. 0 disables one.",
      {ImageFieldArg(),
       Arg("brightness", ArgType::kFloat)
           .Default(ArgValue(0.0))
           .Range(0, kMaxJitter)
           .Doc("brightness jitter"),
       Arg("contrast", ArgType::kFloat)
           .Default(ArgValue(0.0))
           .Range(0, kMaxJitter)
           .Doc("contrast jitter"),
       Arg("saturation", ArgType::kFloat)
           .Default(ArgValue(0.0))
           .Range(0, kMaxJitter)
           .Doc("saturation jitter (no effect on 1-channel images)")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(ImageField image,
                            RequireImage(input, args.String("field"), {DType::kU8}));
    return std::make_unique<ColorJitterOp>(&schema, args, input, input, image);
  };
  return def;
}

OpDef NormalizeOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "normalize", /*random=*/false,
      "(x - mean) / std per channel, written as floats in one pass; u8 input is first divided "
      "by 255 (torchvision's ToTensor + Normalize). CHW layout transposes to [C,H,W].",
      {ImageFieldArg(),
       Arg("mean", ArgType::kFloatList)
           .Range(-kMaxNormalize, kMaxNormalize)
           .Doc("per-channel mean (or one value for all)"),
       Arg("std", ArgType::kFloatList)
           .Range(0, kMaxNormalize)
           .Doc("per-channel std, > 0 (or one value for all)"),
       Arg("layout", ArgType::kString).Default("CHW").Choices({"CHW", "HWC"}).Doc("output layout"),
       Arg("dtype", ArgType::kString).Default("f32").Choices({"f32", "f16"}).Doc("output dtype")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(ImageField image,
                            RequireImage(input, args.String("field"), {DType::kU8, DType::kF32}));
    SLUICE_RETURN_IF_ERROR(CheckPerChannel(args, "mean", image.channels));
    SLUICE_RETURN_IF_ERROR(CheckPerChannel(args, "std", image.channels));
    for (double s : args.FloatList("std")) {
      if (!(s > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("std: every entry must be > 0, got ",
                                                       ArgValueToString(args.FloatList("std"))));
      }
    }
    FieldSpec spec = input.field(image.index);
    const Shape hwc = spec.shape;
    spec.dtype = args.String("dtype") == "f16" ? DType::kF16 : DType::kF32;
    if (args.String("layout") == "CHW") spec.shape = {hwc[2], hwc[0], hwc[1]};
    Schema output = input;
    output.Set(spec);
    return std::make_unique<NormalizeOp>(&schema, args, input, std::move(output), image);
  };
  return def;
}

}  // namespace sluice::ops
