#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/image/codecs.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

using test::EncodeJpeg;
using test::EncodePng;
using test::MakeElement;
using test::MakeOp;
using test::MeanAbsDiff;
using test::TexturedImage;
using ::testing::HasSubstr;

std::string Message(const Status& s) { return std::string(s.message()); }

Schema DataSchema() { return Schema({FieldSpec{"data", DType::kBytes, {kUnknownDim}}}); }

// Runs `name` on one bytes element; returns the status and leaves the result in `out`.
Status Decode(const std::string& name, const std::string& bytes, Element* out,
              const std::map<std::string, ArgValue>& args = {}) {
  auto op = MakeOp(name, args, DataSchema());
  if (op == nullptr) return absl::InternalError("no op");
  *out = MakeElement({Tensor::FromBytes(bytes)});
  return op->Apply(*out, OpContext{});
}

TEST(DecodeJpegTest, DecodesToRgbCloseToTheSource) {
  Tensor src = TexturedImage(375, 500);
  Element e;
  ASSERT_TRUE(Decode("decode_jpeg", EncodeJpeg(src), &e).ok());
  ASSERT_EQ(e.tensors.size(), 1u);  // data removed, image added
  EXPECT_EQ(e.tensors[0].shape(), (Shape{375, 500, 3}));
  EXPECT_LT(MeanAbsDiff(e.tensors[0], src), 3.0);
  EXPECT_TRUE(e.decoded_region.empty());
}

TEST(DecodeJpegTest, GrayOutput) {
  Tensor src = TexturedImage(64, 80);
  Element e;
  ASSERT_TRUE(Decode("decode_jpeg", EncodeJpeg(src), &e, {{"channels", int64_t{1}}}).ok());
  EXPECT_EQ(e.tensors[0].shape(), (Shape{64, 80, 1}));
  Tensor gray_src = TexturedImage(64, 80, 1);
  Element g;
  ASSERT_TRUE(Decode("decode_jpeg", EncodeJpeg(gray_src), &g).ok());
  EXPECT_EQ(g.tensors[0].shape(), (Shape{64, 80, 3}));  // gray JPEG expanded to RGB
  EXPECT_EQ(g.tensors[0].raw()[0], g.tensors[0].raw()[1]);
}

TEST(DecodeJpegTest, TruncatedDataIsAnErrorWithAReason) {
  std::string jpeg = EncodeJpeg(TexturedImage(200, 300));
  Element e;
  Status s = Decode("decode_jpeg", jpeg.substr(0, jpeg.size() / 2), &e);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(Message(s), HasSubstr("corrupt JPEG"));
  EXPECT_THAT(Message(s), HasSubstr("Premature end"));
  // Cut inside the header: still an error, not a crash.
  EXPECT_FALSE(Decode("decode_jpeg", jpeg.substr(0, 100), &e).ok());
}

TEST(DecodeJpegTest, GarbageAndEmptyInputAreErrors) {
  Element e;
  Status garbage = Decode("decode_jpeg", "this is not an image at all", &e);
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(Message(garbage), HasSubstr("Not a JPEG file"));
  Status empty = Decode("decode_jpeg", "", &e);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(Message(empty), HasSubstr("empty"));
  // Valid header, corrupted entropy-coded data in the middle.
  std::string jpeg = EncodeJpeg(TexturedImage(200, 300));
  for (size_t i = jpeg.size() / 2; i < jpeg.size() / 2 + 64; ++i) jpeg[i] = static_cast<char>(0xFF);
  EXPECT_FALSE(Decode("decode_jpeg", jpeg, &e).ok());
}

