#include "sluice/ops/op.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/op_util.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

OpSchema TestSchema() {
  return MakeOpSchema(
      "test_op", /*random=*/false, "for tests",
      {Arg("size", ArgType::kIntList).Length(2).Range(1, 1000).Doc("[h, w]"),
       Arg("p", ArgType::kFloat).Default(ArgValue(0.5)).Range(0, 1).Doc("probability"),
       Arg("n", ArgType::kInt).Default(ArgValue(int64_t{3})).Min(1).Doc("count"),
       Arg("flag", ArgType::kBool).Default(ArgValue(false)).Doc("a flag"),
       Arg("mode", ArgType::kString).Default("a").Choices({"a", "b"}).Doc("mode"),
       Arg("name", ArgType::kString).Default("x").Doc("free text"),
       Arg("mean", ArgType::kFloatList).Default(ArgValue(std::vector<double>{0.5})).Doc("means"),
       Arg("scale", ArgType::kFloatList)
           .Default(ArgValue(std::vector<double>{0.08, 1.0}))
           .Length(2)
           .Doc("range")});
}

std::string ErrorOf(const std::map<std::string, ArgValue>& raw) {
  auto args = BindArgs(TestSchema(), raw);
  EXPECT_FALSE(args.ok());
  return args.ok() ? "" : std::string(args.status().message());
}

TEST(ArgTest, TypeNamesAndValueStrings) {
  EXPECT_EQ(ArgTypeName(ArgType::kInt), "int");
  EXPECT_EQ(ArgTypeName(ArgType::kFloat), "float");
  EXPECT_EQ(ArgTypeName(ArgType::kBool), "bool");
  EXPECT_EQ(ArgTypeName(ArgType::kString), "string");
  EXPECT_EQ(ArgTypeName(ArgType::kIntList), "int list");
  EXPECT_EQ(ArgTypeName(ArgType::kFloatList), "float list");
  EXPECT_EQ(ArgValueToString(ArgValue(int64_t{3})), "3");
  EXPECT_EQ(ArgValueToString(ArgValue(0.5)), "0.5");
  EXPECT_EQ(ArgValueToString(ArgValue(1.0)), "1.0");
  EXPECT_EQ(ArgValueToString(ArgValue(0.1)), "0.1");
  EXPECT_EQ(ArgValueToString(ArgValue(true)), "true");
  EXPECT_EQ(ArgValueToString(ArgValue(std::string("x\"y"))), "\"x\\\"y\"");
  EXPECT_EQ(ArgValueToString(ArgValue(std::vector<int64_t>{1, 2})), "[1,2]");
  EXPECT_EQ(ArgValueToString(ArgValue(std::vector<double>{0.75, 4.0 / 3.0})),
            "[0.75,1.3333333333333333]");
}

TEST(ArgTest, FindArg) {
  OpSchema schema = TestSchema();
  ASSERT_NE(schema.FindArg("p"), nullptr);
  EXPECT_EQ(schema.FindArg("p")->type, ArgType::kFloat);
  EXPECT_EQ(schema.FindArg("nope"), nullptr);
}

TEST(BindArgsTest, FillsDefaultsAndKeepsGivenValues) {
  auto args = BindArgs(TestSchema(), {{"size", std::vector<int64_t>{224, 200}}});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->IntList("size"), (std::vector<int64_t>{224, 200}));
  EXPECT_EQ(args->Float("p"), 0.5);
  EXPECT_EQ(args->Int("n"), 3);
  EXPECT_FALSE(args->Bool("flag"));
  EXPECT_EQ(args->String("mode"), "a");
  EXPECT_EQ(args->values().size(), TestSchema().args.size());
}

TEST(BindArgsTest, Coercions) {
  auto args = BindArgs(TestSchema(), {{"size", int64_t{224}},
                                      {"p", int64_t{1}},
                                      {"mean", std::vector<int64_t>{0, 1, 2}},
                                      {"scale", 0.5},
                                      {"n", 7.0}});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->IntList("size"), (std::vector<int64_t>{224, 224}));  // broadcast
  EXPECT_EQ(args->Float("p"), 1.0);                                    // int -> float
  EXPECT_EQ(args->FloatList("mean"), (std::vector<double>{0, 1, 2}));  // ints -> floats
  EXPECT_EQ(args->FloatList("scale"), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(args->Int("n"), 7);  // a whole float is an int
  auto single = BindArgs(TestSchema(), {{"size", int64_t{2}}, {"mean", 0.25}});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->FloatList("mean"), (std::vector<double>{0.25}));
}

