// A strict RIFF/WAVE reader and writer, and the decode_wav op built on it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/escaping.h"
#include "sluice/ops/audio/audio_ops.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

constexpr uint16_t kFormatPcm = 1;
constexpr uint16_t kFormatFloat = 3;
constexpr uint16_t kFormatExtensible = 0xFFFE;

uint16_t U16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | (static_cast<uint8_t>(p[1]) << 8));
}
uint32_t U32(const char* p) {
  return static_cast<uint32_t>(U16(p)) | (static_cast<uint32_t>(U16(p + 2)) << 16);
}

void PutU16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xFF));
  s->push_back(static_cast<char>(v >> 8));
}
void PutU32(std::string* s, uint32_t v) {
  PutU16(s, static_cast<uint16_t>(v & 0xFFFF));
  PutU16(s, static_cast<uint16_t>(v >> 16));
}

// One sample at `p` in [-1, 1] (PCM divided by 2^(bits-1); powers of two, so exact up to
// float rounding of 32-bit values). One functor per format keeps the conversion loops tight.
struct LoadU8 {
  float operator()(const char* p) const {
    return (static_cast<float>(static_cast<uint8_t>(p[0])) - 128.0f) * (1.0f / 128);
  }
};
struct LoadI16 {
  float operator()(const char* p) const {
    int16_t v;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&v, p, 2);  // one load; lets the conversion loop vectorise
    } else {
      v = static_cast<int16_t>(U16(p));
    }
    return static_cast<float>(v) * (1.0f / 32768);
  }
};
struct LoadI24 {
  float operator()(const char* p) const {
    int32_t v = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint8_t>(p[0])) |
                                     (static_cast<uint32_t>(static_cast<uint8_t>(p[1])) << 8) |
                                     (static_cast<uint32_t>(static_cast<uint8_t>(p[2])) << 16));
    if (v & 0x800000) v -= 0x1000000;
    return static_cast<float>(v) * (1.0f / 8388608);
  }
};
struct LoadI32 {
  float operator()(const char* p) const {
    return static_cast<float>(static_cast<int32_t>(U32(p))) * (1.0f / 2147483648.0f);
  }
};
struct LoadF32 {
  float operator()(const char* p) const {
    const uint32_t bits = U32(p);
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
};

// Converts `frames` interleaved frames of `channels` samples of `Width` bytes into `out`;
// with `mix`, two channels are averaged into one. (The width is a template constant so that
// the loops have a fixed stride and vectorise.)
template <typename Load, int Width>
void Convert(const char* data, int64_t frames, int channels, bool mix, float* out) {
  const Load load;
  if (mix && channels == 2) {
    for (int64_t i = 0; i < frames; ++i) {
      const char* frame = data + i * 2 * Width;
      out[i] = 0.5f * (load(frame) + load(frame + Width));
    }
    return;
  }
  for (int64_t i = 0; i < frames * channels; ++i) out[i] = load(data + i * Width);
}

}  // namespace

