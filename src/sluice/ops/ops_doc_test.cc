// docs/OPS.md documents every op; this test keeps it in line with the schemas: each op has a
// section, and each argument a table row spelled exactly as DocRow() spells it. On failure it
// prints the rows the document should contain.
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

std::string Bounds(const ArgSchema& a) {
  // Whole numbers in int64's range print as ints (a cast outside the range is undefined).
  auto num = [](double v) {
    const bool whole = std::fabs(v) < 9.2e18 && v == std::trunc(v);
    return whole ? absl::StrCat(static_cast<int64_t>(v)) : ArgValueToString(ArgValue(v));
  };
  if (a.min && a.max) return absl::StrCat("in [", num(*a.min), ", ", num(*a.max), "]");
  if (a.min) return absl::StrCat(">= ", num(*a.min));
  if (a.max) return absl::StrCat("<= ", num(*a.max));
  return "";
}

std::string DocRow(const ArgSchema& a) {
  std::string type(ArgTypeName(a.type));
  if (a.list_length > 0) absl::StrAppend(&type, "[", a.list_length, "]");
  if (!a.choices.empty()) absl::StrAppend(&type, ": ", absl::StrJoin(a.choices, " \\| "));
  std::string bounds = Bounds(a);
  if (!bounds.empty()) {
    bool list = a.type == ArgType::kIntList || a.type == ArgType::kFloatList;
    absl::StrAppend(&type, list ? ", each " : ", ", bounds);
  }
  std::string def =
      a.default_value ? absl::StrCat("`", ArgValueToString(*a.default_value), "`") : "required";
  return absl::StrCat("| `", a.name, "` | ", type, " | ", def, " | ", a.doc, " |");
}

TEST(OpsDocTest, EveryOpAndArgumentIsDocumentedAsInTheSchema) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/OPS.md");
  ASSERT_TRUE(in.good()) << "docs/OPS.md is missing";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string doc = buffer.str();
  std::string expected;
  bool ok = true;
  for (const std::string& name : Registry::Builtin().Names()) {
    const OpSchema& schema = Registry::Builtin().Find(name)->schema;
    std::string heading = absl::StrCat("### `", name, "`", schema.random ? " (random)" : "");
    ok &= doc.find(heading + "\n") != std::string::npos;
    absl::StrAppend(&expected, heading, "\n");
    for (const ArgSchema& a : schema.args) {
      ok &= doc.find(DocRow(a) + "\n") != std::string::npos;
      absl::StrAppend(&expected, DocRow(a), "\n");
    }
  }
  EXPECT_TRUE(ok) << "docs/OPS.md is out of date; it should contain:\n" << expected;
}

}  // namespace
}  // namespace sluice::ops
