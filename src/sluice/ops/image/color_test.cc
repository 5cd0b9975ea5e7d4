#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/half.h"
#include "sluice/ops/image/normalize_kernel.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

// Its own namespace: test files are compiled together (SLUICE_UNITY_TESTS).
namespace sluice::ops::color_test {
namespace {

using test::MakeElement;
using test::TexturedImage;
using ::testing::HasSubstr;

Schema ImageSchema(int64_t c = 3, DType dtype = DType::kU8) {
  return Schema({FieldSpec{"label", DType::kI64, {}},
                 FieldSpec{"image", dtype, {kUnknownDim, kUnknownDim, c}}});
}

std::unique_ptr<Op> MakeOp(const std::string& name, const std::map<std::string, ArgValue>& args,
                           const Schema& input = ImageSchema()) {
  return test::MakeOp(name, args, input);
}

const std::vector<double> kMean = {0.485, 0.456, 0.406};
const std::vector<double> kStd = {0.229, 0.224, 0.225};

TEST(HalfTest, RoundTripsAndRounds) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 1e-7f, 3.14159f}) {
    float back = HalfToFloat(FloatToHalf(f));
    EXPECT_NEAR(back, f, std::abs(f) * 1e-3 + 1e-7) << f;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);                   // overflow -> inf
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3C00);     // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3C02);     // tie -> even (up)
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

TEST(NormalizeTest, MatchesHandComputationInBothLayouts) {
  Tensor img = TexturedImage(5, 6);
  for (const char* layout : {"CHW", "HWC"}) {
    auto op =
        MakeOp("normalize", {{"mean", kMean}, {"std", kStd}, {"layout", std::string(layout)}});
    Element e = MakeElement({Tensor::Scalar(1), img});
    ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
    const Tensor& out = e.tensors[1];
    const bool chw = std::string(layout) == "CHW";
    EXPECT_EQ(out.shape(), chw ? (Shape{3, 5, 6}) : (Shape{5, 6, 3}));
    EXPECT_EQ(out.dtype(), DType::kF32);
    EXPECT_TRUE(op->output_schema().Matches(1, out));
    for (int64_t y = 0; y < 5; ++y) {
      for (int64_t x = 0; x < 6; ++x) {
        for (int64_t c = 0; c < 3; ++c) {
          const double v = img.raw()[(y * 6 + x) * 3 + c];
          const double expected = (v / 255.0 - kMean[c]) / kStd[c];
          const int64_t at = chw ? (c * 5 + y) * 6 + x : (y * 6 + x) * 3 + c;
          ASSERT_NEAR(out.data<float>()[at], expected, 1e-5);
        }
      }
    }
  }
}

// The standard pipelines' case (RGB to f32 planes) runs a vector kernel; every value equals,
// bit for bit, the one formula the table of the other layouts holds, and the hand computation
// within float rounding. 224 x 223 pixels: whole vector blocks and a remainder.
TEST(NormalizeTest, TheVectorKernelGivesTheSameBitsAsTheFormula) {
  Tensor img = TexturedImage(224, 223);
  auto op = MakeOp("normalize", {{"mean", kMean}, {"std", kStd}, {"layout", std::string("CHW")}});
  Element e = MakeElement({Tensor::Scalar(1), img});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  const float* out = e.tensors[1].data<float>();
  const int64_t pixels = 224 * 223;
  for (int64_t i = 0; i < pixels; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      const uint8_t v = img.raw()[i * 3 + c];
      const float scale = static_cast<float>(1.0 / (255.0 * kStd[c]));
      const float shift = static_cast<float>(-kMean[c] / kStd[c]);
      const float got = out[c * pixels + i];
      ASSERT_EQ(got, NormalizeValue(v, scale, shift)) << "pixel " << i << " channel " << c;
      ASSERT_NEAR(got, (v / 255.0 - kMean[c]) / kStd[c], 1e-5);
    }
  }
}