StatusOr<WavAudio> ParseWav(std::string_view bytes, bool mono,
                            const std::function<int64_t(int64_t frames)>& frames_to_decode) {
  if (bytes.empty()) return absl::InvalidArgumentError("WAV data is empty (0 bytes)");
  if (bytes.size() < 12) {
    if (bytes.substr(0, std::min<size_t>(4, bytes.size())) ==
        std::string_view("RIFF").substr(0, std::min<size_t>(4, bytes.size()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("truncated WAV: ", bytes.size(), " bytes, shorter than the RIFF header"));
    }
    return absl::InvalidArgumentError("not a RIFF/WAVE file (no RIFF header)");
  }
  if (bytes.substr(0, 4) != "RIFF" || bytes.substr(8, 4) != "WAVE") {
    // Escaped: the bytes may be anything.
    return absl::InvalidArgumentError(absl::StrCat(
        "not a RIFF/WAVE file (starts with '", absl::CHexEscape(Av(bytes.substr(0, 4))), "...'",
        bytes.substr(0, 4) == "RIFF"
            ? absl::StrCat(", form '", absl::CHexEscape(Av(bytes.substr(8, 4))), "'")
            : "",
        ")"));
  }
  const uint64_t riff_end = 8 + static_cast<uint64_t>(U32(bytes.data() + 4));
  if (riff_end > bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("truncated WAV: the RIFF header declares ",
                                                   riff_end, " bytes, the data has ",
                                                   bytes.size()));
  }
  bool have_fmt = false;
  uint16_t format = 0, channels = 0, block_align = 0, bits = 0;
  uint32_t rate = 0;
  size_t pos = 12;
  while (true) {
    if (pos + 8 > riff_end) {
      return absl::InvalidArgumentError(have_fmt ? "truncated WAV: no 'data' chunk"
                                                 : "truncated WAV: no 'fmt ' chunk");
    }
    const std::string_view id = bytes.substr(pos, 4);
    const uint64_t size = U32(bytes.data() + pos + 4);
    const size_t body = pos + 8;
    if (body + size > riff_end) {
      return absl::InvalidArgumentError(absl::StrCat("truncated WAV: chunk '",
                                                     absl::CHexEscape(Av(id)), "' declares ", size,
                                                     " bytes, ", riff_end - body, " remain"));
    }
    if (id == "fmt ") {
      if (size < 16) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad WAV header: 'fmt ' chunk of ", size, " bytes (needs 16)"));
      }
      const char* f = bytes.data() + body;
      format = U16(f);
      channels = U16(f + 2);
      rate = U32(f + 4);
      block_align = U16(f + 12);
      bits = U16(f + 14);
      if (format == kFormatExtensible) {
        if (size < 40) {
          return absl::InvalidArgumentError(
              "bad WAV header: WAVE_FORMAT_EXTENSIBLE without its 24-byte extension");
        }
        format = U16(f + 24);  // the first two bytes of the subformat GUID
      }
      have_fmt = true;
    } else if (id == "data") {
      if (!have_fmt) return absl::InvalidArgumentError("bad WAV header: 'data' before 'fmt '");
      break;
    }
    pos = body + size + (size & 1);  // chunks are padded to an even size
  }
  if (format != kFormatPcm && format != kFormatFloat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported WAV format tag ", format, " (decode_wav reads PCM (1) and IEEE float (3))"));
  }
  const bool bits_ok =
      format == kFormatFloat ? bits == 32 : (bits == 8 || bits == 16 || bits == 24 || bits == 32);
  if (!bits_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported WAV sample size: ", bits, "-bit ", format == kFormatFloat ? "float" : "PCM",
        " (decode_wav reads PCM 8/16/24/32-bit and 32-bit float)"));
  }
  if (channels != 1 && channels != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported WAV channel count ", channels, " (decode_wav reads 1 or 2)"));
  }
  if (rate == 0) return absl::InvalidArgumentError("bad WAV header: sample rate 0");
  const int bytes_per_sample = bits / 8;
  if (block_align != channels * bytes_per_sample) {
    return absl::InvalidArgumentError(absl::StrCat("bad WAV header: block align ", block_align,
                                                   " for ", channels, " channels of ", bits,
                                                   " bits"));
  }
  const uint64_t data_size = U32(bytes.data() + pos + 4);
  if (data_size % block_align != 0) {
    return absl::InvalidArgumentError(absl::StrCat("truncated WAV: data chunk of ", data_size,
                                                   " bytes is not a whole number of ", block_align,
                                                   "-byte frames"));
  }
  const int64_t all_frames = static_cast<int64_t>(data_size / block_align);
  const int64_t frames =
      frames_to_decode ? std::clamp<int64_t>(frames_to_decode(all_frames), 0, all_frames)
                       : all_frames;
  const char* data = bytes.data() + pos + 8;
  const int64_t out_channels = mono ? 1 : channels;
  WavAudio wav;
  wav.sample_rate = rate;
  wav.samples = Tensor::Empty(DType::kF32, {frames, out_channels});
  float* out = wav.samples.mutable_data<float>();
  if (format == kFormatFloat) {
    Convert<LoadF32, 4>(data, frames, channels, mono, out);
  } else if (bits == 8) {
    Convert<LoadU8, 1>(data, frames, channels, mono, out);
  } else if (bits == 16) {
    Convert<LoadI16, 2>(data, frames, channels, mono, out);
  } else if (bits == 24) {
    Convert<LoadI24, 3>(data, frames, channels, mono, out);
  } else {
    Convert<LoadI32, 4>(data, frames, channels, mono, out);
  }
  return wav;
}

