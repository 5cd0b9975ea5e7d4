#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/audio/audio_ops.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

using ::testing::HasSubstr;

void Put16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xFF));
  s->push_back(static_cast<char>(v >> 8));
}
void Put32(std::string* s, uint32_t v) {
  Put16(s, static_cast<uint16_t>(v & 0xFFFF));
  Put16(s, static_cast<uint16_t>(v >> 16));
}

// A WAV file with the given header fields around `data` (raw interleaved samples), with an
// unrelated LIST chunk before `data` that the reader must skip.
std::string MakeWav(uint16_t format, uint16_t channels, uint32_t rate, uint16_t bits,
                    const std::string& data, bool extensible = false) {
  std::string fmt;
  Put16(&fmt, extensible ? 0xFFFE : format);
  Put16(&fmt, channels);
  Put32(&fmt, rate);
  Put32(&fmt, rate * channels * bits / 8);
  Put16(&fmt, static_cast<uint16_t>(channels * bits / 8));
  Put16(&fmt, bits);
  if (extensible) {
    Put16(&fmt, 22);
    Put16(&fmt, bits);
    Put32(&fmt, 0);
    Put16(&fmt, format);
    fmt += std::string("\x00\x00\x00\x00\x10\x00\x80\x00\x00\xAA\x00\x38\x9B\x71", 14);
  }
  std::string body = "WAVEfmt ";
  Put32(&body, static_cast<uint32_t>(fmt.size()));
  body += fmt;
  body += "LIST";
  Put32(&body, 3);
  body += std::string("abc\0", 4);  // odd size: padded to even
  body += "data";
  Put32(&body, static_cast<uint32_t>(data.size()));
  body += data;
  std::string wav = "RIFF";
  Put32(&wav, static_cast<uint32_t>(body.size()));
  return wav + body;
}

TEST(ParseWavTest, ReadsEveryPcmWidthAndFloat) {
  // Two stereo frames: (full-scale negative, half positive), (zero, ~quarter).
  struct Case {
    uint16_t format, bits;
    std::string data;
  };
  std::string f32;
  for (float v : {-1.0f, 0.5f, 0.0f, 0.25f}) f32.append(reinterpret_cast<const char*>(&v), 4);
  const std::vector<Case> cases = {
      {1, 8, std::string("\x00\xC0\x80\xA0", 4)},
      {1, 16, std::string("\x00\x80\x00\x40\x00\x00\x00\x20", 8)},
      {1, 24, std::string("\x00\x00\x80\x00\x00\x40\x00\x00\x00\x00\x00\x20", 12)},
      {1, 32, std::string("\x00\x00\x00\x80\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\x20", 16)},
      {3, 32, f32},
  };
  for (const Case& c : cases) {
    for (bool extensible : {false, true}) {
      auto wav = ParseWav(MakeWav(c.format, 2, 22050, c.bits, c.data, extensible), false);
      ASSERT_TRUE(wav.ok()) << c.bits << ": " << wav.status();
      EXPECT_EQ(wav->sample_rate, 22050);
      ASSERT_EQ(wav->samples.shape(), (Shape{2, 2}));
      const float* s = wav->samples.data<float>();
      EXPECT_FLOAT_EQ(s[0], -1.0f) << c.bits;
      EXPECT_FLOAT_EQ(s[1], 0.5f) << c.bits;
      EXPECT_FLOAT_EQ(s[2], 0.0f) << c.bits;
      EXPECT_FLOAT_EQ(s[3], 0.25f) << c.bits;
    }
  }
}

TEST(ParseWavTest, MonoAveragesChannels) {
  auto wav = ParseWav(MakeWav(1, 2, 16000, 16, std::string("\x00\x40\x00\x20", 4)), true);
  ASSERT_TRUE(wav.ok()) << wav.status();
  ASSERT_EQ(wav->samples.shape(), (Shape{1, 1}));
  EXPECT_FLOAT_EQ(wav->samples.data<float>()[0], 0.375f);
}

TEST(ParseWavTest, RoundTripsThroughEncodeWav16) {
  Tensor x = Tensor::Empty(DType::kF32, {100, 1});
  for (int i = 0; i < 100; ++i) x.mutable_data<float>()[i] = std::sin(i * 0.1f) * 0.9f;
  auto wav = ParseWav(EncodeWav16(x, 8000), false);
  ASSERT_TRUE(wav.ok()) << wav.status();
  for (int i = 0; i < 100; ++i) {
    EXPECT_NEAR(wav->samples.data<float>()[i], x.data<float>()[i], 1.0 / 32767);
  }
}

