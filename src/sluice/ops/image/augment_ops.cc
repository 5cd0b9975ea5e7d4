// rand_augment, read_box, crop_box, clip, and RegisterAugmentOps().
#include "sluice/ops/image/augment_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <sstream>

#include "sluice/ops/generic/generic_ops.h"
#include "sluice/ops/image/image_util.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

constexpr double kRadians = std::numbers::pi / 180.0;

// torch.linspace(lo, hi, 31)[bin] in float32, bit for bit as torch's CPU kernel computes it:
// the lower half in 8-wide blocks (base + k * step), the upper half as end - step * (30 - bin)
// with one rounding. One ulp matters: blends truncate to uint8.
double Linspace31(double lo, double hi, int bin) {
  const float start = static_cast<float>(lo), end = static_cast<float>(hi);
  const float step = (end - start) / 30.0f;
  if (bin < 16) {
    const int block = bin / 8 * 8;
    const float base = start + step * static_cast<float>(block);
    return base + static_cast<float>(bin - block) * step;
  }
  return std::fma(-step, static_cast<float>(30 - bin), end);
}

uint8_t TruncU8(float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f)); }

// torchvision's _blend: (ratio * a + (1 - ratio) * b) in float32, clamped, truncated.
struct Blend {
  explicit Blend(double ratio)
      : r1(static_cast<float>(ratio)), r2(static_cast<float>(1.0 - ratio)) {}
  uint8_t operator()(float a, float b) const { return TruncU8(r1 * a + r2 * b); }
  float r1, r2;
};

// rgb_to_grayscale on uint8: float32 weights, truncated.
uint8_t GrayU8(const uint8_t* px) {
  return static_cast<uint8_t>(0.2989f * px[0] + 0.587f * px[1] + 0.114f * px[2]);
}

// The gray image (one value per pixel) of a 1- or 3-channel image.
std::vector<uint8_t> GrayImage(const Tensor& image) {
  const int64_t pixels = image.dim(0) * image.dim(1), c = image.dim(2);
  const uint8_t* p = image.raw();
  std::vector<uint8_t> gray(static_cast<size_t>(pixels));
  for (int64_t i = 0; i < pixels; ++i) gray[i] = c >= 3 ? GrayU8(p + i * c) : p[i * c];
  return gray;
}

// torchvision's _get_inverse_affine_matrix with scale 1, in coordinates centred on the image.
std::array<double, 6> InverseAffine(double cx, double cy, double angle, double tx, double ty,
                                    double shear_x, double shear_y) {
  const double rot = angle * kRadians, sx = shear_x * kRadians, sy = shear_y * kRadians;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  std::array<double, 6> m = {d, -b, 0.0, -c, a, 0.0};
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
  return m;
}

// F.affine / F.rotate on a tensor: nearest-neighbour sampling of an inverse map given in
// centred coordinates (grid_sample, align_corners=False, zero padding), in float32 like the
// affine grid torchvision builds.
Tensor Warp(const Tensor& image, const std::array<double, 6>& m) {
  const int64_t h = image.dim(0), w = image.dim(1), c = image.dim(2);
  Tensor out = Tensor::Zeros(DType::kU8, image.shape());
  const uint8_t* src = image.raw();
  uint8_t* dst = out.mutable_raw();
  const float m0 = static_cast<float>(m[0]), m1 = static_cast<float>(m[1]),
              m2 = static_cast<float>(m[2]), m3 = static_cast<float>(m[3]),
              m4 = static_cast<float>(m[4]), m5 = static_cast<float>(m[5]);
  const float half_w = 0.5f * static_cast<float>(w), half_h = 0.5f * static_cast<float>(h);
  for (int64_t y = 0; y < h; ++y) {
    const float yc = static_cast<float>(y) + 0.5f - half_h;
    for (int64_t x = 0; x < w; ++x) {
      const float xc = static_cast<float>(x) + 0.5f - half_w;
      // Normalised as grid_sample sees it, then back to pixel indices.
      const float gx = (m0 * xc + m1 * yc + m2) / half_w;
      const float gy = (m3 * xc + m4 * yc + m5) / half_h;
      const float px = ((gx + 1) * static_cast<float>(w) - 1) / 2;
      const float py = ((gy + 1) * static_cast<float>(h) - 1) / 2;
      const int64_t ix = static_cast<int64_t>(std::nearbyint(px));
      const int64_t iy = static_cast<int64_t>(std::nearbyint(py));
      if (ix < 0 || ix >= w || iy < 0 || iy >= h) continue;
      std::memcpy(dst + (y * w + x) * c, src + (iy * w + ix) * c, static_cast<size_t>(c));
    }
  }
  return out;
}