TEST(DecodePngTest, DecodesExactly) {
  Tensor src = TexturedImage(50, 70);
  Element e;
  ASSERT_TRUE(Decode("decode_png", EncodePng(src), &e).ok());
  EXPECT_TRUE(e.tensors[0].Equals(src));
  Element gray;
  ASSERT_TRUE(Decode("decode_png", EncodePng(TexturedImage(50, 70, 1)), &gray).ok());
  EXPECT_EQ(gray.tensors[0].shape(), (Shape{50, 70, 3}));
  Element one;
  ASSERT_TRUE(Decode("decode_png", EncodePng(src), &one, {{"channels", int64_t{1}}}).ok());
  ASSERT_EQ(one.tensors[0].shape(), (Shape{50, 70, 1}));
  const uint8_t* px = src.raw() + (10 * 70 + 20) * 3;
  const double luma = 0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2];
  EXPECT_NEAR(one.tensors[0].raw()[10 * 70 + 20], luma, 1.0);
}

TEST(DecodePngTest, DropsAlpha) {
  cv::Mat rgba(4, 5, CV_8UC4, cv::Scalar(10, 20, 30, 0));  // B, G, R, A (fully transparent)
  std::vector<uchar> buf;
  ASSERT_TRUE(cv::imencode(".png", rgba, buf));
  Element e;
  ASSERT_TRUE(Decode("decode_png", std::string(buf.begin(), buf.end()), &e).ok());
  ASSERT_EQ(e.tensors[0].shape(), (Shape{4, 5, 3}));
  EXPECT_EQ(e.tensors[0].raw()[0], 30);
  EXPECT_EQ(e.tensors[0].raw()[1], 20);
  EXPECT_EQ(e.tensors[0].raw()[2], 10);
}

TEST(DecodePngTest, TruncatedAndGarbageAreErrors) {
  std::string png = EncodePng(TexturedImage(80, 90));
  Element e;
  Status s = Decode("decode_png", png.substr(0, png.size() / 2), &e);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(Message(s), HasSubstr("corrupt PNG"));
  Status garbage = Decode("decode_png", "garbage garbage garbage", &e);
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(Message(garbage), HasSubstr("corrupt PNG"));
  EXPECT_FALSE(Decode("decode_png", "", &e).ok());
}

// Decompression bombs: a small file whose header claims 60000x60000 pixels is refused from
// its header, before anything is allocated for the pixels (this test would need 10 GiB
// otherwise).
TEST(DecodeLimitTest, JpegOverThePixelLimitIsRefusedFromItsHeader) {
  const std::string bomb = test::WithJpegSize(EncodeJpeg(TexturedImage(16, 16)), 60000, 60000);
  ASSERT_FALSE(bomb.empty());
  EXPECT_LT(bomb.size(), 4096u);
  for (const char* name : {"decode_jpeg", "decode_image"}) {
    Element e;
    Status s = Decode(name, bomb, &e);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << name;
    EXPECT_EQ(Message(s),
              "image is 60000x60000 (3600000000 pixels), over the limit of 134217728 pixels "
              "(raise it with options.max_image_pixels, on a worker with --max-image-pixels)")
        << name;
  }
}

TEST(DecodeLimitTest, PngOverThePixelLimitIsRefusedFromItsIhdr) {
  const std::string bomb = test::WithPngSize(EncodePng(TexturedImage(16, 16)), 60000, 60000);
  for (const char* name : {"decode_png", "decode_image"}) {
    Element e;
    Status s = Decode(name, bomb, &e);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << name;
    EXPECT_EQ(Message(s),
              "image is 60000x60000 (3600000000 pixels), over the limit of 134217728 pixels "
              "(raise it with options.max_image_pixels, on a worker with --max-image-pixels)")
        << name;
  }
  // The patched header is believed (its CRC is right): under a raised limit the decoder
  // gets as far as the missing pixel data.
  auto decoded = DecodePng(bomb, 3, int64_t{60000} * 60000);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << decoded.status();
}