TEST(ParseWavTest, MalformedFilesGiveClearErrors) {
  const std::string good = MakeWav(1, 1, 16000, 16, std::string(200, '\x01'));
  auto error = [](std::string_view bytes) {
    auto wav = ParseWav(bytes, false);
    return wav.ok() ? std::string("OK") : std::string(wav.status().message());
  };
  EXPECT_THAT(error(""), HasSubstr("empty"));
  EXPECT_THAT(error(good.substr(0, 6)), HasSubstr("truncated"));
  EXPECT_THAT(error(good.substr(0, good.size() - 10)), HasSubstr("truncated"));
  EXPECT_THAT(error("GIF89a........"), HasSubstr("not a RIFF/WAVE file"));
  EXPECT_THAT(error(std::string("\xFF\xFE\x01\x02........", 12)),
              HasSubstr("starts with '\\xff\\xfe\\x01\\x02...'"));  // escaped, printable
  std::string avi = good;
  avi.replace(8, 4, "AVI ");
  EXPECT_THAT(error(avi), HasSubstr("not a RIFF/WAVE file"));
  EXPECT_THAT(error(MakeWav(0x55, 1, 16000, 16, std::string(4, '\0'))),
              HasSubstr("unsupported WAV format tag 85"));
  EXPECT_THAT(error(MakeWav(1, 1, 16000, 12, std::string(4, '\0'))),
              HasSubstr("unsupported WAV sample size: 12-bit PCM"));
  EXPECT_THAT(error(MakeWav(3, 1, 16000, 64, std::string(8, '\0'))),
              HasSubstr("unsupported WAV sample size: 64-bit float"));
  EXPECT_THAT(error(MakeWav(1, 6, 16000, 16, std::string(12, '\0'))),
              HasSubstr("unsupported WAV channel count 6"));
  EXPECT_THAT(error(MakeWav(1, 2, 16000, 16, std::string(6, '\0'))),
              HasSubstr("not a whole number of 4-byte frames"));
}

// Sizes in a WAV header are checked against the bytes actually there before anything is
// allocated from them: a 300-byte file whose headers claim 4 GiB fails, naming the chunk.
TEST(ParseWavTest, DeclaredSizesBeyondTheDataAreRefused) {
  const std::string good = MakeWav(1, 1, 16000, 16, std::string(200, '\x01'));
  const size_t data_size_at = good.size() - 200 - 4;
  std::string bomb = good;
  bomb.replace(data_size_at, 4, std::string("\xf0\xff\xff\xff", 4));  // data: 4 GiB
  auto wav = ParseWav(bomb, false);
  ASSERT_FALSE(wav.ok());
  EXPECT_EQ(wav.status().message(),
            "truncated WAV: chunk 'data' declares 4294967280 bytes, 200 remain");
  bomb.replace(4, 4, std::string("\xff\xff\xff\xff", 4));  // RIFF: 4 GiB as well
  wav = ParseWav(bomb, false);
  ASSERT_FALSE(wav.ok());
  EXPECT_EQ(wav.status().message(),
            absl::StrCat("truncated WAV: the RIFF header declares 4294967303 bytes, the data has ",
                         bomb.size()));
}

TEST(DecodeWavOpTest, ErrorsUnderBothOnErrorModesAreStatusesNamingTheProblem) {
  // The op reports a Status; the pipeline turns it into a failure (on_error: fail) or a
  // skipped, counted sample (on_error: skip). Either way the message must say why.
  Schema in({FieldSpec{"data", DType::kBytes, {kUnknownDim}}});
  auto op = Registry::Builtin().Create("decode_wav", {}, in);
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ((*op)->output_schema().ToString(), "{audio: f32[?,?], sample_rate: i64[]}");
  Element e = test::MakeElement({Tensor::FromBytes("RIFF\x10\0\0\0WAVE")}, 0);
  Status s = (*op)->Apply(e, OpContext{});
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated WAV"));
  Element ok = test::MakeElement({Tensor::FromBytes(MakeWav(1, 1, 8000, 16, "\x01\x02"))}, 0);
  ASSERT_TRUE((*op)->Apply(ok, OpContext{}).ok());
  EXPECT_EQ(ok.tensors[1].scalar_int(), 8000);
}

std::vector<float> Sine(int64_t n, double freq, double rate, double amplitude = 0.5) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(amplitude * std::sin(2 * std::numbers::pi * freq * i / rate));
  }
  return x;
}