Tensor MapValues(const Tensor& image, const std::array<uint8_t, 256>& lut) {
  Tensor out = Tensor::Empty(DType::kU8, image.shape());
  const uint8_t* p = image.raw();
  uint8_t* o = out.mutable_raw();
  for (int64_t i = 0; i < image.num_elements(); ++i) o[i] = lut[p[i]];
  return out;
}

// Blends each pixel with a per-pixel gray value (saturation) or a constant (contrast).
Tensor BlendWith(const Tensor& image, double factor, const std::vector<uint8_t>* gray,
                 float constant) {
  const Blend blend(factor);
  const int64_t pixels = image.dim(0) * image.dim(1), c = image.dim(2);
  Tensor out = Tensor::Empty(DType::kU8, image.shape());
  const uint8_t* p = image.raw();
  uint8_t* o = out.mutable_raw();
  for (int64_t i = 0; i < pixels; ++i) {
    const float other = gray != nullptr ? static_cast<float>((*gray)[i]) : constant;
    for (int64_t k = 0; k < c; ++k) o[i * c + k] = blend(p[i * c + k], other);
  }
  return out;
}

Tensor Sharpness(const Tensor& image, double factor) {
  const int64_t h = image.dim(0), w = image.dim(1), c = image.dim(2);
  if (h <= 2 || w <= 2) return image.Clone();
  // The "degenerate" image: a 3x3 smoothing (centre weight 5, others 1, over 13), rounded,
  // on the interior; the border keeps its pixels.
  const float edge = 1.0f / 13.0f, centre = 5.0f / 13.0f;
  const uint8_t* p = image.raw();
  Tensor out = Tensor::Empty(DType::kU8, image.shape());
  uint8_t* o = out.mutable_raw();
  const Blend blend(factor);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      if (y == 0 || x == 0 || y == h - 1 || x == w - 1) {
        // The border blends with itself, which float32 may still move by one.
        for (int64_t k = 0; k < c; ++k) {
          const int64_t at = (y * w + x) * c + k;
          o[at] = blend(p[at], p[at]);
        }
        continue;
      }
      for (int64_t k = 0; k < c; ++k) {
        float sum = 0;
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            const float weight = dx == 0 && dy == 0 ? centre : edge;
            sum += weight * p[((y + dy) * w + (x + dx)) * c + k];
          }
        }
        const float blurred = std::nearbyint(sum);
        const int64_t at = (y * w + x) * c + k;
        o[at] = blend(p[at], blurred);
      }
    }
  }
  return out;
}

Tensor AutoContrast(const Tensor& image) {
  const int64_t pixels = image.dim(0) * image.dim(1), c = image.dim(2);
  const uint8_t* p = image.raw();
  Tensor out = Tensor::Empty(DType::kU8, image.shape());
  uint8_t* o = out.mutable_raw();
  for (int64_t k = 0; k < c; ++k) {
    uint8_t lo = 255, hi = 0;
    for (int64_t i = 0; i < pixels; ++i) {
      lo = std::min(lo, p[i * c + k]);
      hi = std::max(hi, p[i * c + k]);
    }
    float minimum = lo, scale = 1.0f;
    if (hi > lo) {
      scale = 255.0f / static_cast<float>(hi - lo);
    } else {
      minimum = 0;
    }
    for (int64_t i = 0; i < pixels; ++i) {
      o[i * c + k] = TruncU8((static_cast<float>(p[i * c + k]) - minimum) * scale);
    }
  }
  return out;
}

