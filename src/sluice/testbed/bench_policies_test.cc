// `sluice bench --policies` splitting: fixed:... plans contain commas of their own.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/testbed/bench_runner.h"

namespace sluice::testbed {
namespace {

using Policies = std::vector<std::string>;

TEST(SplitBenchPoliciesTest, FixedPlansKeepTheirCommasAndTwoInARowStaySeparate) {
  EXPECT_EQ(SplitBenchPolicies("none,full,oracle"), (Policies{"none", "full", "oracle"}));
  EXPECT_EQ(SplitBenchPolicies("none,fixed:cut=2,ratio=0.5,read=local,sluice"),
            (Policies{"none", "fixed:cut=2,ratio=0.5,read=local", "sluice"}));
  EXPECT_EQ(SplitBenchPolicies("fixed:cut=batch,ratio=1.0,fixed:cut=4,ratio=0.3,compress=lz4"),
            (Policies{"fixed:cut=batch,ratio=1.0", "fixed:cut=4,ratio=0.3,compress=lz4"}));
}

// The oracle's sweep stops a run at twice the wall time of the fastest run so far (the
// highest rate, not the shortest run): such a run measures under half that rate.
TEST(OracleRunLimitTest, TwiceTheFastestRunsWallTime) {
  EXPECT_EQ(OracleRunLimit(nlohmann::json::array()).limit_s, 0);
  nlohmann::json sweep = nlohmann::json::array();
  sweep.push_back({{"policy_arg", "fixed:cut=1,ratio=0.5"}, {"samples_per_s", 1400.0},
                   {"wall_s", 9.5}});
  sweep.push_back({{"policy_arg", "none"}, {"samples_per_s", 1495.0}, {"wall_s", 9.0}});
  sweep.push_back({{"policy_arg", "fixed:cut=5,ratio=1"}, {"error", "gave up"}});
  sweep.push_back({{"policy_arg", "fixed:cut=1,ratio=1"}, {"samples_per_s", 82.0},
                   {"wall_s", 161.8}});
  const SweepRunLimit limit = OracleRunLimit(sweep);
  EXPECT_DOUBLE_EQ(limit.limit_s, 18.0);
  EXPECT_EQ(limit.fastest, "none, 1495 samples/s in 9.0 s");
  // A faster run with a longer wall time (more steps measured) sets the limit.
  sweep.push_back({{"policy_arg", "fixed:cut=3,ratio=0.5"}, {"samples_per_s", 1600.0},
                   {"wall_s", 12.0}});
  EXPECT_DOUBLE_EQ(OracleRunLimit(sweep).limit_s, 24.0);
}

}  // namespace
}  // namespace sluice::testbed