TEST(SpectrogramTest, PeakAtTheToneAndFrameCount) {
  const std::vector<float> x = Sine(16000, 1000, 16000);
  StftParams p;  // n_fft 400, hop 160, hann, power, centred
  auto spec = Spectrogram(x.data(), 16000, p);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->shape(), (Shape{101, 201}));
  const float* row = spec->data<float>() + 50 * 201;
  int peak = 0;
  for (int b = 1; b < 201; ++b) peak = row[b] > row[peak] ? b : peak;
  EXPECT_EQ(peak, 25);  // 1000 Hz / (16000 / 400)
  p.center = false;
  auto uncentred = Spectrogram(x.data(), 16000, p);
  ASSERT_TRUE(uncentred.ok());
  EXPECT_EQ(uncentred->dim(0), 1 + (16000 - 400) / 160);
  EXPECT_FALSE(Spectrogram(x.data(), 100, p).ok());
}

TEST(RfftTest, MagnitudeOfAToneIsHalfTheLengthTimesTheAmplitude) {
  const std::vector<float> x = Sine(1024, 64, 1024, 1.0);
  std::vector<float> even(513), odd(512);
  RfftMagnitude(x.data(), 1024, 1024, even.data());
  EXPECT_NEAR(even[64], 512.0, 1e-2);
  EXPECT_NEAR(even[10], 0.0, 1e-2);
  RfftMagnitude(x.data(), 1024, 1023, odd.data());  // odd size: the complex transform
  EXPECT_GT(odd[64], 400.0);
}

TEST(MelFilterbankTest, TrianglesPeakAtOneAndCoverTheRange) {
  const std::vector<float> fb = MelFilterbank(201, 16000, 40, 0, 8000, MelScale::kHtk, false);
  for (int m = 0; m < 40; ++m) {
    float top = 0;
    for (int b = 0; b < 201; ++b) top = std::max(top, fb[m * 201 + b]);
    EXPECT_GT(top, 0.4f) << m;
    EXPECT_LE(top, 1.0f) << m;
  }
}

TEST(ResampleTest, KeepsAToneAndItsLength) {
  const std::vector<float> x = Sine(22050, 440, 22050);
  Tensor in = Tensor::Empty(DType::kF32, {22050, 1});
  std::copy(x.begin(), x.end(), in.mutable_data<float>());
  Tensor out = ResampleAudio(in, 22050, 16000);
  ASSERT_EQ(out.shape(), (Shape{16000, 1}));
  const std::vector<float> want = Sine(16000, 440, 16000);
  for (int i = 100; i < 15900; i += 37) EXPECT_NEAR(out.data<float>()[i], want[i], 5e-3) << i;
  // A tone above the new Nyquist frequency is removed.
  const std::vector<float> high = Sine(22050, 10000, 22050);
  std::copy(high.begin(), high.end(), in.mutable_data<float>());
  Tensor filtered = ResampleAudio(in, 22050, 16000);
  double energy = 0;
  for (int i = 100; i < 15900; ++i) energy += filtered.data<float>()[i] * filtered.data<float>()[i];
  EXPECT_LT(energy / 15800, 1e-2 * 0.125);  // at least 20 dB down
}

Element RunOp(const std::string& name, const std::map<std::string, ArgValue>& args,
              const Schema& in, std::vector<Tensor> tensors, uint64_t index = 0) {
  auto op = Registry::Builtin().Create(name, args, in);
  EXPECT_TRUE(op.ok()) << op.status();
  Element e = test::MakeElement(std::move(tensors), index);
  Status s = (*op)->Apply(e, OpContext{/*seed=*/7, /*position=*/1});
  EXPECT_TRUE(s.ok()) << s;
  return e;
}

TEST(AddNoiseTest, ReachesTheRequestedSnr) {
  const std::vector<float> x = Sine(48000, 300, 16000);
  Tensor in = Tensor::Empty(DType::kF32, {48000, 1});
  std::copy(x.begin(), x.end(), in.mutable_data<float>());
  Schema schema({FieldSpec{"audio", DType::kF32, {kUnknownDim, 1}}});
  Element e = RunOp("add_noise", {{"snr_db", 10.0}}, schema, {in});
  double signal = 0, noise = 0;
  for (int i = 0; i < 48000; ++i) {
    signal += x[i] * x[i];
    const double d = e.tensors[0].data<float>()[i] - x[i];
    noise += d * d;
  }
  EXPECT_NEAR(10 * std::log10(signal / noise), 10.0, 0.1);
}