Tensor Equalize(const Tensor& image) {
  const int64_t pixels = image.dim(0) * image.dim(1), c = image.dim(2);
  const uint8_t* p = image.raw();
  Tensor out = image.Clone();
  uint8_t* o = out.mutable_raw();
  for (int64_t k = 0; k < c; ++k) {
    std::array<int64_t, 256> hist{};
    for (int64_t i = 0; i < pixels; ++i) ++hist[p[i * c + k]];
    // step: the count of all nonzero bins but the last, over 255.
    int64_t last = 255;
    while (last > 0 && hist[last] == 0) --last;
    int64_t total = 0;
    for (int v = 0; v < last; ++v) total += hist[v];
    const int64_t step = total / 255;
    if (step == 0) continue;
    std::array<uint8_t, 256> lut;
    int64_t cumulative = 0;
    for (int v = 0; v < 256; ++v) {
      lut[v] = static_cast<uint8_t>(std::clamp<int64_t>((cumulative + step / 2) / step, 0, 255));
      cumulative += hist[v];
    }
    for (int64_t i = 0; i < pixels; ++i) o[i * c + k] = lut[p[i * c + k]];
  }
  return out;
}

}  // namespace

std::string_view AugmentOpName(AugmentOp op) {
  static constexpr std::array<std::string_view, kNumAugmentOps> kNames = {
      "Identity", "ShearX",   "ShearY",    "TranslateX", "TranslateY", "Rotate",       "Brightness",
      "Color",    "Contrast", "Sharpness", "Posterize",  "Solarize",   "AutoContrast", "Equalize"};
  return kNames[static_cast<int>(op)];
}

bool AugmentSigned(AugmentOp op) {
  switch (op) {
    case AugmentOp::kShearX:
    case AugmentOp::kShearY:
    case AugmentOp::kTranslateX:
    case AugmentOp::kTranslateY:
    case AugmentOp::kRotate:
    case AugmentOp::kBrightness:
    case AugmentOp::kColor:
    case AugmentOp::kContrast:
    case AugmentOp::kSharpness:
      return true;
    default:
      return false;
  }
}

double AugmentMagnitude(AugmentOp op, int bin, int64_t height, int64_t width) {
  switch (op) {
    case AugmentOp::kShearX:
    case AugmentOp::kShearY:
      return Linspace31(0.0, 0.3, bin);
    case AugmentOp::kTranslateX:
      return Linspace31(0.0, 150.0 / 331.0 * static_cast<double>(width), bin);
    case AugmentOp::kTranslateY:
      return Linspace31(0.0, 150.0 / 331.0 * static_cast<double>(height), bin);
    case AugmentOp::kRotate:
      return Linspace31(0.0, 30.0, bin);
    case AugmentOp::kBrightness:
    case AugmentOp::kColor:
    case AugmentOp::kContrast:
    case AugmentOp::kSharpness:
      return Linspace31(0.0, 0.9, bin);
    case AugmentOp::kPosterize:
      return 8 - std::nearbyint(bin / 7.5);
    case AugmentOp::kSolarize:
      return Linspace31(255.0, 0.0, bin);
    default:
      return 0.0;
  }
}

