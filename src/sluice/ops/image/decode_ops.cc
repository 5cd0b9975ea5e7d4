// decode_jpeg, decode_png, decode_image: encoded bytes -> u8[H, W, C] image.
//
// The JPEG path can decode less than the whole image: at build time the pipeline hands the
// decoder the first scale-consuming op after it (random_resized_crop, resize), and for each
// sample the decoder asks that op which region it will read and how small it may be, then
// lets libjpeg scale the DCT and skip the rows and columns outside the region. crop_box is a
// consumer too: it asks for its box's region, at the scale the resize after it allows.
#include <algorithm>

#include "sluice/ops/image/codecs.h"
#include "sluice/ops/image/image_ops.h"
#include "sluice/ops/image/image_util.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

enum class DecodeKind { kJpeg, kPng, kAny };

std::string FirstBytes(std::string_view data) {
  std::string out;
  for (size_t i = 0; i < data.size() && i < 4; ++i) {
    absl::StrAppend(&out, i ? " " : "",
                    absl::Hex(static_cast<unsigned char>(data[i]), absl::kZeroPad2));
  }
  return out;
}

// A region that covers `r` and its mirror images (left-right and top-bottom), so that flips
// applied between the decoder and the consumer cannot move the crop out of what was decoded.
DecodeRequest MirrorHull(DecodeRequest r, int64_t full_height, int64_t full_width) {
  if (r.width <= 0) return r;
  int64_t x0 = std::min(r.x, full_width - r.x - r.width);
  int64_t y0 = std::min(r.y, full_height - r.y - r.height);
  r.width = std::max(r.x + r.width, full_width - r.x) - x0;
  r.height = std::max(r.y + r.height, full_height - r.y) - y0;
  r.x = std::max<int64_t>(0, x0);
  r.y = std::max<int64_t>(0, y0);
  return r;
}

class DecodeOp final : public Op {
 public:
  DecodeOp(const OpSchema* schema, Args args, Schema input, Schema output, DecodeKind kind,
           int data_index, int image_index, int channels, bool dct_scaling)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        kind_(kind),
        data_index_(data_index),
        image_index_(image_index),
        channels_(channels),
        dct_scaling_(dct_scaling) {}

  void SetScaleConsumer(const Op* consumer, OpContext consumer_ctx) override {
    // Only a consumer of the image we write (not of another field) may shape the decode.
    const auto& args = consumer->args().values();
    auto field = args.find("field");
    if (field == args.end() || !std::holds_alternative<std::string>(field->second) ||
        std::get<std::string>(field->second) != output_schema().field(image_index_).name) {
      return;
    }
    consumer_ = consumer;
    consumer_ctx_ = consumer_ctx;
    // The consumer reads elements in its own input-schema order (e.g. crop_box reads its box
    // field); at decode time the element is in ours. Map each of its fields to ours by name
    // (-1: not there yet, e.g. the image), so that it can be handed a view in its order.
    const Schema& theirs = consumer->input_schema();
    consumer_fields_.assign(static_cast<size_t>(theirs.size()), -1);
    bool identity = theirs.size() == input_schema().size();
    for (int i = 0; i < theirs.size(); ++i) {
      consumer_fields_[i] = input_schema().IndexOf(theirs.field(i).name);
      identity = identity && consumer_fields_[i] == i;
    }
    if (identity) consumer_fields_.clear();
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, data_index_));
    const std::string_view bytes = in->bytes();
    const std::string& field = input_schema().field(data_index_).name;
    if (bytes.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", field, "' is empty (0 bytes): nothing to decode"));
    }
    ImageFormat format = kind_ == DecodeKind::kJpeg  ? ImageFormat::kJpeg
                         : kind_ == DecodeKind::kPng ? ImageFormat::kPng
                                                     : SniffImageFormat(bytes);
    DecodedImage decoded;
    switch (format) {
      case ImageFormat::kJpeg: {
        SLUICE_ASSIGN_OR_RETURN(decoded, DecodeJpeg(bytes, channels_, Planner(element, ctx),
                                                    ctx.env->limits.max_image_pixels));
        break;
      }
      case ImageFormat::kPng: {
        SLUICE_ASSIGN_OR_RETURN(decoded.image,
                                DecodePng(bytes, channels_, ctx.env->limits.max_image_pixels));
        break;
      }
      case ImageFormat::kUnknown: {
        std::string_view other = NameOtherFormat(bytes);
        return absl::InvalidArgumentError(
            absl::StrCat("field '", field, "' is neither JPEG nor PNG (",
                         other.empty() ? absl::StrCat("first bytes ", FirstBytes(bytes))
                                       : absl::StrCat("looks like ", Av(other)),
                         "); decode_image reads JPEG and PNG"));
      }
    }
    element.decoded_region = decoded.region;
    element.tensors.erase(element.tensors.begin() + data_index_);
    SetTensor(element, image_index_, std::move(decoded.image));
    return absl::OkStatus();
  }

 private:
  DecodePlanner Planner(const Element& element, const OpContext& ctx) const {
    if (consumer_ == nullptr || !dct_scaling_) return nullptr;
    // Ops in between (only size-independent ones, e.g. flips) may mirror the image; the
    // consumer's region is then in mirrored coordinates, so decode the symmetric hull.
    const bool adjacent = consumer_ctx_.position == ctx.position + 1;
    return [this, &element, adjacent](int64_t full_height, int64_t full_width) {
      DecodeRequest r;
      if (consumer_fields_.empty()) {
        r = consumer_->NeededInput(element, consumer_ctx_, full_height, full_width);
      } else {
        Element view;
        view.id = element.id;
        view.origin = element.origin;
        view.tensors.reserve(consumer_fields_.size());
        for (int from : consumer_fields_) {
          view.tensors.push_back(from >= 0 && from < static_cast<int>(element.tensors.size())
                                     ? element.tensors[from]
                                     : Tensor());
        }
        r = consumer_->NeededInput(view, consumer_ctx_, full_height, full_width);
      }
      r.min_scale = std::clamp(r.min_scale, 1.0 / 8, 1.0);
      return adjacent ? r : MirrorHull(r, full_height, full_width);
    };
  }

  DecodeKind kind_;
  int data_index_;
  int image_index_;
  int channels_;
  bool dct_scaling_;
  const Op* consumer_ = nullptr;  // set once at build time, before any Apply
  OpContext consumer_ctx_;
  // consumer_fields_[i]: the index in our input of the consumer's input field i (-1: none);
  // empty when the two orders are the same.
  std::vector<int> consumer_fields_;
};

