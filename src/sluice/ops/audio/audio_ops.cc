// resample, add_noise, spectrogram, mel, log, rfft, normalize_features, pad_or_trim, and
// RegisterAudioOps().
#include "sluice/ops/audio/audio_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "sluice/ops/audio/fast_math.h"
#include "sluice/ops/generic/generic_ops.h"
#include "sluice/ops/generic/numeric.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

// A mono copy of a signal tensor: f32[n] as is, f32[n, c] averaged over its channels.
std::vector<float> MonoSignal(const Tensor& t) {
  const int64_t n = t.dim(0);
  const int64_t c = t.rank() == 2 ? t.dim(1) : 1;
  const float* p = t.data<float>();
  if (c == 1) return std::vector<float>(p, p + n);
  std::vector<float> mono(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += p[i * c + k];
    mono[i] = sum / static_cast<float>(c);
  }
  return mono;
}

// The samples of a signal tensor as one mono channel: the tensor's own memory when it has one
// channel, else the channel average written to `*storage`.
const float* MonoView(const Tensor& t, std::vector<float>* storage) {
  if (t.rank() == 1 || t.dim(1) == 1) return t.data<float>();
  *storage = MonoSignal(t);
  return storage->data();
}

// True when `consumer` reads the field named `name` (its `field` argument).
bool ReadsField(const Op& consumer, const std::string& name) {
  const auto& args = consumer.args().values();
  auto field = args.find("field");
  return field != args.end() && std::holds_alternative<std::string>(field->second) &&
         std::get<std::string>(field->second) == name;
}

// A signal field: f32[samples] or f32[samples, channels].
StatusOr<int> RequireSignal(const Schema& input, const std::string& name) {
  SLUICE_ASSIGN_OR_RETURN(int index, RequireField(input, name, {DType::kF32}, -1,
                                                  "f32[samples] or f32[samples, channels]"));
  const int rank = input.field(index).rank();
  if (rank != 1 && rank != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("needs field '", name, "' as f32[samples] or f32[samples, channels], got ",
                     TypeString(input.field(index))));
  }
  return index;
}

Status CheckNotEmptySignal(const Tensor& t, const std::string& name) {
  if (t.num_elements() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", name, "' is empty (", TypeString(t), "): no samples"));
  }
  return absl::OkStatus();
}

// Output schema where `output` replaces `field` (removed unless they are the same name).
// Returns the index of the output field in `*schema`.
int ReplaceField(Schema* schema, const std::string& field, FieldSpec spec) {
  if (spec.name != field) schema->Remove(field);
  return schema->Set(std::move(spec));
}

// Stores `tensor` as the op's output, removing the input field when the names differ.
void StoreReplacing(Element& element, int in_index, int out_index, bool same, Tensor tensor) {
  if (!same) element.tensors.erase(element.tensors.begin() + in_index);
  SetTensor(element, out_index, std::move(tensor));
}

// --- resample -------------------------------------------------------------------------------

class ResampleOp final : public Op {
 public:
  ResampleOp(const OpSchema* schema, Args args, Schema input, int audio, int rate)
      : Op(schema, std::move(args), input, input),
        audio_(audio),
        rate_(rate),
        to_(this->args().Int("rate")) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, audio_));
    SLUICE_ASSIGN_OR_RETURN(const Tensor* rate, InputTensor(*this, element, rate_));
    const int64_t from = rate->scalar_int();
    if (from < 1) {
      return absl::InvalidArgumentError(absl::StrCat("sample rate ", from, " Hz is not valid"));
    }
    if (from == to_) return absl::OkStatus();
    element.tensors[audio_] = ResampleAudio(*in, from, to_);
    element.tensors[rate_] = Tensor::Scalar(to_);
    return absl::OkStatus();
  }

 private:
  int audio_;
  int rate_;
  int64_t to_;
};

// --- add_noise ------------------------------------------------------------------------------

