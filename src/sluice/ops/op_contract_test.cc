// The contract every op keeps, checked over one table with a row per op configuration:
// output fits the declared schema; the same SampleId and position give the same bytes (twice,
// and from two threads); random ops vary with the SampleId and deterministic ones do not;
// bad arguments are rejected naming the argument; empty input is an error, not a crash; a
// missing or mistyped input field fails when the op is built, naming the field.
#include <cmath>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/audio/audio_ops.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

// What the element looks like before the op: the source fields (path, label) plus, from
// kJpeg on, the product of the ops that usually come first.
enum class Input {
  kPath,   // {path, label}; path names a JPEG file on disk
  kJpeg,   // {path, label, data: JPEG bytes}
  kPng,    // {path, label, data: PNG bytes}
  kImage,  // {path, label, image: u8[375,500,3]}
  kWav,    // {path, label, data: 16-bit mono WAV bytes}
  kAudio,  // {path, label, audio: f32[8000,1], sample_rate: i64[] = 16000}
  kSpec,   // {path, label, spectrogram: f32[50,201]} (positive values)
  kBoxed,  // {path, label, image: u8[375,500,3], box: i64[4] = [40, 30, 240, 180]}
};

enum class Empty {
  kError,          // an empty input is an error (zero-byte data, 0x0 image, empty path)
  kValid,          // an empty tensor is valid input and gives an empty output
  kNotApplicable,  // the input has no empty form (a scalar label)
};

struct OpCase {
  std::string label;  // test name suffix
  std::string op;
  std::map<std::string, ArgValue> args;
  Input input;
  std::string field;  // the field the op reads
  Empty empty;        // what an empty input gives
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.label; }