// The limit is the OpEnv's (options.max_image_pixels, or a worker's flag): an image just over
// it fails, one at it decodes.
TEST(DecodeLimitTest, TheLimitComesFromTheOpEnv) {
  OpEnv env;
  env.limits.max_image_pixels = 200 * 300;
  OpContext ctx;
  ctx.env = &env;
  for (const std::string& name : {"decode_jpeg", "decode_png"}) {
    auto op = MakeOp(name, {}, DataSchema());
    ASSERT_NE(op, nullptr);
    const Tensor at = TexturedImage(200, 300);
    const Tensor over = TexturedImage(201, 300);
    auto encode = [&](const Tensor& t) {
      return name == "decode_jpeg" ? EncodeJpeg(t) : EncodePng(t);
    };
    Element ok = MakeElement({Tensor::FromBytes(encode(at))});
    EXPECT_TRUE(op->Apply(ok, ctx).ok()) << name;
    Element e = MakeElement({Tensor::FromBytes(encode(over))});
    Status s = op->Apply(e, ctx);
    EXPECT_EQ(Message(s),
              "image is 300x201 (60300 pixels), over the limit of 60000 pixels (raise it with "
              "options.max_image_pixels, on a worker with --max-image-pixels)")
        << name;
  }
}

TEST(DecodeImageTest, SniffsTheFormat) {
  Tensor src = TexturedImage(40, 60);
  Element jpeg, png;
  ASSERT_TRUE(Decode("decode_image", EncodeJpeg(src), &jpeg).ok());
  ASSERT_TRUE(Decode("decode_image", EncodePng(src), &png).ok());
  EXPECT_LT(MeanAbsDiff(jpeg.tensors[0], src), 4.0);
  EXPECT_TRUE(png.tensors[0].Equals(src));
  EXPECT_EQ(SniffImageFormat(EncodeJpeg(src)), ImageFormat::kJpeg);
  EXPECT_EQ(SniffImageFormat(EncodePng(src)), ImageFormat::kPng);

  Element e;
  Status gif = Decode("decode_image", std::string("GIF89a\x01\x00\x01\x00", 10), &e);
  ASSERT_FALSE(gif.ok());
  EXPECT_THAT(Message(gif), HasSubstr("looks like GIF"));
  Status other = Decode("decode_image", std::string("\x01\x02\x03\x04\x05", 5), &e);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(Message(other), HasSubstr("neither JPEG nor PNG (first bytes 01 02 03 04)"));
}

TEST(DecodeJpegTest, CmykJpegDecodesToRgb) {
  // TurboJPEG writes CMYK input as an Adobe (inverted) YCCK JPEG.
  const int h = 16, w = 16;
  std::vector<uint8_t> cmyk(h * w * 4);
  for (int i = 0; i < h * w; ++i) {
    cmyk[4 * i] = 255;      // these are "inverted" ink values: 255 means no ink
    cmyk[4 * i + 1] = 128;  // half magenta ink
    cmyk[4 * i + 2] = 255;
    cmyk[4 * i + 3] = 255;  // no black
  }
  tjhandle handle = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(handle, cmyk.data(), w, 0, h, TJPF_CMYK, &out, &size, TJSAMP_444, 95, 0),
            0);
  std::string bytes(reinterpret_cast<const char*>(out), size);
  tjFree(out);
  tjDestroy(handle);
  Element e;
  ASSERT_TRUE(Decode("decode_jpeg", bytes, &e).ok());
  ASSERT_EQ(e.tensors[0].shape(), (Shape{h, w, 3}));
  EXPECT_NEAR(e.tensors[0].raw()[0], 255, 3);
  EXPECT_NEAR(e.tensors[0].raw()[1], 128, 3);
  EXPECT_NEAR(e.tensors[0].raw()[2], 255, 3);
}

// --- reduced-size and region decoding -------------------------------------------------------