class AddNoiseOp final : public Op {
 public:
  AddNoiseOp(const OpSchema* schema, Args args, Schema input, int audio)
      : Op(schema, std::move(args), input, input),
        audio_(audio),
        snr_db_(this->args().Float("snr_db")) {}

  // When the next op reads only the leading samples (rfft with a fixed n) and our output's
  // length is not fixed by the schema, only those samples get noise and are passed on; the
  // noise power still comes from the whole signal, and the samples kept are the same.
  void SetScaleConsumer(const Op* consumer, OpContext consumer_ctx) override {
    const FieldSpec& spec = input_schema().field(audio_);
    if (spec.rank() == 0 || spec.shape[0] != kUnknownDim || !ReadsField(*consumer, spec.name)) {
      return;
    }
    consumer_ = consumer;
    consumer_ctx_ = consumer_ctx;
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, audio_));
    const int64_t n = in->num_elements();
    if (n == 0) return absl::OkStatus();
    const float* p = in->data<float>();
    Shape out_shape = in->shape();
    if (consumer_ != nullptr) {
      const int64_t rows = in->dim(0);
      const DecodeRequest r =
          consumer_->NeededInput(element, consumer_ctx_, rows, in->rank() > 1 ? in->dim(1) : 1);
      if (r.height > 0) out_shape[0] = std::min(rows, r.y + r.height);
    }
    // Mean power in double, four partial sums (independent, so they pipeline).
    double acc[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(p[i + k]) * p[i + k];
    }
    for (; i < n; ++i) acc[0] += static_cast<double>(p[i]) * p[i];
    const double power = (acc[0] + acc[1] + acc[2] + acc[3]) / static_cast<double>(n);
    const double sigma = std::sqrt(power / std::pow(10.0, snr_db_ / 10.0));
    Tensor out = Tensor::Empty(DType::kF32, out_shape);
    // Box-Muller in float on lane-parallel xoshiro128++ seeded from the identity seed (the
    // noise of a prefix does not depend on the length generated).
    fastmath::GaussianNoiseAdd(p, out.num_elements(), static_cast<float>(sigma),
                               ctx.MakeRng(element).NextU64(), out.mutable_data<float>());
    element.tensors[audio_] = std::move(out);
    return absl::OkStatus();
  }

 private:
  int audio_;
  double snr_db_;
  const Op* consumer_ = nullptr;  // set once at build time, before any Apply
  OpContext consumer_ctx_;
};

// --- spectrogram ----------------------------------------------------------------------------

class SpectrogramOp final : public Op {
 public:
  SpectrogramOp(const OpSchema* schema, Args args, Schema input, Schema output, int in, int out,
                StftParams params)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        in_(in),
        out_(out),
        params_(params) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, in_));
    const std::string& name = input_schema().field(in_).name;
    SLUICE_RETURN_IF_ERROR(CheckNotEmptySignal(*in, name));
    std::vector<float> storage;
    const float* mono = MonoView(*in, &storage);
    SLUICE_ASSIGN_OR_RETURN(Tensor spec, Spectrogram(mono, in->dim(0), params_));
    StoreReplacing(element, in_, out_, name == args().String("output"), std::move(spec));
    return absl::OkStatus();
  }

 private:
  int in_;
  int out_;
  StftParams params_;
};

// --- mel ------------------------------------------------------------------------------------