const std::vector<OpCase>& Cases() {
  static const auto* cases = new std::vector<OpCase>{
      {"read_file", "read_file", {}, Input::kPath, /*field=*/"path", /*empty=*/Empty::kError},
      {"decode_jpeg", "decode_jpeg", {}, Input::kJpeg, "data", Empty::kError},
      {"decode_jpeg_gray",
       "decode_jpeg",
       {{"channels", int64_t{1}}},
       Input::kJpeg,
       "data",
       Empty::kError},
      {"decode_png", "decode_png", {}, Input::kPng, "data", Empty::kError},
      {"decode_image_jpeg",
       "decode_image",
       {{"dct_scaling", false}},
       Input::kJpeg,
       "data",
       Empty::kError},
      {"decode_image_png", "decode_image", {}, Input::kPng, "data", Empty::kError},
      {"resize",
       "resize",
       {{"size", Ints{/*height=*/224, /*width=*/224}}},
       Input::kImage,
       "image",
       Empty::kError},
      {"resize_area",
       "resize",
       {{"size", Ints{/*height=*/100, /*width=*/150}}, {"interpolation", std::string("area")}},
       Input::kImage,
       "image",
       Empty::kError},
      {"center_crop",
       "center_crop",
       {{"size", Ints{224, 224}}},
       Input::kImage,
       "image",
       Empty::kError},
      {"random_resized_crop",
       "random_resized_crop",
       {{"size", Ints{224, 224}}, {"scale", Floats{/*min=*/0.08, /*max=*/1.0}}},
       Input::kImage,
       "image",
       Empty::kError},
      {"random_flip", "random_flip", {{"p", /*p=*/0.5}}, Input::kImage, "image", Empty::kError},
      {"random_flip_vertical",
       "random_flip",
       {{"direction", std::string("vertical")}},
       Input::kImage,
       "image",
       Empty::kError},
      {"color_jitter",
       "color_jitter",
       {{"brightness", /*brightness=*/0.4}, {"contrast", 0.4}, {"saturation", 0.4}},
       Input::kImage,
       "image",
       Empty::kError},
      {"normalize",
       "normalize",
       {{"mean", Floats{0.485, 0.456, 0.406}}, {"std", Floats{0.229, 0.224, 0.225}}},
       Input::kImage,
       "image",
       Empty::kError},
      {"normalize_hwc_f16",
       "normalize",
       {{"mean", 0.5},
        {"std", 0.25},
        {"layout", std::string("HWC")},
        {"dtype", std::string("f16")}},
       Input::kImage,
       "image",
       Empty::kError},
      {"cast", "cast", {{"dtype", std::string("f32")}}, Input::kImage, "image", Empty::kValid},
      {"one_hot",
       "one_hot",
       {{"num_classes", /*num_classes=*/int64_t{10}}},
       Input::kPath,
       "label",
       Empty::kNotApplicable},
      {"decode_wav", "decode_wav", {}, Input::kWav, "data", Empty::kError},
      {"decode_wav_mono", "decode_wav", {{"mono", true}}, Input::kWav, "data", Empty::kError},
      {"resample",
       "resample",
       {{"rate", /*rate=*/int64_t{8000}}},
       Input::kAudio,
       "audio",
       Empty::kValid},
      {"add_noise",
       "add_noise",
       {{"snr_db", /*snr_db=*/10.0}},
       Input::kAudio,
       "audio",
       Empty::kValid},
      {"spectrogram", "spectrogram", {}, Input::kAudio, "audio", Empty::kError},
      {"spectrogram_magnitude_hamming",
       "spectrogram",
       {{"n_fft", /*n_fft=*/int64_t{256}},
        {"hop", /*hop=*/int64_t{128}},
        {"window", std::string("hamming")},
        {"power", /*power=*/int64_t{1}},
        {"center", false}},
       Input::kAudio,
       "audio",
       Empty::kError},
      {"mel",
       "mel",
       {{"n_mels", /*n_mels=*/int64_t{40}}},
       Input::kSpec,
       "spectrogram",
       Empty::kValid},
      {"mel_slaney",
       "mel",
       {{"scale", std::string("slaney")}, {"norm", std::string("slaney")}},
       Input::kSpec,
       "spectrogram",
       Empty::kValid},
      {"log", "log", {{"eps", /*eps=*/1e-6}}, Input::kSpec, "spectrogram", Empty::kValid},
      {"rfft", "rfft", {}, Input::kAudio, "audio", Empty::kError},
      {"rfft_frames",
       "rfft",
       {{"n", /*n=*/int64_t{512}}, {"frames", true}},
       Input::kAudio,
       "audio",
       Empty::kError},
      {"normalize_features", "normalize_features", {}, Input::kSpec, "spectrogram", Empty::kValid},
      {"pad_or_trim",
       "pad_or_trim",
       {{"length", /*length=*/int64_t{64}}, {"length_field", std::string("frames")}},
       Input::kSpec,
       "spectrogram",
       Empty::kValid},
      {"rand_augment", "rand_augment", {}, Input::kImage, "image", Empty::kError},
      {"rand_augment_strong",
       "rand_augment",
       {{"num_ops", /*num_ops=*/int64_t{3}}, {"magnitude", /*magnitude=*/int64_t{30}}},
       Input::kImage,
       "image",
       Empty::kError},
      {"crop_box", "crop_box", {}, Input::kBoxed, "image", Empty::kError},
      {"read_box", "read_box", {}, Input::kPath, "path", Empty::kError},
      {"clip",
       "clip",
       {{"field", std::string("spectrogram")}, {"min", /*min=*/1.0}, {"max", /*max=*/5.0}},
       Input::kSpec,
       "spectrogram",
       Empty::kValid},
  };
  return *cases;
}

