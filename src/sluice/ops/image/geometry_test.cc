#include <cstring>
#include <opencv2/core.hpp>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/image/flip_kernel.h"
#include "sluice/ops/image/image_ops.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

// Its own namespace: test files are compiled together (SLUICE_UNITY_TESTS).
namespace sluice::ops::geometry_test {
namespace {

using test::MakeElement;
using test::MeanAbsDiff;
using test::TexturedImage;
using ::testing::HasSubstr;

Schema ImageSchema(int64_t h = kUnknownDim, int64_t w = kUnknownDim, int64_t c = 3,
                   DType dtype = DType::kU8) {
  return Schema({FieldSpec{"image", dtype, {h, w, c}}});
}

std::unique_ptr<Op> MakeOp(const std::string& name, const std::map<std::string, ArgValue>& args,
                           const Schema& input = ImageSchema()) {
  return test::MakeOp(name, args, input);
}

// A u8 image whose pixel (y, x, c) is (y * 7 + x * 3 + c) & 0xFF: every position is telling.
Tensor Ramp(int64_t h, int64_t w, int64_t c = 3) {
  Tensor t = Tensor::Empty(DType::kU8, {h, w, c});
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t k = 0; k < c; ++k)
        t.mutable_raw()[(y * w + x) * c + k] = (y * 7 + x * 3 + k) & 0xFF;
    }
  }
  return t;
}

uint8_t At(const Tensor& t, int64_t y, int64_t x, int64_t c) {
  return t.raw()[(y * t.dim(1) + x) * t.dim(2) + c];
}

TEST(ResizeTest, OutputDimsAndSchema) {
  auto op = MakeOp("resize", {{"size", std::vector<int64_t>{30, 40}}});
  EXPECT_EQ(op->output_schema().field(0).shape, (Shape{30, 40, 3}));
  EXPECT_EQ(op->geometry(), Geometry::kScaleConsumer);
  Element e = MakeElement({TexturedImage(75, 100)});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  EXPECT_EQ(e.tensors[0].shape(), (Shape{30, 40, 3}));
  // A scalar size is square; a constant image stays constant under every filter.
  for (const char* interp : {"nearest", "bilinear", "bicubic", "area", "lanczos"}) {
    auto square = MakeOp("resize", {{"size", int64_t{17}}, {"interpolation", std::string(interp)}});
    Element c = MakeElement({Tensor::Zeros(DType::kU8, {50, 60, 3})});
    std::memset(c.tensors[0].mutable_raw(), 77, c.tensors[0].nbytes());
    ASSERT_TRUE(square->Apply(c, OpContext{}).ok()) << interp;
    ASSERT_EQ(c.tensors[0].shape(), (Shape{17, 17, 3}));
    for (int64_t i = 0; i < c.tensors[0].num_elements(); ++i) {
      ASSERT_EQ(c.tensors[0].raw()[i], 77) << interp;
    }
  }
}

TEST(ResizeTest, NeededInputAsksForTheWholeImageAtTheSmallestScale) {
  auto op = MakeOp("resize", {{"size", std::vector<int64_t>{100, 50}}});
  DecodeRequest r = op->NeededInput(Element{}, OpContext{}, 400, 400);
  EXPECT_EQ(r.width, 0);
  EXPECT_DOUBLE_EQ(r.min_scale, 0.25);
  EXPECT_DOUBLE_EQ(op->NeededInput(Element{}, OpContext{}, 50, 50).min_scale, 1.0);
}

TEST(ResizeTest, FloatImages) {
  auto op = MakeOp("resize", {{"size", std::vector<int64_t>{2, 2}}},
                   ImageSchema(kUnknownDim, kUnknownDim, 1, DType::kF32));
  Tensor img = Tensor::Empty(DType::kF32, {4, 4, 1});
  for (int i = 0; i < 16; ++i) img.mutable_data<float>()[i] = 0.5f;
  Element e = MakeElement({img});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  EXPECT_EQ(e.tensors[0].DebugString(), "f32[2,2,1]");
  EXPECT_FLOAT_EQ(e.tensors[0].data<float>()[3], 0.5f);
}

TEST(CenterCropTest, PicksTheCentre) {
  auto op = MakeOp("center_crop", {{"size", std::vector<int64_t>{4, 6}}});
  Tensor src = Ramp(10, 13);
  Element e = MakeElement({src});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  const Tensor& out = e.tensors[0];
  ASSERT_EQ(out.shape(), (Shape{4, 6, 3}));
  // top = round(6 / 2) = 3, left = round(7 / 2) = round(3.5) = 4 (halves to even).
  for (int64_t y = 0; y < 4; ++y) {
    for (int64_t x = 0; x < 6; ++x) {
      for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(At(out, y, x, c), At(src, y + 3, x + 4, c));
    }
  }
}