class MelOp final : public Op {
 public:
  MelOp(const OpSchema* schema, Args args, Schema input, Schema output, int field)
      : Op(schema, std::move(args), std::move(input), std::move(output)), field_(field) {
    const int64_t bins = input_schema().field(field_).shape[1];
    if (bins != kUnknownDim) bank_ = Bank(bins);
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, field_));
    const int64_t frames = in->dim(0), bins = in->dim(1);
    if (bins == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", input_schema().field(field_).name, "' has no frequency bins"));
    }
    const std::vector<float> own = bank_.empty() ? Bank(bins) : std::vector<float>();
    const std::vector<float>& bank = bank_.empty() ? own : bank_;
    const int64_t n_mels = args().Int("n_mels");
    Tensor out = Tensor::Empty(DType::kF32, {frames, n_mels});
    const float* x = in->data<float>();
    float* o = out.mutable_data<float>();
    for (int64_t m = 0; m < n_mels; ++m) {
      // Each triangle covers a few bins: find them once, then sweep the frames.
      const float* filter = bank.data() + m * bins;
      int64_t lo = 0, hi = bins;
      while (lo < bins && filter[lo] == 0) ++lo;
      while (hi > lo && filter[hi - 1] == 0) --hi;
      for (int64_t t = 0; t < frames; ++t) {
        const float* row = x + t * bins;
        double acc = 0;
        for (int64_t b = lo; b < hi; ++b) acc += static_cast<double>(filter[b]) * row[b];
        o[t * n_mels + m] = static_cast<float>(acc);
      }
    }
    element.tensors[field_] = std::move(out);
    return absl::OkStatus();
  }

 private:
  std::vector<float> Bank(int64_t bins) const {
    const int64_t rate = args().Int("sample_rate");
    const double f_max = args().Float("f_max") > 0 ? args().Float("f_max") : rate / 2.0;
    return MelFilterbank(bins, rate, args().Int("n_mels"), args().Float("f_min"), f_max,
                         args().String("scale") == "slaney" ? MelScale::kSlaney : MelScale::kHtk,
                         args().String("norm") == "slaney");
  }

  int field_;
  std::vector<float> bank_;  // [n_mels, bins] when bins is known at build time
};

// --- log ------------------------------------------------------------------------------------

class LogOp final : public Op {
 public:
  LogOp(const OpSchema* schema, Args args, Schema input, int field)
      : Op(schema, std::move(args), input, input),
        field_(field),
        eps_(static_cast<float>(this->args().Float("eps"))) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, field_));
    Tensor out = Tensor::Empty(DType::kF32, in->shape());
    const float* x = in->data<float>();
    float* o = out.mutable_data<float>();
    fastmath::LogPlusEps(x, eps_, in->num_elements(), o);
    element.tensors[field_] = std::move(out);
    return absl::OkStatus();
  }

 private:
  int field_;
  float eps_;
};

// --- rfft -----------------------------------------------------------------------------------

class RfftOp final : public Op {
 public:
  RfftOp(const OpSchema* schema, Args args, Schema input, Schema output, int in, int out)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        in_(in),
        out_(out),
        n_(this->args().Int("n")),
        frames_(this->args().Bool("frames")) {}

  // With a fixed n (and not frames), only the first n samples are read: an op right before
  // (decode_wav, add_noise) may pass on only those.
  Geometry geometry() const override {
    return !frames_ && n_ > 0 ? Geometry::kScaleConsumer : Geometry::kOther;
  }

  DecodeRequest NeededInput(const Element& element, const OpContext& ctx, int64_t full_height,
                            int64_t full_width) const override {
    DecodeRequest r;
    if (geometry() != Geometry::kScaleConsumer) return r;
    r.width = full_width;
    r.height = std::min(full_height, n_);
    return r;
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, in_));
    const std::string& name = input_schema().field(in_).name;
    SLUICE_RETURN_IF_ERROR(CheckNotEmptySignal(*in, name));
    std::vector<float> storage;
    const float* mono = MonoView(*in, &storage);
    const int64_t len = in->dim(0);
    Tensor out;
    if (frames_) {
      const int64_t count = len / n_;
      if (count == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", name, "' has ", len, " samples, fewer than one frame of ", n_));
      }
      const int64_t bins = n_ / 2 + 1;
      out = Tensor::Empty(DType::kF32, {count, bins});
      for (int64_t f = 0; f < count; ++f) {
        RfftMagnitude(mono + f * n_, n_, n_, out.mutable_data<float>() + f * bins);
      }
    } else {
      const int64_t n_fft = n_ > 0 ? n_ : len;
      out = Tensor::Empty(DType::kF32, {n_fft / 2 + 1});
      RfftMagnitude(mono, len, n_fft, out.mutable_data<float>());
    }
    StoreReplacing(element, in_, out_, name == args().String("output"), std::move(out));
    return absl::OkStatus();
  }

 private:
  int in_;
  int out_;
  int64_t n_;
  bool frames_;
};