Tensor ApplyAugmentOp(const Tensor& image, AugmentOp op, double magnitude) {
  const int64_t h = image.dim(0), w = image.dim(1);
  switch (op) {
    case AugmentOp::kIdentity:
      return image;
    case AugmentOp::kShearX:
      return Warp(image,
                  InverseAffine(-0.5 * w, -0.5 * h, 0, 0, 0, std::atan(magnitude) / kRadians, 0));
    case AugmentOp::kShearY:
      return Warp(image,
                  InverseAffine(-0.5 * w, -0.5 * h, 0, 0, 0, 0, std::atan(magnitude) / kRadians));
    case AugmentOp::kTranslateX:
      return Warp(image, InverseAffine(0, 0, 0, std::trunc(magnitude), 0, 0, 0));
    case AugmentOp::kTranslateY:
      return Warp(image, InverseAffine(0, 0, 0, 0, std::trunc(magnitude), 0, 0));
    case AugmentOp::kRotate:
      return Warp(image, InverseAffine(0, 0, -magnitude, 0, 0, 0, 0));
    case AugmentOp::kBrightness:
      return BlendWith(image, 1.0 + magnitude, nullptr, 0.0f);
    case AugmentOp::kColor: {
      if (image.dim(2) < 3) return image;
      const std::vector<uint8_t> gray = GrayImage(image);
      return BlendWith(image, 1.0 + magnitude, &gray, 0.0f);
    }
    case AugmentOp::kContrast: {
      const std::vector<uint8_t> gray = GrayImage(image);
      double sum = 0;
      for (uint8_t g : gray) sum += g;
      const float mean = static_cast<float>(sum / static_cast<double>(gray.size()));
      return BlendWith(image, 1.0 + magnitude, nullptr, mean);
    }
    case AugmentOp::kSharpness:
      return Sharpness(image, 1.0 + magnitude);
    case AugmentOp::kPosterize: {
      const int bits = static_cast<int>(magnitude);
      const uint8_t mask = static_cast<uint8_t>(0xFF << (8 - bits));
      std::array<uint8_t, 256> lut;
      for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v & mask);
      return MapValues(image, lut);
    }
    case AugmentOp::kSolarize: {
      std::array<uint8_t, 256> lut;
      for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v >= magnitude ? 255 - v : v);
      return MapValues(image, lut);
    }
    case AugmentOp::kAutoContrast:
      return AutoContrast(image);
    case AugmentOp::kEqualize:
      return Equalize(image);
  }
  return image;
}

std::vector<AugmentChoice> DrawAugmentChoices(Rng& rng, int num_ops) {
  std::vector<AugmentChoice> choices;
  for (int i = 0; i < num_ops; ++i) {
    AugmentChoice choice;
    choice.op = static_cast<AugmentOp>(rng.UniformInt(0, kNumAugmentOps - 1));
    if (AugmentSigned(choice.op)) choice.negate = rng.Bernoulli(0.5);
    choices.push_back(choice);
  }
  return choices;
}

namespace {

// --- rand_augment ---------------------------------------------------------------------------

class RandAugmentOp final : public Op {
 public:
  RandAugmentOp(const OpSchema* schema, Args args, Schema input, ImageField image)
      : Op(schema, std::move(args), input, input),
        image_(image),
        num_ops_(static_cast<int>(this->args().Int("num_ops"))),
        bin_(static_cast<int>(this->args().Int("magnitude"))) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, input_schema().field(image_.index).name));
    if (in->dim(2) != 1 && in->dim(2) != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("rand_augment needs 1 or 3 channels, got ", TypeString(*in)));
    }
    Rng rng = ctx.MakeRng(element);
    Tensor image = *in;
    for (const AugmentChoice& choice : DrawAugmentChoices(rng, num_ops_)) {
      double magnitude = AugmentMagnitude(choice.op, bin_, image.dim(0), image.dim(1));
      if (choice.negate) magnitude = -magnitude;
      image = ApplyAugmentOp(image, choice.op, magnitude);
    }
    element.tensors[image_.index] = std::move(image);
    return absl::OkStatus();
  }

 private:
  ImageField image_;
  int num_ops_;
  int bin_;
};

// --- crop_box -------------------------------------------------------------------------------

// The box [x0, y0, x1, y1) in whole pixels, clipped to a height x width image; false when
// `box` does not hold 4 values.
struct PixelBox {
  int64_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

bool BoxValues(const Tensor& box, double v[4]) {
  if (box.num_elements() != 4 || (box.dtype() != DType::kI64 && box.dtype() != DType::kF32)) {
    return false;
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = box.dtype() == DType::kI64 ? static_cast<double>(box.data<int64_t>()[i])
                                      : static_cast<double>(box.data<float>()[i]);
  }
  return true;
}

// Fractional boxes grow to whole pixels; the box is clipped to the image.
PixelBox ClipBox(const double v[4], int64_t h, int64_t w) {
  PixelBox b;
  b.x0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(v[0])), 0, w);
  b.y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(v[1])), 0, h);
  b.x1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(v[2])), 0, w);
  b.y1 = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(v[3])), 0, h);
  return b;
}