class OpContractTest : public ::testing::TestWithParam<OpCase> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir;
    image_ = new Tensor(test::TexturedImage(375, 500));
    jpeg_ = new std::string(test::EncodeJpeg(*image_));
    png_ = new std::string(test::EncodePng(*image_));
    jpeg_path_ = new std::string(dir_->Write("sample.jpg", *jpeg_));
    dir_->Write("sample.box", "40 30 240 180\n");  // read_box's sidecar
    audio_ = new Tensor(Tensor::Empty(DType::kF32, {8000, 1}));
    for (int64_t i = 0; i < 8000; ++i) {
      // A 220 Hz tone with two harmonics at 16 kHz.
      const double t = static_cast<double>(i) / 16000.0;
      audio_->mutable_data<float>()[i] = static_cast<float>(0.5 * std::sin(2 * M_PI * 220 * t) +
                                                            0.2 * std::sin(2 * M_PI * 440 * t) +
                                                            0.1 * std::sin(2 * M_PI * 660 * t));
    }
    wav_ = new std::string(EncodeWav16(*audio_, 16000));
    spec_ = new Tensor(Tensor::Empty(DType::kF32, {50, 201}));
    for (int64_t i = 0; i < 50 * 201; ++i) {
      spec_->mutable_data<float>()[i] = static_cast<float>(1 + (i * 7919) % 1000) / 100.0f;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete image_;
    delete jpeg_;
    delete png_;
    delete jpeg_path_;
    delete audio_;
    delete wav_;
    delete spec_;
  }

  // The input schema of the case.
  static Schema InputSchema(Input input) {
    Schema s(
        {FieldSpec{"path", DType::kBytes, {kUnknownDim}}, FieldSpec{"label", DType::kI64, {}}});
    if (input == Input::kJpeg || input == Input::kPng) {
      s.Set(FieldSpec{"data", DType::kBytes, {kUnknownDim}});
    } else if (input == Input::kImage) {
      s.Set(FieldSpec{"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}});
    } else if (input == Input::kWav) {
      s.Set(FieldSpec{"data", DType::kBytes, {kUnknownDim}});
    } else if (input == Input::kAudio) {
      s.Set(FieldSpec{"audio", DType::kF32, {kUnknownDim, 1}});
      s.Set(FieldSpec{"sample_rate", DType::kI64, {}});
    } else if (input == Input::kSpec) {
      s.Set(FieldSpec{"spectrogram", DType::kF32, {kUnknownDim, 201}});
    } else if (input == Input::kBoxed) {
      s.Set(FieldSpec{"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}});
      s.Set(FieldSpec{"box", DType::kI64, {4}});
    }
    return s;
  }

  // A realistic element for sample `index`; with `empty`, the main input has no content.
  static Element MakeInput(Input input, uint64_t index, bool empty = false) {
    Element e =
        test::MakeElement({Tensor::FromBytes(input == Input::kPath && empty ? "" : *jpeg_path_),
                           Tensor::Scalar(static_cast<int64_t>(index % 10))},
                          index);
    e.origin = *jpeg_path_;
    if (input == Input::kJpeg) e.tensors.push_back(Tensor::FromBytes(empty ? "" : *jpeg_));
    if (input == Input::kPng) e.tensors.push_back(Tensor::FromBytes(empty ? "" : *png_));
    if (input == Input::kImage) {
      e.tensors.push_back(empty ? Tensor::Empty(DType::kU8, {0, 0, 3}) : *image_);
    }
    if (input == Input::kWav) e.tensors.push_back(Tensor::FromBytes(empty ? "" : *wav_));
    if (input == Input::kAudio) {
      e.tensors.push_back(empty ? Tensor::Empty(DType::kF32, {0, 1}) : *audio_);
      e.tensors.push_back(Tensor::Scalar(16000));
    }
    if (input == Input::kSpec) {
      e.tensors.push_back(empty ? Tensor::Empty(DType::kF32, {0, 201}) : *spec_);
    }
    if (input == Input::kBoxed) {
      e.tensors.push_back(empty ? Tensor::Empty(DType::kU8, {0, 0, 3}) : *image_);
      Tensor box = Tensor::Empty(DType::kI64, {4});
      const int64_t corners[] = {40, 30, 240, 180};
      std::copy(corners, corners + 4, box.mutable_data<int64_t>());
      e.tensors.push_back(box);
    }
    return e;
  }

  std::unique_ptr<Op> Build() {
    const OpCase& c = GetParam();
    auto op = Registry::Builtin().Create(c.op, c.args, InputSchema(c.input));
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? std::move(*op) : nullptr;
  }

  static Element Run(const Op& op, Input input, uint64_t index, int position = 3) {
    Element e = MakeInput(input, index);
    Status s = op.Apply(e, OpContext{/*seed=*/42, position});
    EXPECT_TRUE(s.ok()) << s;
    return e;
  }

  static bool SameBytes(const Element& a, const Element& b) {
    if (a.tensors.size() != b.tensors.size()) return false;
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      if (!a.tensors[i].Equals(b.tensors[i])) return false;
    }
    return true;
  }

  static test::ScratchDir* dir_;
  static Tensor* image_;
  static std::string* jpeg_;
  static std::string* png_;
  static std::string* jpeg_path_;
  static Tensor* audio_;
  static std::string* wav_;
  static Tensor* spec_;
};

test::ScratchDir* OpContractTest::dir_ = nullptr;
Tensor* OpContractTest::image_ = nullptr;
std::string* OpContractTest::jpeg_ = nullptr;
std::string* OpContractTest::png_ = nullptr;
std::string* OpContractTest::jpeg_path_ = nullptr;
Tensor* OpContractTest::audio_ = nullptr;
std::string* OpContractTest::wav_ = nullptr;
Tensor* OpContractTest::spec_ = nullptr;

TEST_P(OpContractTest, OutputMatchesTheDeclaredSchema) {
  auto op = Build();
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->schema().name, GetParam().op);
  EXPECT_EQ(op->input_schema(), InputSchema(GetParam().input));
  Element e = Run(*op, GetParam().input, 0);
  const Schema& out = op->output_schema();
  ASSERT_EQ(static_cast<int>(e.tensors.size()), out.size()) << out.ToString();
  for (int i = 0; i < out.size(); ++i) {
    EXPECT_TRUE(out.Matches(i, e.tensors[i]))
        << out.field(i).ToString() << " vs " << e.tensors[i].DebugString();
  }
}

TEST_P(OpContractTest, SameIdentityGivesTheSameBytes) {
  auto op = Build();
  ASSERT_NE(op, nullptr);
  const Input input = GetParam().input;
  for (uint64_t index : {0u, 1u, 7u}) {
    EXPECT_TRUE(SameBytes(Run(*op, input, index), Run(*op, input, index))) << index;
  }
}

TEST_P(OpContractTest, SameBytesFromTwoThreads) {
  auto op = Build();
  ASSERT_NE(op, nullptr);
  const Input input = GetParam().input;
  constexpr int kCount = 6;
  std::vector<Element> sequential, forward(kCount), backward(kCount);
  for (int i = 0; i < kCount; ++i) sequential.push_back(Run(*op, input, i));
  std::thread a([&] {
    for (int i = 0; i < kCount; ++i) forward[i] = Run(*op, input, i);
  });
  std::thread b([&] {
    for (int i = kCount; i-- > 0;) backward[i] = Run(*op, input, i);
  });
  a.join();
  b.join();
  for (int i = 0; i < kCount; ++i) {
    EXPECT_TRUE(SameBytes(sequential[i], forward[i])) << i;
    EXPECT_TRUE(SameBytes(sequential[i], backward[i])) << i;
  }
}

TEST_P(OpContractTest, RandomnessFollowsTheSampleIdOnly) {
  auto op = Build();
  ASSERT_NE(op, nullptr);
  const Input input = GetParam().input;
  // Samples 0, 10, 20, ... share their label (index % 10), so only the identity differs.
  Element first = Run(*op, input, 0);
  int different = 0;
  for (uint64_t index = 10; index < 100; index += 10) {
    different += !SameBytes(first, Run(*op, input, index));
  }
  if (op->schema().random) {
    EXPECT_GT(different, 0) << "a random op gave the same output for 9 sample ids";
    // ... and the op position is part of the identity too.
    Element moved = Run(*op, input, 0, /*position=*/4);
    Element moved2 = Run(*op, input, 0, /*position=*/5);
    EXPECT_TRUE(!SameBytes(first, moved) || !SameBytes(first, moved2));
  } else {
    EXPECT_EQ(different, 0) << "a deterministic op depends on the sample id";
  }
}

TEST_P(OpContractTest, RejectsUnknownArgumentNamingIt) {
  std::map<std::string, ArgValue> args = GetParam().args;
  args["no_such_arg"] = int64_t{1};
  auto op = Registry::Builtin().Create(GetParam().op, args, InputSchema(GetParam().input));
  ASSERT_FALSE(op.ok());
  EXPECT_THAT(std::string(op.status().message()), StartsWith("no_such_arg: unknown argument"));
}

TEST_P(OpContractTest, RejectsWrongTypesNamingTheArgument) {
  const OpDef* def = Registry::Builtin().Find(GetParam().op);
  ASSERT_NE(def, nullptr);
  for (const ArgSchema& arg : def->schema.args) {
    std::map<std::string, ArgValue> args = GetParam().args;
    const bool textual = arg.type == ArgType::kString || arg.type == ArgType::kBool;
    args[arg.name] = textual ? ArgValue(int64_t{3}) : ArgValue(std::string("abc"));
    auto op = Registry::Builtin().Create(GetParam().op, args, InputSchema(GetParam().input));
    ASSERT_FALSE(op.ok()) << arg.name;
    EXPECT_THAT(std::string(op.status().message()), StartsWith(arg.name + ": expected"));
  }
}

TEST_P(OpContractTest, EmptyInputIsAnErrorNotACrash) {
  if (GetParam().empty == Empty::kNotApplicable) GTEST_SKIP() << "no empty form of this input";
  auto op = Build();
  ASSERT_NE(op, nullptr);
  Element e = MakeInput(GetParam().input, 0, /*empty=*/true);
  Status s = op->Apply(e, OpContext{42, 3});
  if (GetParam().empty == Empty::kError) {
    ASSERT_FALSE(s.ok());
    EXPECT_FALSE(s.message().empty());
  } else {
    ASSERT_TRUE(s.ok()) << s;
    const Schema& out = op->output_schema();
    ASSERT_EQ(static_cast<int>(e.tensors.size()), out.size());
    for (int i = 0; i < out.size(); ++i) EXPECT_TRUE(out.Matches(i, e.tensors[i]));
  }
}

TEST_P(OpContractTest, SchemaMismatchFailsAtBuild) {
  const OpCase& c = GetParam();
  Schema missing = InputSchema(c.input);
  missing.Remove(c.field);
  auto a = Registry::Builtin().Create(c.op, c.args, missing);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("'" + c.field + "'"));

  Schema wrong = InputSchema(c.input);
  FieldSpec spec = wrong.field(wrong.IndexOf(c.field));
  spec.dtype = spec.dtype == DType::kF64 ? DType::kBytes : DType::kF64;
  // f64 is valid input to these.
  if (spec.dtype == DType::kF64 && (c.op == "cast" || c.op == "pad_or_trim")) {
    spec.dtype = DType::kBytes;
  }
  wrong.Set(spec);
  auto b = Registry::Builtin().Create(c.op, c.args, wrong);
  ASSERT_FALSE(b.ok()) << spec.ToString();
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("'" + c.field + "'"));
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpContractTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.label;
                         });

// Every registered op has at least one row in the table.
TEST(OpContractCoverageTest, EveryOpHasARow) {
  for (const std::string& name : Registry::Builtin().Names()) {
    bool found = false;
    for (const OpCase& c : Cases()) found |= c.op == name;
    EXPECT_TRUE(found) << name << " has no contract row";
  }
}

}  // namespace
}  // namespace sluice::ops