// --- normalize_features ---------------------------------------------------------------------

class NormalizeFeaturesOp final : public Op {
 public:
  NormalizeFeaturesOp(const OpSchema* schema, Args args, Schema input, int field)
      : Op(schema, std::move(args), input, input), field_(field), eps_(this->args().Float("eps")) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, field_));
    const int64_t frames = in->dim(0), features = in->dim(1);
    Tensor out = Tensor::Empty(DType::kF32, in->shape());
    if (frames == 0) {
      element.tensors[field_] = std::move(out);
      return absl::OkStatus();
    }
    const float* x = in->data<float>();
    float* o = out.mutable_data<float>();
    // One pass: per column, the sums of d and d^2 for d = x - (the first row's value), in
    // double. The shift keeps the variance free of cancellation when |mean| >> deviation;
    // the inner loop runs along a row, so each column's sums vectorise.
    std::vector<double> sum(static_cast<size_t>(features), 0.0);
    std::vector<double> sum_sq(static_cast<size_t>(features), 0.0);
    for (int64_t t = 1; t < frames; ++t) {
      const float* row = x + t * features;
      for (int64_t k = 0; k < features; ++k) {
        const double d = static_cast<double>(row[k]) - static_cast<double>(x[k]);
        sum[k] += d;
        sum_sq[k] += d * d;
      }
    }
    std::vector<double> mean(static_cast<size_t>(features)), var(static_cast<size_t>(features));
    const double count = static_cast<double>(frames);
    for (int64_t k = 0; k < features; ++k) {
      const double m = sum[k] / count;
      mean[k] = static_cast<double>(x[k]) + m;
      var[k] = std::max(0.0, sum_sq[k] / count - m * m);  // population variance
    }
    std::vector<float> scale(static_cast<size_t>(features)), shift(static_cast<size_t>(features));
    for (int64_t k = 0; k < features; ++k) {
      const double inv = 1.0 / std::sqrt(var[k] + eps_);
      scale[k] = static_cast<float>(inv);
      shift[k] = static_cast<float>(-mean[k] * inv);
    }
    for (int64_t t = 0; t < frames; ++t) {
      for (int64_t k = 0; k < features; ++k) {
        o[t * features + k] = x[t * features + k] * scale[k] + shift[k];
      }
    }
    element.tensors[field_] = std::move(out);
    return absl::OkStatus();
  }

 private:
  int field_;
  double eps_;
};

// --- pad_or_trim ----------------------------------------------------------------------------

class PadOrTrimOp final : public Op {
 public:
  PadOrTrimOp(const OpSchema* schema, Args args, Schema input, Schema output, int field,
              int length_field)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        field_(field),
        length_field_(length_field),
        length_(this->args().Int("length")),
        axis_(static_cast<int>(this->args().Int("axis"))),
        value_(this->args().Float("value")) {}

  // On axis 0 of an f32 field (audio samples) only the first `length` rows are read, so a
  // decoder right before it (decode_wav) need convert no more. Other fields: kOther, so an
  // image decoder before it keeps decoding everything.
  Geometry geometry() const override {
    const FieldSpec& spec = input_schema().field(field_);
    return axis_ == 0 && spec.dtype == DType::kF32 && spec.rank() <= 2 ? Geometry::kScaleConsumer
                                                                        : Geometry::kOther;
  }