TEST(CenterCropTest, SmallerImageIsAnError) {
  auto op = MakeOp("center_crop", {{"size", int64_t{32}}});
  Element e = MakeElement({Ramp(20, 40)});
  Status s = op->Apply(e, OpContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("20x40"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("smaller than the crop size [32, 32]"));
}

TEST(RandomFlipTest, MirrorsHorizontallyAndVertically) {
  Tensor src = Ramp(5, 7);
  auto h = MakeOp("random_flip", {{"p", 1.0}});
  Element e = MakeElement({src});
  ASSERT_TRUE(h->Apply(e, OpContext{}).ok());
  for (int64_t y = 0; y < 5; ++y) {
    for (int64_t x = 0; x < 7; ++x) {
      for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(At(e.tensors[0], y, x, c), At(src, y, 6 - x, c));
    }
  }
  auto v = MakeOp("random_flip", {{"p", 1.0}, {"direction", std::string("vertical")}});
  Element f = MakeElement({src});
  ASSERT_TRUE(v->Apply(f, OpContext{}).ok());
  for (int64_t y = 0; y < 5; ++y) {
    for (int64_t x = 0; x < 7; ++x) ASSERT_EQ(At(f.tensors[0], y, x, 1), At(src, 4 - y, x, 1));
  }
  auto never = MakeOp("random_flip", {{"p", 0.0}});
  Element g = MakeElement({src});
  ASSERT_TRUE(never->Apply(g, OpContext{}).ok());
  EXPECT_TRUE(g.tensors[0].Equals(src));
}

// RGB u8, mirrored left to right, moves 16 pixels per step: every width from a part of a
// step to several steps and a remainder gives OpenCV's mirror image, byte for byte.
TEST(RandomFlipTest, TheBlockwiseMirrorEqualsOpenCvAtEveryWidth) {
  auto h = MakeOp("random_flip", {{"p", 1.0}});
  for (int64_t width :
       {1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 80, 127, 128, 129, 143, 224, 225}) {
    Tensor src = TexturedImage(3, width);
    Element e = MakeElement({src});
    ASSERT_TRUE(h->Apply(e, OpContext{}).ok());
    cv::Mat expected;
    cv::flip(cv::Mat(3, static_cast<int>(width), CV_8UC3, const_cast<uint8_t*>(src.raw())),
             expected, 1);
    ASSERT_EQ(std::memcmp(e.tensors[0].raw(), expected.data, src.nbytes()), 0)
        << "width " << width;
    // Every instruction set this machine has gives the same bytes (odd and even block
    // counts, with and without a remainder, among the widths).
    for (FlipIsa isa : {FlipIsa::kScalar, FlipIsa::kSsse3, FlipIsa::kAvx2, FlipIsa::kAvx512Vbmi}) {
      std::vector<uint8_t> out(src.nbytes(), 0);
      if (!FlipRgbHorizontallyWith(isa, src.raw(), 3, width, out.data())) continue;
      ASSERT_EQ(std::memcmp(out.data(), expected.data, out.size()), 0)
          << "width " << width << ", instruction set " << static_cast<int>(isa);
    }
  }
}

TEST(RandomFlipTest, FlipsAboutHalfTheSamplesAndMirrorsTheDecodedRegion) {
  auto op = MakeOp("random_flip", {});
  int flipped = 0;
  Tensor src = Ramp(4, 4);
  for (uint64_t i = 0; i < 400; ++i) {
    Element e = MakeElement({src}, i);
    ASSERT_TRUE(op->Apply(e, OpContext{3, 1}).ok());
    flipped += !e.tensors[0].Equals(src);
  }
  EXPECT_GT(flipped, 140);
  EXPECT_LT(flipped, 260);

  auto always = MakeOp("random_flip", {{"p", 1.0}});
  Element e = MakeElement({src});
  e.decoded_region = ImageRegion{100, 200, /*x=*/10, /*y=*/20, /*width=*/50, /*height=*/30};
  ASSERT_TRUE(always->Apply(e, OpContext{}).ok());
  EXPECT_EQ(e.decoded_region.x, 200 - 10 - 50);
  EXPECT_EQ(e.decoded_region.y, 20);
}

TEST(RandomResizedCropTest, BoxFollowsTorchvisionRules) {
  std::set<std::pair<int64_t, int64_t>> sizes;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    Rng rng(seed);
    CropBox b = RandomResizedCropBox(rng, 375, 500, 0.08, 1.0, 3.0 / 4, 4.0 / 3);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, 500);
    ASSERT_LE(b.y + b.height, 375);
    const double area = static_cast<double>(b.width * b.height) / (375.0 * 500.0);
    // Rounding the sides can push the area slightly outside [0.08, 1].
    ASSERT_GT(area, 0.07);
    const double ratio = static_cast<double>(b.width) / b.height;
    if (!(b.width == 500 && b.height == 375)) {
      ASSERT_GT(ratio, 0.7);
      ASSERT_LT(ratio, 1.4);
    }
    sizes.insert({b.width, b.height});
  }
  EXPECT_GT(sizes.size(), 300u);
  // Impossible draws (ratio far from the image's) fall back to the clamped central crop.
  Rng rng(1);
  CropBox tall = RandomResizedCropBox(rng, 1000, 10, 0.9, 1.0, 1.0, 1.0);
  EXPECT_EQ(tall.width, 10);
  EXPECT_EQ(tall.height, 10);
  EXPECT_EQ(tall.y, 495);
  EXPECT_EQ(tall.x, 0);
}