class CropBoxOp final : public Op {
 public:
  CropBoxOp(const OpSchema* schema, Args args, Schema input, Schema output, ImageField image,
            int box)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        image_(image),
        box_(box) {}

  // A decoder before it decodes only the box's region, at the smallest scale that the
  // resampling op right after it (if any) allows for the box; without one, at full scale.
  Geometry geometry() const override { return Geometry::kScaleConsumer; }

  void SetScaleConsumer(const Op* consumer, OpContext consumer_ctx) override {
    consumer_ = consumer;
    consumer_ctx_ = consumer_ctx;
  }

  DecodeRequest NeededInput(const Element& element, const OpContext& ctx, int64_t full_height,
                            int64_t full_width) const override {
    double v[4];
    if (box_ >= static_cast<int>(element.tensors.size()) ||
        !BoxValues(element.tensors[box_], v)) {
      return DecodeRequest{};  // Apply reports the bad box
    }
    const PixelBox b = ClipBox(v, full_height, full_width);
    if (b.x1 <= b.x0 || b.y1 <= b.y0) return DecodeRequest{};
    DecodeRequest r;
    r.x = b.x0;
    r.y = b.y0;
    r.width = b.x1 - b.x0;
    r.height = b.y1 - b.y0;
    if (consumer_ != nullptr) {
      // The consumer sees the crop as its whole input: its scale applies to the box. (Only
      // the scale: a consumer that reads a sub-region of the crop still gets all of it.)
      r.min_scale = std::clamp(
          consumer_->NeededInput(element, consumer_ctx_, r.height, r.width).min_scale, 0.0, 1.0);
    }
    return r;
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, image_.index));
    SLUICE_ASSIGN_OR_RETURN(const Tensor* box, InputTensor(*this, element, box_));
    SLUICE_RETURN_IF_ERROR(CheckNotEmpty(*in, input_schema().field(image_.index).name));
    double v[4];
    if (!BoxValues(*box, v)) {
      return absl::InvalidArgumentError(absl::StrCat("box field '", input_schema().field(box_).name,
                                                     "' must hold 4 values, got ",
                                                     TypeString(*box)));
    }
    const int64_t h = in->dim(0), w = in->dim(1), c = in->dim(2);
    // The box is in full-resolution pixels. When the decoder produced only a region, maybe
    // at reduced scale, the box is mapped into the decoded pixels.
    const ImageRegion region = element.decoded_region;
    const bool partial = !region.empty() && region.width > 0 && region.height > 0;
    const int64_t full_h = partial ? region.full_height : h;
    const int64_t full_w = partial ? region.full_width : w;
    PixelBox b = ClipBox(v, full_h, full_w);
    if (b.x1 <= b.x0 || b.y1 <= b.y0) {
      return absl::InvalidArgumentError(absl::StrCat("box [", v[0], ", ", v[1], ", ", v[2], ", ",
                                                     v[3], "] has no pixels inside the ", full_w,
                                                     "x", full_h, " image"));
    }
    if (partial) {
      const double sx = static_cast<double>(w) / region.width;
      const double sy = static_cast<double>(h) / region.height;
      b.x0 = std::clamp<int64_t>(std::lround((b.x0 - region.x) * sx), 0, w - 1);
      b.x1 = std::clamp<int64_t>(std::lround((b.x1 - region.x) * sx), b.x0 + 1, w);
      b.y0 = std::clamp<int64_t>(std::lround((b.y0 - region.y) * sy), 0, h - 1);
      b.y1 = std::clamp<int64_t>(std::lround((b.y1 - region.y) * sy), b.y0 + 1, h);
    }
    const size_t item = DTypeSize(in->dtype());
    Tensor out = Tensor::Empty(in->dtype(), {b.y1 - b.y0, b.x1 - b.x0, c});
    const size_t row = static_cast<size_t>((b.x1 - b.x0) * c) * item;
    for (int64_t y = b.y0; y < b.y1; ++y) {
      std::memcpy(out.mutable_raw() + static_cast<size_t>(y - b.y0) * row,
                  in->raw() + static_cast<size_t>((y * w + b.x0) * c) * item, row);
    }
    element.decoded_region = ImageRegion{};
    element.tensors[image_.index] = std::move(out);
    return absl::OkStatus();
  }

 private:
  ImageField image_;
  int box_;
  const Op* consumer_ = nullptr;  // set once at build time, before any Apply
  OpContext consumer_ctx_;
};