  DecodeRequest NeededInput(const Element& element, const OpContext& ctx, int64_t full_height,
                            int64_t full_width) const override {
    DecodeRequest r;
    if (geometry() != Geometry::kScaleConsumer) return r;
    r.width = full_width;
    r.height = std::min(full_height, length_);
    return r;
  }

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, field_));
    const Shape& shape = in->shape();
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis_; ++i) outer *= shape[i];
    for (int i = axis_ + 1; i < in->rank(); ++i) inner *= shape[i];
    const int64_t have = shape[axis_];
    const int64_t keep = std::min(have, length_);
    Shape out_shape = shape;
    out_shape[axis_] = length_;
    Tensor out = Tensor::Empty(in->dtype(), out_shape);
    const size_t item = DTypeSize(in->dtype());
    const uint8_t* src = in->raw();
    uint8_t* dst = out.mutable_raw();
    const size_t row = static_cast<size_t>(inner) * item;
    // Zero (+0.0) padding is all-zero bytes in every numeric dtype: one memset per block.
    const bool zero = value_ == 0.0 && !std::signbit(value_);
    // Otherwise one padding row (inner elements), copied wherever padding goes.
    std::vector<uint8_t> pad(zero ? 0 : row);
    for (int64_t i = 0; !zero && i < inner; ++i) StoreNumber(in->dtype(), pad.data(), i, value_);
    for (int64_t o = 0; o < outer; ++o) {
      const uint8_t* s = src + static_cast<size_t>(o * have) * row;
      uint8_t* d = dst + static_cast<size_t>(o * length_) * row;
      if (keep > 0) std::memcpy(d, s, static_cast<size_t>(keep) * row);
      if (zero) {
        std::memset(d + keep * row, 0, static_cast<size_t>(length_ - keep) * row);
        continue;
      }
      for (int64_t r = keep; r < length_; ++r) std::memcpy(d + r * row, pad.data(), row);
    }
    element.tensors[field_] = std::move(out);
    if (length_field_ >= 0) SetTensor(element, length_field_, Tensor::Scalar(keep));
    return absl::OkStatus();
  }

 private:
  int field_;
  int length_field_;  // -1: none
  int64_t length_;
  int axis_;
  double value_;
};

// Argument ranges (see op_util.h for the principle).
// Sample rates: 1 MHz, above the fastest audio converters (768 kHz) and ultrasound
// recorders (500 kHz); keeps rate ratios and filter lengths small.
constexpr int64_t kMaxSampleRate = 1'000'000;
// STFT frame and hop: 65536 samples (1.4 s at 48 kHz), 16x the largest frames in use
// (4096); a frame's buffers stay at a few hundred KiB per thread.
constexpr int64_t kMaxFftSize = 65536;
// rfft over a whole signal: 2^24 points (6 minutes at 44.1 kHz), 128 MiB of output.
constexpr int64_t kMaxRfftSize = int64_t{1} << 24;
// Mel bands: 1024, 8x the most used (128); more bands than FFT bins are empty anyway.
constexpr int64_t kMaxMels = 1024;
// eps of log / normalize_features: a stabiliser far below the data's scale; 1000 leaves
// room for unnormalised power spectra.
constexpr double kMaxEps = 1000;
// Decibels: 200 dB is beyond f32's 150 dB dynamic range either way.
constexpr double kMaxDecibels = 200;
// pad_or_trim: the axis of a tensor (ranks beyond 8 do not occur in a sample).
constexpr int64_t kMaxAxis = 7;
constexpr int64_t kMaxLength = kMaxArgLength;
constexpr double kMaxValue = kMaxArgValue;

StftParams StftFromArgs(const Args& args) {
  StftParams p;
  p.n_fft = args.Int("n_fft");
  p.hop = args.Int("hop");
  p.window = args.String("window") == "hamming" ? Window::kHamming : Window::kHann;
  p.power = static_cast<int>(args.Int("power"));
  p.center = args.Bool("center");
  return p;
}

ArgSchema FieldArg(const char* default_name, std::string doc) {
  return Arg("field", ArgType::kString).Default(default_name).Doc(std::move(doc));
}

}  // namespace