TEST(JpegRegionTest, ScaleAndRegionFollowTheRequest) {
  Tensor src = TexturedImage(375, 500);
  std::string jpeg = EncodeJpeg(src);
  auto full = DecodeJpeg(jpeg, 3);
  ASSERT_TRUE(full.ok());
  EXPECT_TRUE(full->region.empty());

  // Whole image at >= 1/4 size: 2/8 scale.
  auto quarter = DecodeJpeg(jpeg, 3, [](int64_t h, int64_t w) {
    EXPECT_EQ(h, 375);
    EXPECT_EQ(w, 500);
    DecodeRequest r;
    r.min_scale = 0.25;
    return r;
  });
  ASSERT_TRUE(quarter.ok()) << quarter.status();
  EXPECT_EQ(quarter->image.shape(), (Shape{94, 125, 3}));  // ceil(375 / 4), 500 / 4
  EXPECT_EQ(quarter->region.full_height, 375);
  EXPECT_EQ(quarter->region.width, 500);
  EXPECT_EQ(quarter->region.height, 375);

  // A region at full scale: libjpeg widens the columns to its 16-pixel iMCU grid.
  auto region = DecodeJpeg(jpeg, 3, [](int64_t, int64_t) {
    DecodeRequest r;
    r.x = 130;
    r.y = 101;
    r.width = 100;
    r.height = 80;
    return r;
  });
  ASSERT_TRUE(region.ok()) << region.status();
  const ImageRegion& g = region->region;
  EXPECT_LE(g.x, 130);
  EXPECT_GT(g.x, 130 - 16);
  EXPECT_EQ(g.x % 16, 0);
  EXPECT_EQ(g.y, 101);
  EXPECT_GE(g.x + g.width, 230);
  EXPECT_EQ(g.height, 80);
  EXPECT_EQ(region->image.shape(), (Shape{g.height, g.width, 3}));
  // The region's pixels equal the full decode's pixels there (away from its edges, where
  // chroma upsampling sees different neighbours).
  Tensor crop = Tensor::Empty(DType::kU8, region->image.shape());
  for (int y = 0; y < g.height; ++y) {
    std::memcpy(crop.mutable_raw() + y * g.width * 3,
                full->image.raw() + ((g.y + y) * 500 + g.x) * 3, g.width * 3);
  }
  EXPECT_LT(MeanAbsDiff(crop, region->image), 0.5);

  // A region at reduced scale: 0.2 rounds up to 2/8 (only power-of-two scales are used).
  auto scaled = DecodeJpeg(jpeg, 3, [](int64_t, int64_t) {
    DecodeRequest r;
    r.min_scale = 0.2;
    r.x = 200;
    r.y = 150;
    r.width = 120;
    r.height = 100;
    return r;
  });
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  const ImageRegion& s = scaled->region;
  EXPECT_LE(s.x, 200);
  EXPECT_LE(s.y, 150);
  EXPECT_GE(s.x + s.width, 320);
  EXPECT_GE(s.y + s.height, 250);
  EXPECT_NEAR(scaled->image.dim(1), s.width * 2.0 / 8, 1.0);
  EXPECT_NEAR(scaled->image.dim(0), s.height * 2.0 / 8, 1.0);
  EXPECT_LT(scaled->image.num_elements() * 16, full->image.num_elements());
}

// decode_jpeg -> [random_flip] -> random_resized_crop with and without DCT scaling.
struct ChainResult {
  Tensor image;
  int64_t decoded_pixels = 0;
};