TEST(RandomResizedCropTest, OutputSizeAndIdentityDeterminism) {
  auto op = MakeOp("random_resized_crop", {{"size", std::vector<int64_t>{32, 48}}});
  EXPECT_EQ(op->output_schema().field(0).shape, (Shape{32, 48, 3}));
  Tensor src = TexturedImage(120, 160);
  Element a = MakeElement({src}, 5), b = MakeElement({src}, 5);
  ASSERT_TRUE(op->Apply(a, OpContext{9, 2}).ok());
  ASSERT_TRUE(op->Apply(b, OpContext{9, 2}).ok());
  EXPECT_EQ(a.tensors[0].shape(), (Shape{32, 48, 3}));
  EXPECT_TRUE(a.tensors[0].Equals(b.tensors[0]));
  Element c = MakeElement({src}, 5);
  ASSERT_TRUE(op->Apply(c, OpContext{9, 3}).ok());  // another position: another crop
  EXPECT_FALSE(a.tensors[0].Equals(c.tensors[0]));
}

TEST(RandomResizedCropTest, FullScaleCropIsAResize) {
  auto crop = MakeOp("random_resized_crop", {{"size", int64_t{20}},
                                             {"scale", std::vector<double>{1.0, 1.0}},
                                             {"ratio", std::vector<double>{1.0, 1.0}}});
  auto resize = MakeOp("resize", {{"size", int64_t{20}}});
  Tensor src = TexturedImage(64, 64);
  Element a = MakeElement({src}), b = MakeElement({src});
  ASSERT_TRUE(crop->Apply(a, OpContext{}).ok());
  ASSERT_TRUE(resize->Apply(b, OpContext{}).ok());
  EXPECT_TRUE(a.tensors[0].Equals(b.tensors[0]));
}

TEST(RandomResizedCropTest, MapsTheBoxThroughTheDecodedRegion) {
  // The same crop, once from the full image and once from a half-size copy of its right
  // part that claims (through decoded_region) to be exactly that.
  auto op = MakeOp("random_resized_crop",
                   {{"size", int64_t{16}}, {"scale", std::vector<double>{0.05, 0.1}}});
  Tensor full = TexturedImage(200, 200);
  Element whole = MakeElement({full}, 3);
  ASSERT_TRUE(op->Apply(whole, OpContext{1, 4}).ok());
  DecodeRequest r = op->NeededInput(MakeElement({}, 3), OpContext{1, 4}, 200, 200);
  ASSERT_GT(r.width, 0);
  // Decode "region" = columns [0, 200) rows [0, 200) at half size.
  Element half = MakeElement({Tensor()}, 3);
  cv::Mat small;
  cv::resize(cv::Mat(200, 200, CV_8UC3, const_cast<uint8_t*>(full.raw())), small,
             cv::Size(100, 100), 0, 0, cv::INTER_AREA);
  Tensor t = Tensor::Empty(DType::kU8, {100, 100, 3});
  std::memcpy(t.mutable_raw(), small.data, t.nbytes());
  half.tensors[0] = t;
  half.decoded_region = ImageRegion{200, 200, 0, 0, 200, 200};
  ASSERT_TRUE(op->Apply(half, OpContext{1, 4}).ok());
  EXPECT_TRUE(half.decoded_region.empty());
  EXPECT_LT(MeanAbsDiff(whole.tensors[0], half.tensors[0]), 8.0);
}

TEST(ImageOpsTest, SchemaErrorsNameTheField) {
  Schema f32_chw({FieldSpec{"image", DType::kF32, {3, 224, 224}}, FieldSpec{"x", DType::kU8, {4}}});
  auto bad_rank = Registry::Builtin().Create("random_flip", {{"field", std::string("x")}}, f32_chw);
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_THAT(
      std::string(bad_rank.status().message()),
      HasSubstr("needs field 'x' as u8 or f32[?,?,C] (height, width, channels), got u8[4]"));
  auto jitter = Registry::Builtin().Create("color_jitter", {}, f32_chw);
  ASSERT_FALSE(jitter.ok());
  EXPECT_THAT(std::string(jitter.status().message()), HasSubstr("got f32[3,224,224]"));
}

}  // namespace
}  // namespace sluice::ops::geometry_test
