#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/image/augment_ops.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

using ::testing::HasSubstr;

TEST(RandAugmentTest, ChosenOperationsAreUniform) {
  // 14,000 draws of one op each over as many identities; chi-square with 13 degrees of
  // freedom, against its 0.1% critical value (34.53). The seeds are fixed, so this is not
  // flaky; a biased draw (e.g. one op never chosen) gives a statistic in the hundreds.
  std::array<int, kNumAugmentOps> counts{};
  std::array<int, 2> signs{};
  constexpr int kDraws = 14000;
  for (int i = 0; i < kDraws; ++i) {
    Rng rng(SeedFor(42, 0, static_cast<uint64_t>(i), 3));
    for (const AugmentChoice& c : DrawAugmentChoices(rng, 1)) {
      ++counts[static_cast<int>(c.op)];
      if (AugmentSigned(c.op)) ++signs[c.negate];
    }
  }
  const double expected = static_cast<double>(kDraws) / kNumAugmentOps;
  double chi2 = 0;
  for (int n : counts) chi2 += (n - expected) * (n - expected) / expected;
  EXPECT_LT(chi2, 34.53);
  // Signs: chi-square with 1 degree of freedom, 0.1% critical value 10.83.
  const double half = (signs[0] + signs[1]) / 2.0;
  EXPECT_LT((signs[0] - half) * (signs[0] - half) / half * 2, 10.83);
}

TEST(RandAugmentTest, MagnitudesFollowTorchvision) {
  EXPECT_NEAR(AugmentMagnitude(AugmentOp::kRotate, 9, 100, 100), 9.0, 1e-5);
  EXPECT_NEAR(AugmentMagnitude(AugmentOp::kShearX, 30, 100, 100), 0.3, 1e-6);
  EXPECT_NEAR(AugmentMagnitude(AugmentOp::kTranslateX, 30, 100, 331), 150.0, 1e-4);
  EXPECT_EQ(AugmentMagnitude(AugmentOp::kPosterize, 9, 1, 1), 7);
  EXPECT_EQ(AugmentMagnitude(AugmentOp::kPosterize, 30, 1, 1), 4);
  EXPECT_NEAR(AugmentMagnitude(AugmentOp::kSolarize, 9, 1, 1), 178.5, 1e-4);
  EXPECT_FALSE(AugmentSigned(AugmentOp::kEqualize));
  EXPECT_TRUE(AugmentSigned(AugmentOp::kBrightness));
}

TEST(RandAugmentTest, OperationsDoWhatTheySay) {
  const Tensor image = test::TexturedImage(40, 60);
  // Translating right by 10 moves column x to x + 10 and fills the left with black.
  Tensor moved = ApplyAugmentOp(image, AugmentOp::kTranslateX, 10.7);
  EXPECT_EQ(moved.raw()[(5 * 60 + 3) * 3], 0);
  EXPECT_EQ(moved.raw()[(5 * 60 + 25) * 3 + 1], image.raw()[(5 * 60 + 15) * 3 + 1]);
  // Solarize at 0 inverts everything; posterize to 1 bit leaves 0 or 128.
  Tensor inverted = ApplyAugmentOp(image, AugmentOp::kSolarize, 0);
  EXPECT_EQ(inverted.raw()[100], 255 - image.raw()[100]);
  Tensor posterized = ApplyAugmentOp(image, AugmentOp::kPosterize, 1);
  for (int64_t i = 0; i < posterized.num_elements(); ++i) {
    ASSERT_TRUE(posterized.raw()[i] == 0 || posterized.raw()[i] == 128);
  }
  // Autocontrast stretches every channel to [0, 255] (the top may truncate to 254, as in
  // torchvision).
  Tensor stretched = ApplyAugmentOp(image, AugmentOp::kAutoContrast, 0);
  uint8_t lo = 255, hi = 0;
  for (int64_t i = 0; i < stretched.num_elements(); i += 3) {
    lo = std::min(lo, stretched.raw()[i]);
    hi = std::max(hi, stretched.raw()[i]);
  }
  EXPECT_EQ(lo, 0);
  EXPECT_GE(hi, 254);
  // Identity and a zero rotation change nothing.
  EXPECT_TRUE(ApplyAugmentOp(image, AugmentOp::kIdentity, 0).Equals(image));
  EXPECT_TRUE(ApplyAugmentOp(image, AugmentOp::kRotate, 0).Equals(image));
}