OpDef MakeDecodeDef(std::string name, DecodeKind kind, std::string doc) {
  std::vector<ArgSchema> args = {
      Arg("field", ArgType::kString).Default("data").Doc("the bytes field to decode (removed)"),
      Arg("channels", ArgType::kInt)
          .Default(ArgValue(int64_t{3}))
          .Range(1, 3)
          .Doc("1 (grayscale) or 3 (RGB)")};
  if (kind != DecodeKind::kPng) {
    args.push_back(Arg("dct_scaling", ArgType::kBool)
                       .Default(ArgValue(true))
                       .Doc("JPEG: decode at reduced size and only the region that the next "
                            "resize, random_resized_crop or crop_box reads"));
  }
  OpDef def;
  def.schema = MakeOpSchema(std::move(name), /*random=*/false, std::move(doc), std::move(args));
  def.factory = [kind](const OpSchema& schema, const Args& args,
                       const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    const int64_t channels = args.Int("channels");
    if (channels != 1 && channels != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("channels: expected 1 (gray) or 3 (RGB), got ", channels));
    }
    const std::string& field = args.String("field");
    SLUICE_ASSIGN_OR_RETURN(int data, RequireField(input, field, {DType::kBytes}, 1, "bytes[?]"));
    Schema output = input;
    output.Remove(field);
    int image = output.Set(ImageSpec("image", DType::kU8, kUnknownDim, kUnknownDim, channels));
    bool dct_scaling = kind != DecodeKind::kPng && args.Bool("dct_scaling");
    return std::make_unique<DecodeOp>(&schema, args, input, std::move(output), kind, data, image,
                                      static_cast<int>(channels), dct_scaling);
  };
  return def;
}

}  // namespace

OpDef DecodeJpegOpDef() {
  return MakeDecodeDef(
      "decode_jpeg", DecodeKind::kJpeg,
      "Decodes JPEG bytes (libjpeg-turbo) into `image` u8[H,W,C], removing the bytes field. "
      "Corrupt or truncated data is an error. With dct_scaling, a following resize, "
      "random_resized_crop or crop_box lets it decode at 1/8..8/8 size and only the region it "
      "reads.");
}

OpDef DecodePngOpDef() {
  return MakeDecodeDef("decode_png", DecodeKind::kPng,
                       "Decodes PNG bytes (libpng) into `image` u8[H,W,C], removing the bytes "
                       "field: palettes expanded, 16-bit rounded to 8, alpha dropped.");
}

OpDef DecodeImageOpDef() {
  return MakeDecodeDef("decode_image", DecodeKind::kAny,
                       "Decodes JPEG or PNG bytes, recognised by their magic bytes, like "
                       "decode_jpeg and decode_png; any other format is an error.");
}

}  // namespace sluice::ops
