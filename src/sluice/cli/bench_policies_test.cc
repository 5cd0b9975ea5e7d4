// `sluice bench --policies` splitting: fixed:... plans contain commas of their own.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/cli/commands.h"

namespace sluice::cli {
namespace {

using Policies = std::vector<std::string>;

TEST(SplitBenchPoliciesTest, FixedPlansKeepTheirCommasAndTwoInARowStaySeparate) {
  EXPECT_EQ(SplitBenchPolicies("none,full,oracle"), (Policies{"none", "full", "oracle"}));
  EXPECT_EQ(SplitBenchPolicies("none,fixed:cut=2,ratio=0.5,read=local,sluice"),
            (Policies{"none", "fixed:cut=2,ratio=0.5,read=local", "sluice"}));
  EXPECT_EQ(SplitBenchPolicies("fixed:cut=batch,ratio=1.0,fixed:cut=4,ratio=0.3,compress=lz4"),
            (Policies{"fixed:cut=batch,ratio=1.0", "fixed:cut=4,ratio=0.3,compress=lz4"}));
}

}  // namespace
}  // namespace sluice::cli