// --- read_box -----------------------------------------------------------------------------

class ReadBoxOp final : public Op {
 public:
  ReadBoxOp(const OpSchema* schema, Args args, Schema input, Schema output, int path, int box)
      : Op(schema, std::move(args), std::move(input), std::move(output)), path_(path), box_(box) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, path_));
    if (in->num_elements() == 0) return absl::InvalidArgumentError("path is empty");
    std::filesystem::path sidecar(std::string(in->bytes()));
    sidecar.replace_extension(args().String("extension"));
    // A sidecar is four integers: anything over kMaxSidecarBytes is not one.
    constexpr int64_t kMaxSidecarBytes = 4096;
    StatusOr<Tensor> bytes = ctx.env->storage->ReadFile(
        sidecar.string(), std::min(kMaxSidecarBytes, ctx.env->limits.max_file_bytes));
    if (!bytes.ok()) {
      return Status(bytes.status().code(),
                    absl::StrCat("box file: ", bytes.status().message()));
    }
    std::istringstream text{std::string(bytes->bytes())};
    Tensor box = Tensor::Empty(DType::kI64, {4});
    int64_t* v = box.mutable_data<int64_t>();
    std::string rest;
    if (!(text >> v[0] >> v[1] >> v[2] >> v[3]) || (text >> rest)) {
      return absl::InvalidArgumentError(
          absl::StrCat("box file ", sidecar.string(), " must hold four integers \"x0 y0 x1 y1\""));
    }
    SetTensor(element, box_, std::move(box));
    return absl::OkStatus();
  }

 private:
  int path_;
  int box_;
};

// --- clip -----------------------------------------------------------------------------------

class ClipOp final : public Op {
 public:
  ClipOp(const OpSchema* schema, Args args, Schema input, int field)
      : Op(schema, std::move(args), input, input),
        field_(field),
        lo_(static_cast<float>(this->args().Float("min"))),
        hi_(static_cast<float>(this->args().Float("max"))) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, field_));
    Tensor out = Tensor::Empty(DType::kF32, in->shape());
    const float* x = in->data<float>();
    float* o = out.mutable_data<float>();
    // Two selects, which vectorise, instead of std::clamp; the same result for every value
    // (a NaN passes through either way).
    const int64_t n = in->num_elements();
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i] < lo_ ? lo_ : x[i];
      o[i] = v > hi_ ? hi_ : v;
    }
    element.tensors[field_] = std::move(out);
    return absl::OkStatus();
  }

 private:
  int field_;
  float lo_;
  float hi_;
};

}  // namespace

OpDef RandAugmentOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "rand_augment", /*random=*/true,
      "RandAugment (torchvision's RandAugment with num_magnitude_bins=31): `num_ops` "
      "operations drawn uniformly from 14 (identity, shear x/y, translate x/y, rotate, "
      "brightness, color, contrast, sharpness, posterize, solarize, autocontrast, equalize), "
      "each at `magnitude` with a random sign where the operation has one.",
      {ImageFieldArg(),
       Arg("num_ops", ArgType::kInt)
           .Default(ArgValue(int64_t{2}))
           .Range(0, 14)
           .Doc("operations applied in sequence"),
       Arg("magnitude", ArgType::kInt)
           .Default(ArgValue(int64_t{9}))
           .Range(0, 30)
           .Doc("strength bin, 0 (none) to 30 (strongest)")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(ImageField image,
                            RequireImage(input, args.String("field"), {DType::kU8}));
    if (image.channels != kUnknownDim && image.channels != 1 && image.channels != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("rand_augment needs field '", args.String("field"),
                       "' with 1 or 3 channels, got ", TypeString(input.field(image.index))));
    }
    return std::make_unique<RandAugmentOp>(&schema, args, input, image);
  };
  return def;
}