TEST(BindArgsTest, UnknownArgumentListsTheValidOnes) {
  std::string e = ErrorOf({{"size", int64_t{2}}, {"sizes", int64_t{2}}});
  EXPECT_THAT(e, StartsWith("sizes: unknown argument"));
  EXPECT_THAT(e, HasSubstr("size, p, n, flag, mode, name, mean, scale"));
}

TEST(BindArgsTest, MissingRequired) {
  EXPECT_THAT(ErrorOf({}), StartsWith("size: missing required argument"));
}

TEST(BindArgsTest, TypeErrorsNameTheArgument) {
  EXPECT_EQ(ErrorOf({{"size", std::vector<int64_t>{1, 2, 3}}}),
            "size: expected 2 ints, got 3 ([1,2,3])");
  EXPECT_EQ(ErrorOf({{"size", int64_t{2}}, {"p", std::string("abc")}}),
            "p: expected a float, got \"abc\"");
  EXPECT_THAT(ErrorOf({{"size", std::vector<double>{1.5, 2}}}),
              StartsWith("size: expected 2 ints"));
  EXPECT_THAT(ErrorOf({{"size", int64_t{2}}, {"n", 2.5}}),
              StartsWith("n: expected an int, got 2.5"));
  EXPECT_THAT(ErrorOf({{"size", int64_t{2}}, {"flag", int64_t{1}}}),
              StartsWith("flag: expected a bool"));
  EXPECT_THAT(ErrorOf({{"size", int64_t{2}}, {"name", int64_t{1}}}),
              StartsWith("name: expected a string, got 1"));
  EXPECT_THAT(ErrorOf({{"size", int64_t{2}}, {"mean", std::vector<double>{}}}),
              StartsWith("mean: expected a non-empty list of floats"));
  EXPECT_THAT(ErrorOf({{"size", int64_t{2}}, {"scale", std::string("x")}}),
              StartsWith("scale: expected 2 floats"));
}

TEST(BindArgsTest, ChoicesAndBounds) {
  EXPECT_EQ(ErrorOf({{"size", int64_t{2}}, {"mode", std::string("c")}}),
            "mode: expected one of a, b, got \"c\"");
  EXPECT_EQ(ErrorOf({{"size", int64_t{2}}, {"p", 1.5}}), "p: must be in [0, 1], got 1.5");
  EXPECT_EQ(ErrorOf({{"size", int64_t{2}}, {"n", int64_t{0}}}), "n: must be >= 1, got 0");
  EXPECT_EQ(ErrorOf({{"size", std::vector<int64_t>{0, 5}}}),
            "size: every entry must be in [1, 1000], got [0,5]");
  EXPECT_TRUE(BindArgs(TestSchema(), {{"size", int64_t{1000}}, {"p", int64_t{0}}}).ok());
}

// inf and nan mean nothing as an argument: every float is finite, bounded or not.
TEST(BindArgsTest, FloatsAreFinite) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ErrorOf({{"size", int64_t{2}}, {"p", std::nan("")}}),
            "p: must be a finite number, got nan");
  EXPECT_EQ(ErrorOf({{"size", int64_t{2}}, {"mean", std::vector<double>{0.5, inf}}}),
            "mean: every entry must be a finite number, got [0.5,inf]");
  EXPECT_EQ(ErrorOf({{"size", int64_t{2}}, {"mean", -inf}}),
            "mean: every entry must be a finite number, got [-inf]");
  EXPECT_THAT(ErrorOf({{"size", int64_t{2}}, {"n", inf}}), StartsWith("n: expected an int"));
}

// Every int, float and list argument of every built-in op has a lower and an upper bound, so
// that no spec can ask an op for an unbounded size, count or value (docs/OPS.md lists them).
TEST(BuiltinOpsTest, EveryNumericArgumentIsBounded) {
  for (const std::string& name : Registry::Builtin().Names()) {
    for (const ArgSchema& a : Registry::Builtin().Find(name)->schema.args) {
      if (a.type == ArgType::kBool || a.type == ArgType::kString) continue;
      EXPECT_TRUE(a.min.has_value()) << name << "." << a.name << " has no lower bound";
      EXPECT_TRUE(a.max.has_value()) << name << "." << a.name << " has no upper bound";
      if (a.max.has_value()) {
        EXPECT_LE(std::abs(*a.max), 1e38) << name << "." << a.name;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::ops
