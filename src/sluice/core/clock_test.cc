#include "sluice/core/clock.h"

#include "gtest/gtest.h"

namespace sluice {
namespace {

// The thread's time on a CPU, as the scheduler counts it, follows its CPU clock; its time
// waiting for a CPU never goes back. Spinning is bounded by the CPU clock, not the wall's.
TEST(ClockTest, ThreadSchedTimesCountTheThreadsRunningAndWaiting) {
  const std::optional<SchedTimes> before = ThreadSchedTimes();
  if (!before.has_value()) GTEST_SKIP() << "this kernel keeps no /proc/thread-self/schedstat";
  const int64_t cpu_start = ThreadCpuNanos();
  volatile uint64_t sink = 0;
  while (ThreadCpuNanos() - cpu_start < 20'000'000) {
    for (int i = 0; i < 1000; ++i) sink = sink + static_cast<uint64_t>(i);
  }
  const int64_t cpu = ThreadCpuNanos() - cpu_start;
  const std::optional<SchedTimes> after = ThreadSchedTimes();
  ASSERT_TRUE(after.has_value());
  const int64_t run = after->run_ns - before->run_ns;
  // Both clocks count the same time on a CPU; the schedstat one is updated at the scheduler's
  // ticks and switches, so it may trail the CPU clock by a tick (10 ms at 100 Hz).
  EXPECT_GE(run, cpu - 12'000'000) << "cpu " << cpu;
  EXPECT_LE(run, cpu + 12'000'000) << "cpu " << cpu;
  EXPECT_GE(after->wait_ns, before->wait_ns);
}

}  // namespace
}  // namespace sluice
