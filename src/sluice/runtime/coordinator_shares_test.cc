// Coordinator::SetShares (changing the ratio without a new Loader) and spill_over = false
// (FastFlow's counters).
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/runtime/coordinator.h"

namespace sluice::runtime {
namespace {

using Acquired = Coordinator::Acquired;

std::unique_ptr<Coordinator> Make(std::vector<double> shares, bool spill_over, int max_open = 100,
                                  uint64_t per_epoch = 1000) {
  CoordinatorOptions o;
  o.samples_per_epoch = per_epoch;
  o.split_size = 1;
  o.epochs = 1;
  o.spill_over = spill_over;
  std::vector<ConsumerConfig> consumers;
  for (size_t i = 0; i < shares.size(); ++i) {
    consumers.push_back(ConsumerConfig{absl::StrCat("c", i), shares[i], max_open, true});
  }
  auto made = Coordinator::Create(o, std::move(consumers));
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

// Round-robin TryAcquire over every consumer, `rounds` times, delivering each split at once;
// returns splits per consumer.
std::vector<int> Take(Coordinator& c, int rounds) {
  std::vector<int> got(c.num_consumers(), 0);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < c.num_consumers(); ++i) {
      SplitAssignment s;
      if (c.TryAcquire(i, &s) != Acquired::kSplit) continue;
      ++got[i];
      for (const SampleId& id : s.samples) c.MarkDelivered(id);
    }
  }
  return got;
}

TEST(CoordinatorSharesTest, NewSharesApplyToWhatIsHandedOutNext) {
  auto c = Make({0.5, 0.5}, /*spill_over=*/false);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Take(*c, 100), std::vector<int>({100, 100}));
  ASSERT_TRUE(c->SetShares({1, 3}).ok());  // normalised: 0.25, 0.75
  const std::vector<int> got = Take(*c, 150);
  EXPECT_EQ(got[0] + got[1], 200);
  EXPECT_NEAR(got[1], 150, 2);  // 3:1 from now on, whatever came before
  const CoordinatorStats stats = c->Stats();
  EXPECT_DOUBLE_EQ(stats.consumers[0].share, 0.25);
  EXPECT_DOUBLE_EQ(stats.consumers[1].share, 0.75);
}

TEST(CoordinatorSharesTest, RejectsBadShares) {
  auto c = Make({0.5, 0.5}, true);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->SetShares({1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->SetShares({0, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->SetShares({-1, 2}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorSharesTest, WithoutSpillOverAFullConsumerIsWaitedFor) {
  // Consumer 1 may hold one split only; consumer 0 is ahead of its half once 1 is full.
  for (bool spill : {true, false}) {
    auto c = Make({0.5, 0.5}, spill, /*max_open=*/1);
    ASSERT_NE(c, nullptr);
    SplitAssignment s;
    ASSERT_EQ(c->TryAcquire(1, &s), Acquired::kSplit);  // 1 is now full
    for (int i = 0; i < 2; ++i) {                       // 0 within its half
      ASSERT_EQ(c->TryAcquire(0, &s), Acquired::kSplit);
      for (const SampleId& id : s.samples) c->MarkDelivered(id);
    }
    // 0 is at its half and asks again: with spill-over it takes the split (1 has no room),
    // without it waits for 1.
    EXPECT_EQ(c->TryAcquire(0, &s), spill ? Acquired::kSplit : Acquired::kWait) << spill;
  }
}

TEST(CoordinatorSharesTest, WithoutSpillOverAFailedConsumerDoesNotStallTheOthers) {
  auto c = Make({0.5, 0.5}, /*spill_over=*/false, /*max_open=*/100, /*per_epoch=*/20);
  ASSERT_NE(c, nullptr);
  c->SetActive(1, false);
  int taken = 0;
  for (;;) {
    SplitAssignment s;
    const Acquired a = c->TryAcquire(0, &s);
    if (a != Acquired::kSplit) {
      EXPECT_EQ(a, Acquired::kDone);
      break;
    }
    for (const SampleId& id : s.samples) c->MarkDelivered(id);
    ++taken;
  }
  EXPECT_EQ(taken, 20);
}

}  // namespace
}  // namespace sluice::runtime