OpDef ResampleOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "resample", /*random=*/false,
      "Resamples `audio` from the rate in its sample-rate field to `rate` with a Hann-windowed "
      "sinc (6 zero crossings, cutoff 0.99 of the lower Nyquist frequency) applied polyphase; "
      "updates the sample-rate field. Audio already at `rate` passes unchanged.",
      {FieldArg("audio", "the f32[samples, channels] field"),
       Arg("rate", ArgType::kInt).Range(1, kMaxSampleRate).Doc("target sample rate in Hz"),
       Arg("rate_field", ArgType::kString)
           .Default("sample_rate")
           .Doc("the i64[] field holding the current rate")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(int audio, RequireField(input, args.String("field"), {DType::kF32}, 2,
                                                    "f32[samples, channels]"));
    SLUICE_ASSIGN_OR_RETURN(
        int rate, RequireField(input, args.String("rate_field"), {DType::kI64}, 0, "i64[]"));
    return std::make_unique<ResampleOp>(&schema, args, input, audio, rate);
  };
  return def;
}

OpDef AddNoiseOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "add_noise", /*random=*/true,
      "Adds white gaussian noise at a signal-to-noise ratio of `snr_db` (noise power = mean "
      "signal power / 10^(snr_db / 10)); the noise is drawn from the sample's identity seed.",
      {FieldArg("audio", "the f32 signal field"), Arg("snr_db", ArgType::kFloat)
                                                      .Default(ArgValue(20.0))
                                                      .Range(-kMaxDecibels, kMaxDecibels)
                                                      .Doc("signal-to-noise ratio in dB")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(int audio,
                            RequireField(input, args.String("field"), {DType::kF32}, -1, "f32"));
    return std::make_unique<AddNoiseOp>(&schema, args, input, audio);
  };
  return def;
}

OpDef SpectrogramOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "spectrogram", /*random=*/false,
      "Short-time Fourier transform of a signal (channels averaged), |X|^power per frame: "
      "f32[frames, n_fft / 2 + 1] in `output`, which replaces the input field. Periodic "
      "window of n_fft samples; with `center`, reflect-padded by n_fft / 2 as torch.stft.",
      {FieldArg("audio", "the f32[samples] or f32[samples, channels] signal"),
       Arg("output", ArgType::kString).Default("spectrogram").Doc("the output field"),
       Arg("n_fft", ArgType::kInt)
           .Default(ArgValue(int64_t{400}))
           .Range(2, kMaxFftSize)
           .Doc("FFT size and frame length in samples (even)"),
       Arg("hop", ArgType::kInt)
           .Default(ArgValue(int64_t{160}))
           .Range(1, kMaxFftSize)
           .Doc("samples between frame starts"),
       Arg("window", ArgType::kString)
           .Default("hann")
           .Choices({"hann", "hamming"})
           .Doc("the window function"),
       Arg("power", ArgType::kInt)
           .Default(ArgValue(int64_t{2}))
           .Range(1, 2)
           .Doc("1: magnitude, 2: power"),
       Arg("center", ArgType::kBool)
           .Default(ArgValue(true))
           .Doc("pad n_fft / 2 samples (reflected) on both sides")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    if (args.Int("n_fft") % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("n_fft: expected an even size, got ", args.Int("n_fft")));
    }
    const std::string& field = args.String("field");
    SLUICE_ASSIGN_OR_RETURN(int in, RequireSignal(input, field));
    Schema output = input;
    const int out = ReplaceField(
        &output, field,
        FieldSpec{args.String("output"), DType::kF32, {kUnknownDim, args.Int("n_fft") / 2 + 1}});
    return std::make_unique<SpectrogramOp>(&schema, args, input, std::move(output), in, out,
                                           StftFromArgs(args));
  };
  return def;
}

