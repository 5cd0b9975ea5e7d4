#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/half.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

using test::MakeElement;
using test::MakeOp;
using test::ScratchDir;
using ::testing::HasSubstr;

Schema SourceSchema() {
  return Schema(
      {FieldSpec{"path", DType::kBytes, {kUnknownDim}}, FieldSpec{"label", DType::kI64, {}}});
}

TEST(ReadFileTest, ReadsTheBytesAndKeepsThePath) {
  ScratchDir dir;
  std::string content(100000, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 31);
  std::string file = dir.Write("a.bin", content);
  auto op = MakeOp("read_file", {}, SourceSchema());
  Element e = MakeElement({Tensor::FromBytes(file), Tensor::Scalar(4)});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  ASSERT_EQ(e.tensors.size(), 3u);
  EXPECT_EQ(e.tensors[0].bytes(), file);
  EXPECT_EQ(e.tensors[1].scalar_int(), 4);
  EXPECT_EQ(e.tensors[2].bytes(), content);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(op->output_schema().Matches(i, e.tensors[i]));

  std::string empty = dir.Write("empty", "");
  Element z = MakeElement({Tensor::FromBytes(empty), Tensor::Scalar(0)});
  ASSERT_TRUE(op->Apply(z, OpContext{}).ok());
  EXPECT_EQ(z.tensors[2].nbytes(), 0u);
}

TEST(ReadFileTest, MissingFileAndDirectoryAreErrorsWithErrnoText) {
  ScratchDir dir;
  auto op = MakeOp("read_file", {}, SourceSchema());
  Element e = MakeElement({Tensor::FromBytes(dir.path() + "/missing.jpg"), Tensor::Scalar(0)});
  Status s = op->Apply(e, OpContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("missing.jpg': No such file or directory"));
  Element d = MakeElement({Tensor::FromBytes(dir.path()), Tensor::Scalar(0)});
  Status sd = op->Apply(d, OpContext{});
  ASSERT_FALSE(sd.ok());
  EXPECT_THAT(std::string(sd.message()), HasSubstr("a folder, only regular files are read"));
}

TEST(ReadFileTest, OtherFieldName) {
  Schema input({FieldSpec{"file", DType::kBytes, {kUnknownDim}}});
  ScratchDir dir;
  auto op = MakeOp("read_file", {{"field", std::string("file")}}, input);
  Element e = MakeElement({Tensor::FromBytes(dir.Write("x", "hello"))});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  EXPECT_EQ(e.tensors[1].bytes(), "hello");
  auto missing = Registry::Builtin().Create("read_file", {}, input);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("needs field 'path'"));
}

TEST(CastTest, ConvertsWithTruncationAndSaturation) {
  Schema input({FieldSpec{"x", DType::kF32, {4}}});
  auto to_u8 = MakeOp("cast", {{"field", std::string("x")}, {"dtype", std::string("u8")}}, input);
  EXPECT_EQ(to_u8->output_schema().field(0).ToString(), "x: u8[4]");
  Tensor x = Tensor::Empty(DType::kF32, {4});
  float values[4] = {-3.5f, 2.9f, 300.0f, 127.0f};
  std::memcpy(x.mutable_raw(), values, sizeof(values));
  Element e = MakeElement({x});
  ASSERT_TRUE(to_u8->Apply(e, OpContext{}).ok());
  ASSERT_EQ(e.tensors[0].DebugString(), "u8[4]");
  EXPECT_EQ(std::vector<uint8_t>(e.tensors[0].raw(), e.tensors[0].raw() + 4),
            (std::vector<uint8_t>{0, 2, 255, 127}));

  auto half = MakeOp("cast", {{"field", std::string("x")}, {"dtype", std::string("f16")}}, input);
  Element h = MakeElement({x});
  ASSERT_TRUE(half->Apply(h, OpContext{}).ok());
  EXPECT_EQ(HalfToFloat(h.tensors[0].data<uint16_t>()[0]), -3.5f);

  Schema img({FieldSpec{"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}}});
  auto to_f32 = MakeOp("cast", {{"dtype", std::string("f32")}}, img);
  Tensor u = Tensor::Empty(DType::kU8, {1, 2, 3});
  for (int i = 0; i < 6; ++i) u.mutable_raw()[i] = static_cast<uint8_t>(i * 50);
  Element f = MakeElement({u});
  ASSERT_TRUE(to_f32->Apply(f, OpContext{}).ok());
  EXPECT_EQ(f.tensors[0].DebugString(), "f32[1,2,3]");
  EXPECT_EQ(f.tensors[0].data<float>()[5], 250.0f);
}

TEST(CastTest, RejectsBytesAndUnknownDtypes) {
  auto bytes = Registry::Builtin().Create(
      "cast", {{"field", std::string("path")}, {"dtype", std::string("f32")}}, SourceSchema());
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("needs field 'path' as a numeric tensor"));
  auto bad = Registry::Builtin().Create(
      "cast", {{"field", std::string("label")}, {"dtype", std::string("f128")}}, SourceSchema());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::StartsWith("dtype: expected one of u8,"));
}

TEST(OneHotTest, ScalarAndVectorLabels) {
  auto op = MakeOp("one_hot", {{"num_classes", int64_t{4}}}, SourceSchema());
  EXPECT_EQ(op->output_schema().field(1).ToString(), "label: f32[4]");
  Element e = MakeElement({Tensor::FromBytes("p"), Tensor::Scalar(2)});
  ASSERT_TRUE(op->Apply(e, OpContext{}).ok());
  ASSERT_EQ(e.tensors[1].DebugString(), "f32[4]");
  const float* v = e.tensors[1].data<float>();
  EXPECT_EQ(std::vector<float>(v, v + 4), (std::vector<float>{0, 0, 1, 0}));

  Schema vec({FieldSpec{"y", DType::kI32, {2}}});
  auto op2 = MakeOp(
      "one_hot",
      {{"field", std::string("y")}, {"num_classes", int64_t{3}}, {"dtype", std::string("u8")}},
      vec);
  Tensor y = Tensor::Empty(DType::kI32, {2});
  y.mutable_data<int32_t>()[0] = 0;
  y.mutable_data<int32_t>()[1] = 2;
  Element f = MakeElement({y});
  ASSERT_TRUE(op2->Apply(f, OpContext{}).ok());
  ASSERT_EQ(f.tensors[0].DebugString(), "u8[2,3]");
  EXPECT_EQ(std::vector<uint8_t>(f.tensors[0].raw(), f.tensors[0].raw() + 6),
            (std::vector<uint8_t>{1, 0, 0, 0, 0, 1}));
}

TEST(OneHotTest, LabelOutOfRangeIsAnError) {
  auto op = MakeOp("one_hot", {{"num_classes", int64_t{4}}}, SourceSchema());
  Element e = MakeElement({Tensor::FromBytes("p"), Tensor::Scalar(4)});
  Status s = op->Apply(e, OpContext{});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("label 4 in field 'label' is outside [0, 4)"));
  Element n = MakeElement({Tensor::FromBytes("p"), Tensor::Scalar(-1)});
  EXPECT_FALSE(op->Apply(n, OpContext{}).ok());
}

}  // namespace
}  // namespace sluice::ops