std::string EncodeWav16(const Tensor& samples, int64_t sample_rate) {
  const int64_t frames = samples.dim(0);
  const int64_t channels = samples.rank() > 1 ? samples.dim(1) : 1;
  const uint32_t data_size = static_cast<uint32_t>(frames * channels * 2);
  std::string s;
  s.reserve(44 + data_size);
  s += "RIFF";
  PutU32(&s, 36 + data_size);
  s += "WAVEfmt ";
  PutU32(&s, 16);
  PutU16(&s, kFormatPcm);
  PutU16(&s, static_cast<uint16_t>(channels));
  PutU32(&s, static_cast<uint32_t>(sample_rate));
  PutU32(&s, static_cast<uint32_t>(sample_rate * channels * 2));
  PutU16(&s, static_cast<uint16_t>(channels * 2));
  PutU16(&s, 16);
  s += "data";
  PutU32(&s, data_size);
  const float* p = samples.data<float>();
  for (int64_t i = 0; i < frames * channels; ++i) {
    // The inverse of the reader's v / 32768, saturated at the top.
    const long q = std::clamp(std::lrint(static_cast<double>(p[i]) * 32768.0), -32768L, 32767L);
    PutU16(&s, static_cast<uint16_t>(static_cast<int16_t>(q)));
  }
  return s;
}

namespace {

class DecodeWavOp final : public Op {
 public:
  DecodeWavOp(const OpSchema* schema, Args args, Schema input, Schema output, int data, int audio,
              int rate)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        data_(data),
        audio_(audio),
        rate_(rate),
        mono_(this->args().Bool("mono")) {}

  // The op after it that keeps only a leading part of the audio (pad_or_trim on axis 0): then
  // only that part is converted.
  void SetScaleConsumer(const Op* consumer, OpContext consumer_ctx) override {
    // Only a consumer of the audio we write (not of another field) may cut it short.
    const auto& args = consumer->args().values();
    auto field = args.find("field");
    if (field == args.end() || !std::holds_alternative<std::string>(field->second) ||
        std::get<std::string>(field->second) != output_schema().field(audio_).name) {
      return;
    }
    consumer_ = consumer;
    consumer_ctx_ = consumer_ctx;
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, data_));
    std::function<int64_t(int64_t)> frames_to_decode;
    if (consumer_ != nullptr) {
      frames_to_decode = [&](int64_t frames) -> int64_t {
        const DecodeRequest r = consumer_->NeededInput(element, consumer_ctx_, frames, 1);
        return r.height > 0 ? std::min(frames, r.y + r.height) : frames;
      };
    }
    SLUICE_ASSIGN_OR_RETURN(WavAudio wav, ParseWav(in->bytes(), mono_, frames_to_decode));
    element.tensors.erase(element.tensors.begin() + data_);
    SetTensor(element, audio_, std::move(wav.samples));
    SetTensor(element, rate_, Tensor::Scalar(wav.sample_rate));
    return absl::OkStatus();
  }

 private:
  int data_;
  int audio_;
  int rate_;
  bool mono_;
  const Op* consumer_ = nullptr;  // set once at build time, before any Apply
  OpContext consumer_ctx_;
};

}  // namespace

OpDef DecodeWavOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "decode_wav", /*random=*/false,
      "Decodes a RIFF/WAVE file (PCM 8/16/24/32-bit or 32-bit float, 1 or 2 channels) into "
      "`audio`: f32[samples, channels] in [-1, 1], and `sample_rate`: i64[]. Truncated data, "
      "a wrong header or another format is an error that says which.",
      {Arg("field", ArgType::kString).Default("data").Doc("the bytes field to decode (removed)"),
       Arg("mono", ArgType::kBool)
           .Default(ArgValue(false))
           .Doc("average the channels into one (output f32[samples, 1])")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    const std::string& field = args.String("field");
    SLUICE_ASSIGN_OR_RETURN(int data, RequireField(input, field, {DType::kBytes}, 1, "bytes[?]"));
    (void)data;
    Schema output = input;
    output.Remove(field);
    const int audio = output.Set(
        FieldSpec{"audio", DType::kF32, {kUnknownDim, args.Bool("mono") ? 1 : kUnknownDim}});
    const int rate = output.Set(FieldSpec{"sample_rate", DType::kI64, {}});
    return std::make_unique<DecodeWavOp>(&schema, args, input, std::move(output),
                                         input.IndexOf(field), audio, rate);
  };
  return def;
}

}  // namespace sluice::ops