// Every instruction set against the formula, bit for bit, in both output types: pixel
// counts around the vector step's edges (its 8 pixels and the 10 it reads), every byte value
// in every channel, and scales whose binary16 values overflow, go subnormal or turn negative.
TEST(NormalizeTest, EveryPathGivesTheFormulasBitsInFloatAndHalf) {
  const std::vector<std::array<float, 2>> params = {
      {static_cast<float>(1.0 / (255.0 * 0.229)), static_cast<float>(-0.485 / 0.229)},
      {1000.0f, 0.0f},  // 66 and up overflow binary16
      {1e-9f, 0.0f},    // binary16 subnormals
      {-0.75f, 3.5f}};  // negative values
  std::vector<int64_t> counts;
  for (int64_t n = 1; n <= 41; ++n) counts.push_back(n);
  counts.push_back(224 * 223);
  for (NormalizeIsa isa : {NormalizeIsa::kScalar, NormalizeIsa::kAvx2}) {
    for (const auto& [sc, sh] : params) {
      const float scale[3] = {sc, sc * 0.5f, sc * 2.0f};
      const float shift[3] = {sh, sh + 0.25f, -sh};
      for (int64_t pixels : counts) {
        std::vector<uint8_t> in(static_cast<size_t>(3 * pixels));
        for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<uint8_t>(j * 7 + j / 256);
        std::vector<float> f(in.size());
        std::vector<uint16_t> h(in.size());
        if (!NormalizeRgbToPlanesWith(isa, in.data(), pixels, scale, shift, f.data())) {
          GTEST_SKIP() << "no AVX2 on this machine";
        }
        if (!NormalizeRgbToHalfPlanesWith(isa, in.data(), pixels, scale, shift, h.data())) {
          GTEST_SKIP() << "no F16C on this machine";
        }
        for (int64_t i = 0; i < pixels; ++i) {
          for (int k = 0; k < 3; ++k) {
            const float want = NormalizeValue(in[3 * i + k], scale[k], shift[k]);
            const float got = f[k * pixels + i];
            ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
                << "isa " << static_cast<int>(isa) << ", " << pixels << " pixels, pixel " << i
                << " channel " << k << ": " << got << " != " << want;
            ASSERT_EQ(h[k * pixels + i], FloatToHalf(want))
                << "isa " << static_cast<int>(isa) << ", " << pixels << " pixels, pixel " << i
                << " channel " << k << ": half of " << want;
          }
        }
      }
    }
  }
}

TEST(NormalizeTest, HalfOutputAndScalarMeanStd) {
  Tensor img = TexturedImage(3, 4);
  auto op = MakeOp("normalize", {{"mean", 0.5}, {"std", 0.25}, {"dtype", std::string("f16")}});
  EXPECT_EQ(op->output_schema().field(1).dtype, DType::kF16);
  Element e = MakeElement({Tensor::Scalar(1), img});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  const Tensor& out = e.tensors[1];
  ASSERT_EQ(out.DebugString(), "f16[3,3,4]");
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < 12; ++i) {
      const double v = img.raw()[i * 3 + c];
      ASSERT_NEAR(HalfToFloat(out.data<uint16_t>()[c * 12 + i]), (v / 255.0 - 0.5) / 0.25, 2e-3);
    }
  }
}

