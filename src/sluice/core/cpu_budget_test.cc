#include "sluice/core/cpu_budget.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(CpuBudgetTest, ParsesCgroupV2) {
  EXPECT_EQ(ParseCgroupV2CpuMax("max 100000\n"), std::nullopt);
  EXPECT_DOUBLE_EQ(*ParseCgroupV2CpuMax("250000 100000\n"), 2.5);
  EXPECT_DOUBLE_EQ(*ParseCgroupV2CpuMax("50000 100000"), 0.5);
  EXPECT_EQ(ParseCgroupV2CpuMax("garbage"), std::nullopt);
  EXPECT_EQ(ParseCgroupV2CpuMax(""), std::nullopt);
}

TEST(CpuBudgetTest, ParsesCgroupV1) {
  EXPECT_EQ(ParseCgroupV1Quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_DOUBLE_EQ(*ParseCgroupV1Quota("150000\n", "100000\n"), 1.5);
  EXPECT_EQ(ParseCgroupV1Quota("x", "100000"), std::nullopt);
}

TEST(CpuBudgetTest, ParsesProcSelfCgroup) {
  EXPECT_EQ(ParseCgroupV2Path("0::/user.slice/session-1.scope\n"),
            "/user.slice/session-1.scope");
  EXPECT_EQ(ParseCgroupV2Path("12:cpu,cpuacct:/docker/abc\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupV2Path("12:cpu,cpuacct:/x\n0::/\n"), "/");
}

TEST(CpuBudgetTest, ThreadsRoundUpAndQuotaWins) {
  CpuBudget b;
  b.affinity_cpus = 64;
  b.quota_cpus = 2.5;
  EXPECT_DOUBLE_EQ(b.cpus(), 2.5);
  EXPECT_EQ(b.threads(), 3);
  b.quota_cpus = 0.3;
  EXPECT_EQ(b.threads(), 1);
  b.quota_cpus = 128;
  EXPECT_DOUBLE_EQ(b.cpus(), 64);
  b.quota_cpus.reset();
  EXPECT_EQ(b.threads(), 64);
}

TEST(CpuBudgetTest, ProbeReadsAFakeV1Hierarchy) {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("sluice-cgroup-" + std::to_string(getpid()));
  fs::create_directories(root / "cpu");
  std::ofstream(root / "cpu" / "cpu.cfs_quota_us") << "75000\n";
  std::ofstream(root / "cpu" / "cpu.cfs_period_us") << "100000\n";
  CpuBudget b = ProbeCpuBudget(root.string());
  fs::remove_all(root);
  ASSERT_TRUE(b.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*b.quota_cpus, 0.75);
  EXPECT_EQ(b.threads(), 1);
  EXPECT_NE(b.source.find("cgroup v1"), std::string::npos);
}

TEST(CpuBudgetTest, ParsesProcSelfCgroupV1CpuPath) {
  EXPECT_EQ(ParseCgroupV1CpuPath("4:memory:/m\n3:cpu,cpuacct:/docker/abc\n0::/\n"),
            "/docker/abc");
  EXPECT_EQ(ParseCgroupV1CpuPath("2:cpuacct:/a\n1:cpu:/sluice-tb-1-trainer\n"),
            "/sluice-tb-1-trainer");
  EXPECT_EQ(ParseCgroupV1CpuPath("2:cpuacct:/a\n0::/b\n"), std::nullopt);
}

// A process in a nested v1 cgroup: its own quota counts, and so does a tighter parent's.
TEST(CpuBudgetTest, ProbeWalksTheProcessesOwnV1Cgroup) {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("sluice-cgroup-v1-" + std::to_string(getpid()));
  auto quota = [&](const fs::path& dir, const char* q) {
    fs::create_directories(dir);
    std::ofstream(dir / "cpu.cfs_quota_us") << q << "\n";
    std::ofstream(dir / "cpu.cfs_period_us") << "100000\n";
  };
  quota(root / "cpu", "-1");
  quota(root / "cpu" / "outer", "-1");
  quota(root / "cpu" / "outer" / "trainer", "50000");
  std::ofstream(root / "self") << "5:memory:/x\n1:cpu:/outer/trainer\n";
  CpuBudget b = ProbeCpuBudget(root.string(), (root / "self").string());
  ASSERT_TRUE(b.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*b.quota_cpus, 0.5);
  EXPECT_NE(b.source.find("outer/trainer"), std::string::npos) << b.source;
  // A parent tighter than the child wins.
  quota(root / "cpu" / "outer", "25000");
  b = ProbeCpuBudget(root.string(), (root / "self").string());
  fs::remove_all(root);
  ASSERT_TRUE(b.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*b.quota_cpus, 0.25);
}

TEST(CpuBudgetTest, ProbeOfThisMachineIsSane) {
  CpuBudget b = ProbeCpuBudget();
  EXPECT_GE(b.affinity_cpus, 1);
  EXPECT_GE(b.threads(), 1);
  EXPECT_LE(b.cpus(), b.affinity_cpus);
}

}  // namespace
}  // namespace sluice