TEST(NormalizeFeaturesTest, ZeroMeanUnitVariancePerColumn) {
  Tensor in = Tensor::Empty(DType::kF32, {4, 2});
  const float v[] = {1, 10, 2, 20, 3, 30, 4, 40};
  std::copy(v, v + 8, in.mutable_data<float>());
  Schema schema({FieldSpec{"spectrogram", DType::kF32, {kUnknownDim, 2}}});
  Element e = RunOp("normalize_features", {{"eps", 0.0}}, schema, {in});
  const float* o = e.tensors[0].data<float>();
  const float z = static_cast<float>(1.5 / std::sqrt(1.25));
  EXPECT_NEAR(o[0], -z, 1e-5);
  EXPECT_NEAR(o[1], -z, 1e-5);
  EXPECT_NEAR(o[6], z, 1e-5);
}

TEST(PadOrTrimTest, PadsTrimsAndRecordsTheLength) {
  Tensor in = Tensor::Empty(DType::kI32, {2, 3});
  for (int i = 0; i < 6; ++i) in.mutable_data<int32_t>()[i] = i + 1;
  Schema schema({FieldSpec{"x", DType::kI32, {2, 3}}});
  Element padded = RunOp("pad_or_trim",
                         {{"field", std::string("x")},
                          {"length", int64_t{5}},
                          {"axis", int64_t{1}},
                          {"value", -1.0},
                          {"length_field", std::string("n")}},
                         schema, {in});
  ASSERT_EQ(padded.tensors[0].shape(), (Shape{2, 5}));
  const std::vector<int32_t> want = {1, 2, 3, -1, -1, 4, 5, 6, -1, -1};
  EXPECT_EQ(std::vector<int32_t>(padded.tensors[0].data<int32_t>(),
                                 padded.tensors[0].data<int32_t>() + 10),
            want);
  EXPECT_EQ(padded.tensors[1].scalar_int(), 3);
  Element trimmed =
      RunOp("pad_or_trim", {{"field", std::string("x")}, {"length", int64_t{1}}}, schema, {in});
  ASSERT_EQ(trimmed.tensors[0].shape(), (Shape{1, 3}));
  EXPECT_EQ(trimmed.tensors[0].data<int32_t>()[2], 3);
  EXPECT_FALSE(
      Registry::Builtin()
          .Create("pad_or_trim",
                  {{"field", std::string("x")}, {"length", int64_t{1}}, {"axis", int64_t{2}}},
                  schema)
          .ok());
}

// decode_wav -> pad_or_trim on axis 0: the decoder converts only the frames kept, and the
// result (samples and recorded length) is the same as decoding everything.
TEST(DecodeWavOpTest, ConvertsOnlyWhatPadOrTrimKeeps) {
  std::string pcm;
  for (int i = 0; i < 1000; ++i) {
    Put16(&pcm, static_cast<uint16_t>(static_cast<int16_t>((i * 37) % 20000 - 10000)));
  }
  const std::string wav = MakeWav(1, 1, 16000, 16, pcm);
  StatusOr<WavAudio> head = ParseWav(wav, true, [](int64_t frames) {
    EXPECT_EQ(frames, 1000);
    return int64_t{300};
  });
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->samples.shape(), (Shape{300, 1}));
  const Schema input({FieldSpec{"data", DType::kBytes, {kUnknownDim}}});
  for (int64_t length : {256, 4000}) {
    for (const char* field : {"audio", "other"}) {
      Element result[2];
      for (bool linked : {true, false}) {
        Schema schema = input;
        if (std::string(field) == "other") schema.Set(FieldSpec{"other", DType::kF32, {3, 1}});
        auto decode = Registry::Builtin().Create("decode_wav", {{"mono", true}}, schema);
        ASSERT_TRUE(decode.ok()) << decode.status();
        auto pad = Registry::Builtin().Create("pad_or_trim",
                                              {{"field", std::string(field)},
                                               {"length", length},
                                               {"length_field", std::string("n")}},
                                              (*decode)->output_schema());
        ASSERT_TRUE(pad.ok()) << pad.status();
        if (linked) (*decode)->SetScaleConsumer(pad->get(), OpContext{0, 1});
        Element& e = result[linked];
        e.tensors.push_back(Tensor::FromBytes(wav));
        if (std::string(field) == "other") {
          Tensor other = Tensor::Empty(DType::kF32, {3, 1});
          std::fill_n(other.mutable_data<float>(), 3, 0.5f);
          e.tensors.push_back(other);
        }
        ASSERT_TRUE((*decode)->Apply(e, OpContext{0, 0}).ok());
        const int audio = (*decode)->output_schema().IndexOf("audio");
        // Only a pad_or_trim of the audio itself may cut the decode short.
        const bool cut = linked && length < 1000 && std::string(field) == "audio";
        EXPECT_EQ(e.tensors[audio].dim(0), cut ? length : 1000);
        ASSERT_TRUE((*pad)->Apply(e, OpContext{0, 1}).ok());
      }
      ASSERT_EQ(result[0].tensors.size(), result[1].tensors.size());
      for (size_t i = 0; i < result[0].tensors.size(); ++i) {
        EXPECT_TRUE(result[0].tensors[i].Equals(result[1].tensors[i]))
            << field << " " << length << " " << i;
      }
    }
  }
}

