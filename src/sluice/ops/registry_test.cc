#include "sluice/ops/registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

using ::testing::HasSubstr;

Schema SourceSchema() {
  return Schema(
      {FieldSpec{"path", DType::kBytes, {kUnknownDim}}, FieldSpec{"label", DType::kI64, {}}});
}

TEST(RegistryTest, BuiltinHasEveryOpSorted) {
  const Registry& r = Registry::Builtin();
  std::vector<std::string> expected = {"add_noise",
                                       "cast",
                                       "center_crop",
                                       "clip",
                                       "color_jitter",
                                       "crop_box",
                                       "decode_image",
                                       "decode_jpeg",
                                       "decode_png",
                                       "decode_wav",
                                       "log",
                                       "mel",
                                       "normalize",
                                       "normalize_features",
                                       "one_hot",
                                       "pad_or_trim",
                                       "rand_augment",
                                       "random_flip",
                                       "random_resized_crop",
                                       "read_box",
                                       "read_file",
                                       "resample",
                                       "resize",
                                       "rfft",
                                       "spectrogram"};
  EXPECT_EQ(r.Names(), expected);
  EXPECT_EQ(&Registry::Builtin(), &r);
  for (const std::string& name : expected) {
    const OpDef* def = r.Find(name);
    ASSERT_NE(def, nullptr) << name;
    EXPECT_EQ(def->schema.name, name);
    EXPECT_FALSE(def->schema.doc.empty()) << name;
    for (const ArgSchema& a : def->schema.args)
      EXPECT_FALSE(a.doc.empty()) << name << "." << a.name;
  }
  EXPECT_EQ(r.Find("nope"), nullptr);
}

TEST(RegistryTest, RegisterRejectsDuplicates) {
  Registry r;
  OpDef def;
  def.schema = MakeOpSchema("x", false, "doc", {});
  def.factory = [](const OpSchema&, const Args&, const Schema&) -> StatusOr<std::unique_ptr<Op>> {
    return absl::UnimplementedError("x");
  };
  EXPECT_TRUE(r.Register(def).ok());
  Status again = r.Register(def);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(r.Names(), std::vector<std::string>{"x"});
}

TEST(RegistryTest, UnknownOpSuggestsTheNearestName) {
  auto op = Registry::Builtin().Create("decode_jepg", {}, SourceSchema());
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(op.status().message()),
              HasSubstr("unknown op 'decode_jepg' (did you mean 'decode_jpeg'"));
  EXPECT_THAT(std::string(op.status().message()), HasSubstr("sluice ops"));
  auto far = Registry::Builtin().Create("zzzzzzzz", {}, SourceSchema());
  ASSERT_FALSE(far.ok());
  EXPECT_THAT(std::string(far.status().message()), ::testing::Not(HasSubstr("did you mean")));
  auto part = Registry::Builtin().Create("crop", {}, SourceSchema());
  ASSERT_FALSE(part.ok());
  EXPECT_THAT(std::string(part.status().message()), HasSubstr("center_crop"));
}

TEST(RegistryTest, CreateBindsArgsAndChecksSchema) {
  const Registry& r = Registry::Builtin();
  auto read = r.Create("read_file", {}, SourceSchema());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ((*read)->output_schema().ToString(), "{path: bytes[?], label: i64[], data: bytes[?]}");
  EXPECT_EQ((*read)->schema().name, "read_file");
  EXPECT_EQ((*read)->args().String("field"), "path");

  auto bad_arg = r.Create("read_file", {{"field", int64_t{3}}}, SourceSchema());
  ASSERT_FALSE(bad_arg.ok());
  EXPECT_THAT(std::string(bad_arg.status().message()),
              ::testing::StartsWith("field: expected a string"));

  auto no_data = r.Create("decode_jpeg", {}, SourceSchema());
  ASSERT_FALSE(no_data.ok());
  EXPECT_THAT(std::string(no_data.status().message()), HasSubstr("needs field 'data' as bytes[?]"));
  EXPECT_THAT(std::string(no_data.status().message()), HasSubstr("path, label"));
}

}  // namespace
}  // namespace sluice::ops