ChainResult RunChain(const std::string& jpeg, bool dct_scaling, bool flip_between,
                     const std::map<std::string, ArgValue>& crop_args, uint64_t index) {
  auto decode = MakeOp("decode_jpeg", {{"dct_scaling", dct_scaling}}, DataSchema());
  std::unique_ptr<Op> flip;
  const Schema* schema = &decode->output_schema();
  if (flip_between) {
    flip = MakeOp("random_flip", {{"p", 1.0}}, *schema);
    schema = &flip->output_schema();
  }
  auto crop = MakeOp("random_resized_crop", crop_args, *schema);
  OpContext decode_ctx{/*seed=*/7, /*position=*/1};
  OpContext flip_ctx{/*seed=*/7, /*position=*/2};
  OpContext crop_ctx{/*seed=*/7, /*position=*/flip_between ? 3 : 2};
  decode->SetScaleConsumer(crop.get(), crop_ctx);
  Element e = MakeElement({Tensor::FromBytes(jpeg)}, index);
  ChainResult result;
  EXPECT_TRUE(decode->Apply(e, decode_ctx).ok());
  result.decoded_pixels = e.tensors[0].dim(0) * e.tensors[0].dim(1);
  if (flip) {
    EXPECT_TRUE(flip->Apply(e, flip_ctx).ok());
  }
  Status s = crop->Apply(e, crop_ctx);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(e.decoded_region.empty());
  result.image = e.tensors[0];
  return result;
}

TEST(JpegRegionTest, ScaledRegionDecodeStaysCloseToFullDecode) {
  std::string jpeg = EncodeJpeg(TexturedImage(375, 500));
  const std::map<std::string, ArgValue> args = {{"size", int64_t{64}}};
  int64_t fewer = 0;
  for (uint64_t index = 0; index < 12; ++index) {
    for (bool flip : {false, true}) {
      ChainResult fast = RunChain(jpeg, true, flip, args, index);
      ChainResult slow = RunChain(jpeg, false, flip, args, index);
      ASSERT_EQ(fast.image.shape(), (Shape{64, 64, 3}));
      EXPECT_EQ(slow.decoded_pixels, 375 * 500);
      EXPECT_LT(MeanAbsDiff(fast.image, slow.image), 8.0) << "index " << index << " flip " << flip;
      EXPECT_LE(fast.decoded_pixels, slow.decoded_pixels);
      fewer += fast.decoded_pixels < slow.decoded_pixels;
    }
  }
  EXPECT_GT(fewer, 12);
}

TEST(JpegRegionTest, SmallCropsDecodeStrictlyFewerPixels) {
  std::string jpeg = EncodeJpeg(TexturedImage(375, 500));
  // Small boxes scaled to a large output: no DCT scaling, only region decoding.
  const std::map<std::string, ArgValue> args = {{"size", int64_t{224}},
                                                {"scale", std::vector<double>{0.05, 0.1}}};
  for (uint64_t index = 0; index < 6; ++index) {
    ChainResult fast = RunChain(jpeg, true, false, args, index);
    ChainResult slow = RunChain(jpeg, false, false, args, index);
    EXPECT_LT(fast.decoded_pixels * 3, slow.decoded_pixels);
    EXPECT_LT(MeanAbsDiff(fast.image, slow.image), 8.0);
  }
}

TEST(JpegRegionTest, ResizeConsumerDecodesWholeImageSmaller) {
  std::string jpeg = EncodeJpeg(TexturedImage(375, 500));
  Element fast, slow;
  for (bool scaled : {true, false}) {
    auto decode = MakeOp("decode_jpeg", {{"dct_scaling", scaled}}, DataSchema());
    auto resize =
        MakeOp("resize", {{"size", std::vector<int64_t>{60, 80}}}, decode->output_schema());
    decode->SetScaleConsumer(resize.get(), OpContext{0, 1});
    Element& e = scaled ? fast : slow;
    e = MakeElement({Tensor::FromBytes(jpeg)});
    ASSERT_TRUE(decode->Apply(e, OpContext{0, 0}).ok());
    if (scaled) {
      // min scale max(60 / 375, 80 / 500) = 0.16 -> 2/8.
      EXPECT_EQ(e.tensors[0].shape(), (Shape{94, 125, 3}));
      EXPECT_EQ(e.decoded_region.width, 500);
    }
    ASSERT_TRUE(resize->Apply(e, OpContext{0, 1}).ok());
    EXPECT_EQ(e.tensors[0].shape(), (Shape{60, 80, 3}));
  }
  EXPECT_LT(MeanAbsDiff(fast.tensors[0], slow.tensors[0]), 8.0);
}