TEST(RandAugmentTest, ZeroOpsIsIdentity) {
  Schema in({FieldSpec{"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}}});
  auto op = Registry::Builtin().Create("rand_augment", {{"num_ops", int64_t{0}}}, in);
  ASSERT_TRUE(op.ok()) << op.status();
  const Tensor image = test::TexturedImage(30, 20);
  Element e = test::MakeElement({image}, 5);
  ASSERT_TRUE((*op)->Apply(e, OpContext{1, 0}).ok());
  EXPECT_TRUE(e.tensors[0].Equals(image));
  Schema four({FieldSpec{"image", DType::kU8, {kUnknownDim, kUnknownDim, 4}}});
  EXPECT_FALSE(Registry::Builtin().Create("rand_augment", {}, four).ok());
}

TEST(CropBoxTest, CropsClipsAndRejectsEmptyBoxes) {
  Schema in({FieldSpec{"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}},
             FieldSpec{"box", DType::kF32, {4}}});
  auto op = Registry::Builtin().Create("crop_box", {}, in);
  ASSERT_TRUE(op.ok()) << op.status();
  const Tensor image = test::TexturedImage(50, 80);
  auto run = [&](std::array<float, 4> corners) {
    Tensor box = Tensor::Empty(DType::kF32, {4});
    std::copy(corners.begin(), corners.end(), box.mutable_data<float>());
    Element e = test::MakeElement({image, box}, 0);
    Status s = (*op)->Apply(e, OpContext{});
    return std::make_pair(s, e);
  };
  auto [ok, cropped] = run({10.5f, 5, 30, 25.2f});
  ASSERT_TRUE(ok.ok()) << ok;
  ASSERT_EQ(cropped.tensors[0].shape(), (Shape{21, 20, 3}));
  EXPECT_EQ(cropped.tensors[0].raw()[0], image.raw()[(5 * 80 + 10) * 3]);
  auto [clipped_status, clipped] = run({-10, -10, 500, 20});
  ASSERT_TRUE(clipped_status.ok());
  EXPECT_EQ(clipped.tensors[0].shape(), (Shape{20, 80, 3}));
  auto [outside, unused] = run({90, 0, 120, 10});
  EXPECT_THAT(std::string(outside.message()), HasSubstr("no pixels inside"));
  Schema wrong({FieldSpec{"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}},
                FieldSpec{"box", DType::kI64, {5}}});
  EXPECT_FALSE(Registry::Builtin().Create("crop_box", {}, wrong).ok());
}

TEST(ClipTest, ClampsAndChecksBounds) {
  Schema in({FieldSpec{"x", DType::kF32, {3}}});
  auto op = Registry::Builtin().Create(
      "clip", {{"field", std::string("x")}, {"min", -1.0}, {"max", 1.0}}, in);
  ASSERT_TRUE(op.ok()) << op.status();
  Tensor x = Tensor::Empty(DType::kF32, {3});
  const float v[] = {-3, 0.5f, 2};
  std::copy(v, v + 3, x.mutable_data<float>());
  Element e = test::MakeElement({x}, 0);
  ASSERT_TRUE((*op)->Apply(e, OpContext{}).ok());
  EXPECT_EQ(e.tensors[0].data<float>()[0], -1.0f);
  EXPECT_EQ(e.tensors[0].data<float>()[1], 0.5f);
  EXPECT_EQ(e.tensors[0].data<float>()[2], 1.0f);
  EXPECT_FALSE(Registry::Builtin()
                   .Create("clip", {{"field", std::string("x")}, {"min", 1.0}, {"max", 0.0}}, in)
                   .ok());
}

// The C++ half of tests/python/test_rand_augment_reference.py: with SLUICE_REFERENCE_DIR set,
// applies each operation to every `NAME.rgb` image there (raw u8 HWC, shape in NAME.shape) at
// bins 9 and 30 with both signs, writing NAME.OP.BIN.SIGN.u8 (SIGN: pos or neg). Without the
// variable there is nothing to compare against, and the test is skipped.
TEST(RandAugmentReferenceDumpTest, WritesEveryOperationForThePythonReference) {
  const char* dir = std::getenv("SLUICE_REFERENCE_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by tests/python/test_rand_augment_reference.py";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".rgb") continue;
    ++files;
    const std::filesystem::path base = entry.path().parent_path() / entry.path().stem();
    std::ifstream shape_file(base.string() + ".shape");
    int64_t h = 0, w = 0, c = 0;
    shape_file >> h >> w >> c;
    Tensor image = Tensor::Empty(DType::kU8, {h, w, c});
    std::ifstream in(entry.path(), std::ios::binary);
    in.read(reinterpret_cast<char*>(image.mutable_raw()), static_cast<std::streamsize>(h * w * c));
    ASSERT_TRUE(in.good()) << entry.path();
    for (int k = 0; k < kNumAugmentOps; ++k) {
      const AugmentOp op = static_cast<AugmentOp>(k);
      for (int bin : {9, 30}) {
        for (bool negate : {false, true}) {
          double magnitude = AugmentMagnitude(op, bin, h, w);
          if (negate && AugmentSigned(op)) magnitude = -magnitude;
          const Tensor out = ApplyAugmentOp(image, op, magnitude);
          std::ofstream file(absl::StrCat(base.string(), ".", Av(AugmentOpName(op)), ".", bin, ".",
                                          negate ? "neg" : "pos", ".u8"),
                             std::ios::binary);
          file.write(reinterpret_cast<const char*>(out.raw()),
                     static_cast<std::streamsize>(out.nbytes()));
        }
      }
    }
  }
  EXPECT_GT(files, 0) << "no .rgb files in " << dir;
}

}  // namespace
}  // namespace sluice::ops
