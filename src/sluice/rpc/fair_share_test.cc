#include "sluice/rpc/fair_share.h"

#include <map>

#include "gtest/gtest.h"

namespace sluice::rpc {
namespace {

constexpr int64_t kMs = 1000000;

// Serves `tasks` tasks one at a time with every client always waiting; each task of client
// id costs cost_ms[id]. Returns the CPU (ms) each client got.
std::map<uint64_t, double> Serve(FairShare& f, const std::map<uint64_t, int64_t>& cost_ms,
                                 int tasks, int64_t* now) {
  std::map<uint64_t, double> cpu;
  for (const auto& [id, cost] : cost_ms) f.Wait(id, *now);
  for (int i = 0; i < tasks; ++i) {
    const std::optional<uint64_t> id = f.Next(*now);
    if (!id.has_value()) {
      ADD_FAILURE() << "no client waits";
      break;
    }
    *now += cost_ms.at(*id) * kMs;
    f.Charge(*id, cost_ms.at(*id) * kMs, *now);
    cpu[*id] += static_cast<double>(cost_ms.at(*id));
    f.Wait(*id, *now);  // always more work
  }
  return cpu;
}

TEST(FairShareTest, SessionsOfUnequalCostsGetEqualCpuNotEqualTasks) {
  FairShare f(/*activity_window_ns=*/1000 * kMs);
  f.Add(1, 1);
  f.Add(2, 1);
  int64_t now = 0;
  // First come first served would give client 1 four times client 2's CPU.
  std::map<uint64_t, double> cpu = Serve(f, {{1, 4}, {2, 1}}, 1000, &now);
  EXPECT_NEAR(cpu[1] / cpu[2], 1.0, 0.02);
}

TEST(FairShareTest, WeightsDivideTheCpu) {
  FairShare f(1000 * kMs);
  f.Add(1, 3);
  f.Add(2, 1);
  int64_t now = 0;
  std::map<uint64_t, double> cpu = Serve(f, {{1, 2}, {2, 2}}, 1000, &now);
  EXPECT_NEAR(cpu[1] / cpu[2], 3.0, 0.05);
}

TEST(FairShareTest, IdleTimeIsNotSavedUpAsCredit) {
  FairShare f(10 * kMs);
  f.Add(1, 1);
  f.Add(2, 1);
  int64_t now = 0;
  Serve(f, {{1, 1}}, 200, &now);  // client 2 has nothing to do
  // Client 2 starts waiting: it shares from now on, not 200 tasks in a row.
  f.Wait(2, now);
  int twos = 0;
  for (int i = 0; i < 20; ++i) {
    const std::optional<uint64_t> id = f.Next(now);
    ASSERT_TRUE(id.has_value());
    twos += *id == 2;
    now += kMs;
    f.Charge(*id, kMs, now);
    f.Wait(*id, now);
  }
  EXPECT_GE(twos, 9);
  EXPECT_LE(twos, 11);
}

TEST(FairShareTest, NothingWaitingGivesNothing) {
  FairShare f(kMs);
  EXPECT_FALSE(f.Next(0).has_value());
  f.Add(1, 1);
  EXPECT_FALSE(f.Next(0).has_value());
  f.Wait(1, 0);
  EXPECT_EQ(f.waiting(1), 1);
  EXPECT_EQ(f.Next(0), 1u);
  EXPECT_FALSE(f.Next(0).has_value());
  f.Wait(7, 0);  // unknown: ignored
  EXPECT_FALSE(f.Next(0).has_value());
}

TEST(FairShareTest, TheShareIsTheBudgetOverTheActiveWeights) {
  FairShare f(/*activity_window_ns=*/100 * kMs);
  f.Add(1, 1);
  EXPECT_DOUBLE_EQ(f.Share(1, 2.0, 0), 2.0);  // alone, even idle
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0), 0);  // a newcomer would get it all
  f.Wait(1, 0);
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0), 1);  // a newcomer of weight 1 would get half
  f.Add(2, 3);
  // Client 2 is idle: client 1 has it all; client 2 would get its weight's part.
  EXPECT_DOUBLE_EQ(f.Share(1, 2.0, 0), 2.0);
  EXPECT_DOUBLE_EQ(f.Share(2, 2.0, 0), 1.5);
  f.Wait(2, 0);
  EXPECT_DOUBLE_EQ(f.Share(1, 2.0, 0), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(2, 2.0, 0), 1.5);
  // Client 2 served and done: it counts for the activity window, then no longer.
  ASSERT_EQ(f.Next(0), 1u);
  f.Charge(1, kMs, kMs);
  ASSERT_EQ(f.Next(kMs), 2u);
  f.Charge(2, kMs, 2 * kMs);
  f.Wait(1, 2 * kMs);
  EXPECT_DOUBLE_EQ(f.Share(1, 2.0, 50 * kMs), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(1, 2.0, 200 * kMs), 2.0);
  f.Remove(1);
  EXPECT_EQ(f.Share(1, 2.0, 200 * kMs), 0);
}

// A trainer's own sessions (one group: a plan switch opens new ones while the old close) do
// not count against each other; another trainer's do.
TEST(FairShareTest, ClientsOfOneGroupDoNotCountAgainstEachOther) {
  FairShare f(100 * kMs);
  f.Add(1, 1, /*group=*/7);
  f.Add(2, 1, /*group=*/7);
  f.Wait(1, 0);
  f.Wait(2, 0);
  EXPECT_DOUBLE_EQ(f.Share(1, 1.0, 0), 1.0);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 0), 1.0);
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0), 2);
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0, /*exclude_group=*/7), 0);
  f.Add(3, 1, /*group=*/9);
  f.Wait(3, 0);
  EXPECT_DOUBLE_EQ(f.Share(1, 1.0, 0), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(3, 1.0, 0), 1.0 / 3);  // two sessions of group 7 against it
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0, 7), 1);
}
}  // namespace
}  // namespace sluice::rpc