// decode_wav -> add_noise -> rfft(n): linked as the pipeline links them, add_noise passes on
// only the n samples the rfft reads (decode_wav, followed by add_noise, converts everything);
// the spectrum is the same bits as unlinked.
TEST(AddNoiseTest, PassesOnOnlyWhatRfftReadsWithTheSameResult) {
  std::string pcm;
  for (int i = 0; i < 3000; ++i) {
    Put16(&pcm, static_cast<uint16_t>(static_cast<int16_t>((i * 53) % 16000 - 8000)));
  }
  const std::string wav = MakeWav(1, 1, 16000, 16, pcm);
  const Schema input({FieldSpec{"data", DType::kBytes, {kUnknownDim}}});
  Tensor spectrum[2];
  for (bool linked : {true, false}) {
    auto decode = Registry::Builtin().Create("decode_wav", {{"mono", true}}, input);
    ASSERT_TRUE(decode.ok()) << decode.status();
    auto noise =
        Registry::Builtin().Create("add_noise", {{"snr_db", 10.0}}, (*decode)->output_schema());
    ASSERT_TRUE(noise.ok()) << noise.status();
    auto rfft = Registry::Builtin().Create("rfft", {{"n", int64_t{1024}}}, (*noise)->output_schema());
    ASSERT_TRUE(rfft.ok()) << rfft.status();
    if (linked) (*noise)->SetScaleConsumer(rfft->get(), OpContext{5, 2});
    Element e;
    e.id.index = 17;
    e.tensors.push_back(Tensor::FromBytes(wav));
    ASSERT_TRUE((*decode)->Apply(e, OpContext{5, 0}).ok());
    const int audio = (*decode)->output_schema().IndexOf("audio");
    EXPECT_EQ(e.tensors[audio].dim(0), 3000);
    ASSERT_TRUE((*noise)->Apply(e, OpContext{5, 1}).ok());
    EXPECT_EQ(e.tensors[audio].dim(0), linked ? 1024 : 3000);
    ASSERT_TRUE((*rfft)->Apply(e, OpContext{5, 2}).ok());
    spectrum[linked] = e.tensors[(*rfft)->output_schema().IndexOf("fft")];
  }
  EXPECT_EQ(spectrum[0].shape(), (Shape{513}));
  EXPECT_TRUE(spectrum[0].Equals(spectrum[1]));
}

TEST(AudioPipelineTest, WavToLogMelShapes) {
  const std::vector<float> x = Sine(8000, 440, 16000);
  Tensor audio = Tensor::Empty(DType::kF32, {8000, 1});
  std::copy(x.begin(), x.end(), audio.mutable_data<float>());
  Schema schema({FieldSpec{"data", DType::kBytes, {kUnknownDim}}});
  const Registry& r = Registry::Builtin();
  std::vector<std::unique_ptr<Op>> ops;
  auto add = [&](const std::string& name, std::map<std::string, ArgValue> args) {
    auto op = r.Create(name, args, schema);
    ASSERT_TRUE(op.ok()) << name << ": " << op.status();
    schema = (*op)->output_schema();
    ops.push_back(std::move(*op));
  };
  add("decode_wav", {});
  add("spectrogram", {});
  add("mel", {{"n_mels", int64_t{64}}});
  add("log", {});
  add("normalize_features", {});
  add("pad_or_trim", {{"length", int64_t{100}}});
  EXPECT_EQ(schema.ToString(), "{sample_rate: i64[], spectrogram: f32[100,64]}");
  Element e = test::MakeElement({Tensor::FromBytes(EncodeWav16(audio, 16000))}, 0);
  for (const auto& op : ops) ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  EXPECT_TRUE(schema.Matches(1, e.tensors[1]));
}

}  // namespace
}  // namespace sluice::ops