OpDef CropBoxOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "crop_box", /*random=*/false,
      "Crops an image to the box [x0, y0, x1, y1] (pixels, x1 and y1 exclusive) read from a "
      "per-sample field, e.g. a bounding-box sidecar. Fractional boxes grow to whole pixels; "
      "the box is clipped to the image, and a box with no pixels inside is an error.",
      {ImageFieldArg(),
       Arg("box_field", ArgType::kString).Default("box").Doc("the i64[4] or f32[4] box field")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(ImageField image,
                            RequireImage(input, args.String("field"), {DType::kU8, DType::kF32}));
    SLUICE_ASSIGN_OR_RETURN(
        int box, RequireField(input, args.String("box_field"), {DType::kI64, DType::kF32}, 1,
                              "i64[4] or f32[4]"));
    const int64_t n = input.field(box).shape[0];
    if (n != kUnknownDim && n != 4) {
      return absl::InvalidArgumentError(absl::StrCat("needs field '", args.String("box_field"),
                                                     "' as i64[4] or f32[4], got ",
                                                     TypeString(input.field(box))));
    }
    FieldSpec spec = input.field(image.index);
    spec.shape = {kUnknownDim, kUnknownDim, spec.shape[2]};
    Schema output = input;
    output.Set(spec);
    return std::make_unique<CropBoxOp>(&schema, args, input, std::move(output), image, box);
  };
  return def;
}

OpDef ClipOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "clip", /*random=*/false, "Clamps every value of an f32 field to [min, max].",
      {Arg("field", ArgType::kString).Default("image").Doc("the f32 field"),
       Arg("min", ArgType::kFloat).Range(-kMaxArgValue, kMaxArgValue).Doc("lower bound"),
       Arg("max", ArgType::kFloat).Range(-kMaxArgValue, kMaxArgValue).Doc("upper bound, >= min")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    if (!(args.Float("min") <= args.Float("max"))) {
      return absl::InvalidArgumentError(
          absl::StrCat("max: must be >= min (", args.Float("min"), "), got ", args.Float("max")));
    }
    SLUICE_ASSIGN_OR_RETURN(int index,
                            RequireField(input, args.String("field"), {DType::kF32}, -1, "f32"));
    return std::make_unique<ClipOp>(&schema, args, input, index);
  };
  return def;
}

OpDef ReadBoxOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "read_box", /*random=*/false,
      "Reads a bounding-box sidecar: the file named like the sample's path with another "
      "extension (img_000001.jpg -> img_000001.box), holding \"x0 y0 x1 y1\" as integers, "
      "into an i64[4] field.",
      {Arg("field", ArgType::kString).Default("path").Doc("the bytes field with the file name"),
       Arg("output", ArgType::kString).Default("box").Doc("the i64[4] field to write"),
       Arg("extension", ArgType::kString).Default(".box").Doc("the sidecar's extension")});
  def.schema.reads_files = true;
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(
        int path, RequireField(input, args.String("field"), {DType::kBytes}, 1, "bytes[?]"));
    Schema output = input;
    const int box = output.Set(FieldSpec{args.String("output"), DType::kI64, {4}});
    if (box == path) {
      return absl::InvalidArgumentError("output: must differ from field");
    }
    return std::make_unique<ReadBoxOp>(&schema, args, input, std::move(output), path, box);
  };
  return def;
}

void RegisterAugmentOps(Registry* registry) {
  CheckRegistered(registry->Register(ReadBoxOpDef()));
  CheckRegistered(registry->Register(RandAugmentOpDef()));
  CheckRegistered(registry->Register(CropBoxOpDef()));
  CheckRegistered(registry->Register(ClipOpDef()));
}

}  // namespace sluice::ops