TEST(NormalizeTest, FloatInputIsNotRescaled) {
  auto op = MakeOp("normalize", {{"mean", 1.0}, {"std", 2.0}, {"layout", std::string("HWC")}},
                   ImageSchema(1, DType::kF32));
  Tensor img = Tensor::Empty(DType::kF32, {1, 2, 1});
  img.mutable_data<float>()[0] = 5;
  img.mutable_data<float>()[1] = -1;
  Element e = MakeElement({Tensor::Scalar(0), img});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  EXPECT_FLOAT_EQ(e.tensors[1].data<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(e.tensors[1].data<float>()[1], -1.0f);
}

TEST(NormalizeTest, ChannelCountMismatch) {
  auto built = Registry::Builtin().Create(
      "normalize", {{"mean", std::vector<double>{0.1, 0.2}}, {"std", 1.0}}, ImageSchema(3));
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(std::string(built.status().message()),
              HasSubstr("mean: expected 3 values (one per channel) or 1, got 2"));
  // Unknown channel count at build time: checked per sample.
  auto op = MakeOp("normalize", {{"mean", kMean}, {"std", kStd}}, ImageSchema(kUnknownDim));
  Element e = MakeElement({Tensor::Scalar(0), TexturedImage(4, 4, 1)});
  Status s = op->Apply(e, OpContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("mean has 3 values but the image has 1 channels"));
  auto zero_std =
      Registry::Builtin().Create("normalize", {{"mean", 0.5}, {"std", 0.0}}, ImageSchema());
  ASSERT_FALSE(zero_std.ok());
  EXPECT_THAT(std::string(zero_std.status().message()), ::testing::StartsWith("std:"));
}

TEST(ColorJitterTest, BrightnessScalesWithinTheRange) {
  auto op = MakeOp("color_jitter", {{"brightness", 0.4}});
  Tensor img = Tensor::Empty(DType::kU8, {2, 2, 3});
  std::memset(img.mutable_raw(), 100, img.nbytes());
  double lo = 1e9, hi = -1e9;
  for (uint64_t i = 0; i < 200; ++i) {
    Element e = MakeElement({Tensor::Scalar(0), img}, i);
    ASSERT_TRUE(op->Apply(e, OpContext{5, 0}).ok());
    const uint8_t v = e.tensors[1].raw()[0];
    for (int64_t k = 0; k < 12; ++k) ASSERT_EQ(e.tensors[1].raw()[k], v);  // uniform scale
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
  }
  EXPECT_GE(lo, 60);  // 100 * 0.6
  EXPECT_LE(hi, 140);
  EXPECT_LT(lo, 70);
  EXPECT_GT(hi, 130);
}

TEST(ColorJitterTest, ContrastAndSaturationBlendTowardsGray) {
  // A gray image is a fixed point of saturation; a constant image of contrast.
  Tensor gray = Tensor::Empty(DType::kU8, {3, 3, 3});
  for (int64_t i = 0; i < 9; ++i) {
    for (int c = 0; c < 3; ++c) gray.mutable_raw()[i * 3 + c] = static_cast<uint8_t>(20 * i);
  }
  auto sat = MakeOp("color_jitter", {{"saturation", 0.9}});
  Element e = MakeElement({Tensor::Scalar(0), gray}, 1);
  ASSERT_TRUE(sat->Apply(e, OpContext{}).ok());
  EXPECT_TRUE(e.tensors[1].Equals(gray));

  Tensor flat = Tensor::Empty(DType::kU8, {3, 3, 3});
  std::memset(flat.mutable_raw(), 90, flat.nbytes());
  auto con = MakeOp("color_jitter", {{"contrast", 0.9}});
  Element f = MakeElement({Tensor::Scalar(0), flat}, 2);
  ASSERT_TRUE(con->Apply(f, OpContext{}).ok());
  EXPECT_TRUE(f.tensors[1].Equals(flat));

  // Contrast keeps the mean (up to rounding) and changes the spread.
  Tensor img = TexturedImage(16, 16);
  bool changed = false;
  for (uint64_t i = 0; i < 5; ++i) {
    Element g = MakeElement({Tensor::Scalar(0), img}, i);
    ASSERT_TRUE(con->Apply(g, OpContext{}).ok());
    changed |= !g.tensors[1].Equals(img);
  }
  EXPECT_TRUE(changed);
}

TEST(ColorJitterTest, ZeroStrengthIsIdentity) {
  auto op = MakeOp("color_jitter", {});
  Tensor img = TexturedImage(8, 8);
  Element e = MakeElement({Tensor::Scalar(0), img});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  EXPECT_TRUE(e.tensors[1].Equals(img));
  EXPECT_EQ(op->geometry(), Geometry::kSizeIndependent);
}

}  // namespace
}  // namespace sluice::ops::color_test