OpDef MelOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "mel", /*random=*/false,
      "Applies a triangular mel filterbank to a spectrogram f32[frames, bins] (bins = "
      "n_fft / 2 + 1) giving f32[frames, n_mels]; the filters are torchaudio's "
      "melscale_fbanks (defaults: HTK scale, no normalisation, as torchaudio.transforms.MelScale).",
      {FieldArg("spectrogram", "the f32[frames, bins] field"),
       Arg("sample_rate", ArgType::kInt)
           .Default(ArgValue(int64_t{16000}))
           .Range(1, kMaxSampleRate)
           .Doc("the signal's sample rate in Hz"),
       Arg("n_mels", ArgType::kInt)
           .Default(ArgValue(int64_t{80}))
           .Range(1, kMaxMels)
           .Doc("number of filters"),
       Arg("f_min", ArgType::kFloat)
           .Default(ArgValue(0.0))
           .Range(0, kMaxSampleRate / 2)
           .Doc("lowest frequency in Hz"),
       Arg("f_max", ArgType::kFloat)
           .Default(ArgValue(0.0))
           .Range(0, kMaxSampleRate / 2)
           .Doc("highest frequency in Hz (0: sample_rate / 2)"),
       Arg("scale", ArgType::kString)
           .Default("htk")
           .Choices({"htk", "slaney"})
           .Doc("the mel scale"),
       Arg("norm", ArgType::kString)
           .Default("none")
           .Choices({"none", "slaney"})
           .Doc("slaney: divide each filter by its bandwidth (area normalisation)")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    const std::string& field = args.String("field");
    SLUICE_ASSIGN_OR_RETURN(int index,
                            RequireField(input, field, {DType::kF32}, 2, "f32[frames, bins]"));
    const double f_max =
        args.Float("f_max") > 0 ? args.Float("f_max") : args.Int("sample_rate") / 2.0;
    if (!(args.Float("f_min") < f_max)) {
      return absl::InvalidArgumentError(
          absl::StrCat("f_min: must be below f_max (", f_max, " Hz), got ", args.Float("f_min")));
    }
    Schema output = input;
    FieldSpec spec = input.field(index);
    spec.shape[1] = args.Int("n_mels");
    output.Set(spec);
    return std::make_unique<MelOp>(&schema, args, input, std::move(output), index);
  };
  return def;
}

OpDef LogOpDef() {
  OpDef def;
  def.schema = MakeOpSchema("log", /*random=*/false,
                            "Natural logarithm of x + eps, element-wise, on an f32 field.",
                            {FieldArg("spectrogram", "the f32 field"),
                             Arg("eps", ArgType::kFloat)
                                 .Default(ArgValue(1e-6))
                                 .Range(0, kMaxEps)
                                 .Doc("added before the logarithm (keeps log(0) finite)")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(int index,
                            RequireField(input, args.String("field"), {DType::kF32}, -1, "f32"));
    return std::make_unique<LogOp>(&schema, args, input, index);
  };
  return def;
}

OpDef RfftOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "rfft", /*random=*/false,
      "Magnitude of the real FFT of a signal (channels averaged), as |numpy.fft.rfft(x, n)|: "
      "f32[n / 2 + 1] in `output`, which replaces the input field. With `frames`, the signal "
      "is cut into non-overlapping frames of n samples (the rest dropped): f32[frames, n / 2 + 1].",
      {FieldArg("audio", "the f32[samples] or f32[samples, channels] signal"),
       Arg("output", ArgType::kString).Default("fft").Doc("the output field"),
       Arg("n", ArgType::kInt)
           .Default(ArgValue(int64_t{0}))
           .Range(0, kMaxRfftSize)
           .Doc("FFT size: the signal is zero-padded or truncated to it (0: its own length)"),
       Arg("frames", ArgType::kBool)
           .Default(ArgValue(false))
           .Doc("transform frames of n samples instead of the whole signal (needs n > 0)")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    const int64_t n = args.Int("n");
    if (args.Bool("frames") && n == 0) {
      return absl::InvalidArgumentError("n: frames needs a frame size n > 0");
    }
    const std::string& field = args.String("field");
    SLUICE_ASSIGN_OR_RETURN(int in, RequireSignal(input, field));
    const int64_t bins = n > 0 ? n / 2 + 1 : kUnknownDim;
    Shape shape = args.Bool("frames") ? Shape{kUnknownDim, bins} : Shape{bins};
    Schema output = input;
    const int out =
        ReplaceField(&output, field, FieldSpec{args.String("output"), DType::kF32, shape});
    return std::make_unique<RfftOp>(&schema, args, input, std::move(output), in, out);
  };
  return def;
}