// decode_jpeg -> crop_box [-> resize]: the decoder reads the box (a field that sits at
// another index in its input than in crop_box's) and decodes only that region, at the scale
// the resize allows; without a resize, at full scale.
TEST(JpegRegionTest, CropBoxDecodesItsBoxAtTheScaleTheResizeAllows) {
  const std::string jpeg = EncodeJpeg(TexturedImage(375, 500));
  const Schema input({FieldSpec{"data", DType::kBytes, {kUnknownDim}},
                      FieldSpec{"box", DType::kI64, {4}}});
  Tensor box = Tensor::Empty(DType::kI64, {4});
  const int64_t corners[4] = {100, 60, 420, 300};  // 320 x 240
  std::copy(corners, corners + 4, box.mutable_data<int64_t>());
  for (bool with_resize : {true, false}) {
    Tensor image[2];
    int64_t decoded_pixels[2] = {0, 0};
    for (bool scaled : {true, false}) {
      auto decode = MakeOp("decode_jpeg", {{"dct_scaling", scaled}}, input);
      auto crop = MakeOp("crop_box", {}, decode->output_schema());
      std::unique_ptr<Op> resize;
      if (with_resize) {
        resize = MakeOp("resize", {{"size", int64_t{64}}, {"interpolation", std::string("area")}},
                        crop->output_schema());
        crop->SetScaleConsumer(resize.get(), OpContext{0, 2});
      }
      decode->SetScaleConsumer(crop.get(), OpContext{0, 1});
      Element e = MakeElement({Tensor::FromBytes(jpeg), box});
      ASSERT_TRUE(decode->Apply(e, OpContext{0, 0}).ok());
      const int index = decode->output_schema().IndexOf("image");
      decoded_pixels[scaled] = e.tensors[index].dim(0) * e.tensors[index].dim(1);
      Status s = crop->Apply(e, OpContext{0, 1});
      ASSERT_TRUE(s.ok()) << s;
      if (resize) {
        s = resize->Apply(e, OpContext{0, 2});
        ASSERT_TRUE(s.ok()) << s;
      }
      EXPECT_TRUE(e.decoded_region.empty());
      image[scaled] = e.tensors[index];
    }
    EXPECT_EQ(decoded_pixels[false], 375 * 500);
    if (with_resize) {
      // min scale max(64 / 240, 64 / 320) -> 4/8 of a region a little wider than the box.
      EXPECT_LT(decoded_pixels[true] * 4, decoded_pixels[false]);
      EXPECT_EQ(image[true].shape(), (Shape{64, 64, 3}));
      EXPECT_LT(MeanAbsDiff(image[true], image[false]), 8.0);
    } else {
      // Full scale: the same box, the same pixels up to the region decode's edge effects.
      EXPECT_LT(decoded_pixels[true], decoded_pixels[false]);
      EXPECT_EQ(image[true].shape(), (Shape{240, 320, 3}));
      EXPECT_EQ(image[false].shape(), (Shape{240, 320, 3}));
      EXPECT_LT(MeanAbsDiff(image[true], image[false]), 0.5);
    }
  }
}

TEST(JpegRegionTest, SameBytesFromAnyThread) {
  std::string jpeg = EncodeJpeg(TexturedImage(375, 500));
  const std::map<std::string, ArgValue> args = {{"size", int64_t{96}}};
  std::vector<Tensor> a(8), b(8);
  std::thread t1([&] {
    for (uint64_t i = 0; i < 8; ++i) a[i] = RunChain(jpeg, true, false, args, i).image;
  });
  std::thread t2([&] {
    for (uint64_t i = 8; i-- > 0;) b[i] = RunChain(jpeg, true, false, args, i).image;
  });
  t1.join();
  t2.join();
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(a[i].Equals(b[i])) << i;
}

}  // namespace
}  // namespace sluice::ops
