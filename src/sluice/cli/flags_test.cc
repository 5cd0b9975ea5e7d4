#include "sluice/cli/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Values {
  int64_t count = 10;
  double fraction = 0.5;
  std::string out = "out";
  bool verbose = false;
  bool secret = false;
};

FlagParser MakeParser(Values& v) {
  FlagParser parser("demo", "[--count N] FILE");
  parser.AddInt("count", &v.count, "N", "how many", /*min=*/1, /*max=*/100);
  parser.AddDouble("fraction", &v.fraction, "F", "share", /*min=*/0.0, /*max=*/1.0);
  parser.AddString("out", &v.out, "DIR", "where");
  parser.AddBool("verbose", &v.verbose, "talk more");
  parser.AddBool("secret", &v.secret, "not listed", /*hidden=*/true);
  return parser;
}

TEST(FlagParserTest, DefaultsStayWhenNothingIsGiven) {
  Values v;
  FlagParser parser = MakeParser(v);
  ASSERT_TRUE(parser.Parse({}).ok());
  EXPECT_EQ(v.count, 10);
  EXPECT_EQ(v.fraction, 0.5);
  EXPECT_EQ(v.out, "out");
  EXPECT_FALSE(v.verbose);
  EXPECT_FALSE(parser.IsSet("count"));
  EXPECT_FALSE(parser.help_requested());
}

TEST(FlagParserTest, ParsesBothSpellingsAndPositionals) {
  Values v;
  FlagParser parser = MakeParser(v);
  ASSERT_TRUE(
      parser.Parse({"a.yaml", "--count", "7", "--fraction=0.25", "--out", "x", "--verbose", "b"})
          .ok());
  EXPECT_EQ(v.count, 7);
  EXPECT_EQ(v.fraction, 0.25);
  EXPECT_EQ(v.out, "x");
  EXPECT_TRUE(v.verbose);
  EXPECT_TRUE(parser.IsSet("count"));
  EXPECT_THAT(parser.positional(), ElementsAre("a.yaml", "b"));
}

TEST(FlagParserTest, DoubleDashEndsFlags) {
  Values v;
  FlagParser parser = MakeParser(v);
  ASSERT_TRUE(parser.Parse({"--", "--count"}).ok());
  EXPECT_THAT(parser.positional(), ElementsAre("--count"));
  EXPECT_EQ(v.count, 10);
}

TEST(FlagParserTest, BoolAcceptsExplicitValue) {
  Values v;
  v.verbose = true;
  FlagParser parser = MakeParser(v);
  ASSERT_TRUE(parser.Parse({"--verbose=false"}).ok());
  EXPECT_FALSE(v.verbose);
}

TEST(FlagParserTest, HelpIsRecognised) {
  Values v;
  FlagParser parser = MakeParser(v);
  ASSERT_TRUE(parser.Parse({"--help"}).ok());
  EXPECT_TRUE(parser.help_requested());
  FlagParser short_form = MakeParser(v);
  ASSERT_TRUE(short_form.Parse({"-h"}).ok());
  EXPECT_TRUE(short_form.help_requested());
}

struct BadCase {
  std::vector<std::string> args;
  std::string message;
};

void PrintTo(const BadCase& c, std::ostream* os) {
  for (const std::string& a : c.args) *os << a << ' ';
  *os << "-> " << c.message;
}

class FlagParserErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(FlagParserErrorTest, RejectsWithMessageNamingTheFlag) {
  Values v;
  FlagParser parser = MakeParser(v);
  Status status = parser.Parse(GetParam().args);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FlagParserErrorTest,
    ::testing::Values(BadCase{{"--nope"}, "unknown flag '--nope'"},
                      BadCase{{"-x"}, "unknown flag '-x'"},
                      BadCase{{"--count"}, "--count: missing value (N)"},
                      BadCase{{"--count", "abc"}, "--count: expected an integer, got 'abc'"},
                      BadCase{{"--count", "12x"}, "expected an integer"},
                      BadCase{{"--count=0"}, "--count: expected a value between 1 and 100, got 0"},
                      BadCase{{"--count", "101"}, "between 1 and 100"},
                      BadCase{{"--fraction", "x"}, "--fraction: expected a number"},
                      BadCase{{"--fraction", "1.5"}, "between 0 and 1"},
                      BadCase{{"--verbose=maybe"}, "expected true or false"}));

TEST(FlagParserTest, UsageListsVisibleFlagsWithDefaults) {
  Values v;
  FlagParser parser = MakeParser(v);
  const std::string usage = parser.Usage();
  EXPECT_THAT(usage, HasSubstr("usage: sluice demo [--count N] FILE"));
  EXPECT_THAT(usage, HasSubstr("--count N"));
  EXPECT_THAT(usage, HasSubstr("how many (default: 10)"));
  EXPECT_THAT(usage, HasSubstr("where (default: \"out\")"));
  EXPECT_THAT(usage, HasSubstr("--verbose"));
  EXPECT_THAT(usage, HasSubstr("--help"));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("secret")));
}

}  // namespace
}  // namespace sluice::cli