OpDef NormalizeFeaturesOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "normalize_features", /*random=*/false,
      "Per-utterance normalisation of f32[frames, features]: each feature (column) minus its "
      "mean over the frames, divided by sqrt(variance + eps).",
      {FieldArg("spectrogram", "the f32[frames, features] field"),
       Arg("eps", ArgType::kFloat)
           .Default(ArgValue(1e-5))
           .Range(0, kMaxEps)
           .Doc("added to the variance")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(int index, RequireField(input, args.String("field"), {DType::kF32}, 2,
                                                    "f32[frames, features]"));
    return std::make_unique<NormalizeFeaturesOp>(&schema, args, input, index);
  };
  return def;
}

OpDef PadOrTrimOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "pad_or_trim", /*random=*/false,
      "Makes dimension `axis` of a numeric field exactly `length` long: longer inputs are "
      "cut at the end, shorter ones padded at the end with `value`. Optionally records the "
      "kept length (before padding) in an i64[] field.",
      {FieldArg("spectrogram", "the numeric field"),
       Arg("length", ArgType::kInt).Range(1, kMaxLength).Doc("the size of `axis` after the op"),
       Arg("axis", ArgType::kInt)
           .Default(ArgValue(int64_t{0}))
           .Range(0, kMaxAxis)
           .Doc("the dimension"),
       Arg("value", ArgType::kFloat)
           .Default(ArgValue(0.0))
           .Range(-kMaxValue, kMaxValue)
           .Doc("the padding value"),
       Arg("length_field", ArgType::kString)
           .Default("")
           .Doc("if set, an i64[] field that receives the unpadded length")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    const std::string& field = args.String("field");
    SLUICE_ASSIGN_OR_RETURN(
        int index, RequireField(input, field,
                                {DType::kU8, DType::kI16, DType::kI32, DType::kI64, DType::kF16,
                                 DType::kF32, DType::kF64},
                                -1, "a numeric tensor"));
    const int64_t axis = args.Int("axis");
    if (axis >= input.field(index).rank()) {
      return absl::InvalidArgumentError(absl::StrCat("axis: ", axis, " is out of range for field '",
                                                     field, "' ", TypeString(input.field(index))));
    }
    Schema output = input;
    FieldSpec spec = input.field(index);
    spec.shape[axis] = args.Int("length");
    output.Set(spec);
    int length_field = -1;
    if (!args.String("length_field").empty()) {
      length_field = output.Set(FieldSpec{args.String("length_field"), DType::kI64, {}});
    }
    return std::make_unique<PadOrTrimOp>(&schema, args, input, std::move(output), index,
                                         length_field);
  };
  return def;
}

void RegisterAudioOps(Registry* registry) {
  CheckRegistered(registry->Register(DecodeWavOpDef()));
  CheckRegistered(registry->Register(ResampleOpDef()));
  CheckRegistered(registry->Register(AddNoiseOpDef()));
  CheckRegistered(registry->Register(SpectrogramOpDef()));
  CheckRegistered(registry->Register(MelOpDef()));
  CheckRegistered(registry->Register(LogOpDef()));
  CheckRegistered(registry->Register(RfftOpDef()));
  CheckRegistered(registry->Register(NormalizeFeaturesOpDef()));
  CheckRegistered(registry->Register(PadOrTrimOpDef()));
}

}  // namespace sluice::ops
