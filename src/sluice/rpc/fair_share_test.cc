#include "sluice/rpc/fair_share.h"

#include <map>

#include "gtest/gtest.h"

// Its own namespace: test files are compiled together (SLUICE_UNITY_TESTS).
namespace sluice::rpc::fair_share_test {
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
  f.Remove(1, 200 * kMs);
  EXPECT_EQ(f.Share(1, 2.0, 200 * kMs), 0);
}

// A client that left lingers for the parties that were there before it left (they were
// sharing with it), not for one that joined after, nor for a newcomer's view.
TEST(FairShareTest, AClientThatLeftLingersOnlyForThePartiesThatSharedWithIt) {
  FairShare f(100 * kMs);
  f.Add(1, 1, /*group=*/7, /*now_ns=*/0);
  f.Add(2, 1, /*group=*/9, 0);
  f.Wait(1, 0);
  f.Wait(2, 0);
  f.Remove(1, 10 * kMs);  // group 7 leaves, within its activity window
  // Group 9 was sharing with it: it still counts, for 9's view and 9's share.
  EXPECT_DOUBLE_EQ(f.ActiveWeight(10 * kMs, /*exclude_group=*/9), 1);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 10 * kMs), 0.5);
  // A newcomer (group 5, no client here) does not count it.
  EXPECT_DOUBLE_EQ(f.ActiveWeight(10 * kMs, 5), 1);  // group 9 only
  // Group 5 joins after 7 left: its share and view leave 7 out.
  f.Add(3, 1, /*group=*/5, 20 * kMs);
  f.Wait(3, 20 * kMs);
  EXPECT_DOUBLE_EQ(f.ActiveWeight(20 * kMs, 5), 1);
  EXPECT_DOUBLE_EQ(f.Share(3, 1.0, 20 * kMs), 0.5);      // with 9, not with 7
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 20 * kMs), 1.0 / 3);  // 9 sees 7 and 5
  // Past the window, 9 no longer sees 7 either.
  EXPECT_DOUBLE_EQ(f.ActiveWeight(200 * kMs, 9), 1);  // group 5, waiting
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
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0), 1);  // one party
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0, /*exclude_group=*/7), 0);
  f.Add(3, 1, /*group=*/9);
  f.Wait(3, 0);
  EXPECT_DOUBLE_EQ(f.Share(1, 1.0, 0), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(3, 1.0, 0), 0.5);  // group 7's two sessions count as one trainer
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0, 7), 1);
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0), 2);
  // A party weighs its heaviest active session; clients without a group each count.
  f.Add(2, 3, /*group=*/7);
  f.Add(4, 1);
  f.Add(5, 1);
  f.Wait(4, 0);
  f.Wait(5, 0);
  EXPECT_DOUBLE_EQ(f.ActiveWeight(0), 3 + 1 + 1 + 1);
  EXPECT_DOUBLE_EQ(f.Share(3, 6.0, 0), 1.0);
  EXPECT_DOUBLE_EQ(f.Share(1, 6.0, 0), 6.0 * 1 / (1 + 1 + 1 + 1));  // in place of its party
}

// A plan switch closes a trainer's session and opens its next one a moment later: for that
// gap the other trainer's share does not jump to the whole worker.
TEST(FairShareTest, ASessionClosedByItsTrainersPlanSwitchKeepsItsShareUntilTheNextOneRuns) {
  FairShare f(100 * kMs);
  f.Add(1, 1, /*group=*/7);  // trainer A
  f.Add(2, 1, /*group=*/9);  // trainer B
  f.Wait(1, 0);
  f.Wait(2, 0);
  ASSERT_EQ(f.Next(0), 1u);
  f.Charge(1, kMs, kMs);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 2 * kMs), 0.5);
  f.Remove(1, 2 * kMs);  // A re-plans: its session closes
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 3 * kMs), 0.5);
  EXPECT_DOUBLE_EQ(f.ActiveWeight(3 * kMs, /*exclude_group=*/9), 1);
  EXPECT_EQ(f.Share(1, 1.0, 3 * kMs), 0);  // it is gone for itself
  EXPECT_EQ(f.Next(3 * kMs), 2u);          // and never served again
  f.Charge(2, kMs, 4 * kMs);
  f.Add(3, 1, /*group=*/7);  // A's next session: counted once it has work, in place of the old
  f.Wait(3, 5 * kMs);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 5 * kMs), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(3, 1.0, 5 * kMs), 0.5);
}

// A trainer that leaves for good gives its share back when its activity window has passed.
TEST(FairShareTest, ASessionThatLeavesForGoodGivesItsShareBackAfterTheWindow) {
  FairShare f(100 * kMs);
  f.Add(1, 1, /*group=*/7);
  f.Add(2, 1, /*group=*/9);
  f.Wait(1, 0);
  f.Wait(2, 0);
  f.Remove(1, 10 * kMs);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 10 * kMs), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 109 * kMs), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 111 * kMs), 1.0);
  // A session that was idle past its window when it closed is forgotten at once.
  f.Add(4, 1, /*group=*/5);
  f.Remove(4, 200 * kMs);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 200 * kMs), 1.0);
  // And one removed without a group lingers the same way.
  f.Add(6, 1);
  f.Wait(6, 300 * kMs);
  f.Remove(6, 300 * kMs);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 350 * kMs), 0.5);
  EXPECT_DOUBLE_EQ(f.Share(2, 1.0, 401 * kMs), 1.0);
}

}  // namespace
}  // namespace sluice::rpc::fair_share_test
