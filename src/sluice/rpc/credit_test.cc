#include "sluice/rpc/credit.h"

#include "gtest/gtest.h"

namespace sluice::rpc {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(CreditBatcherTest, SmallCreditWaitsForItsHoldThenIsDue) {
  CreditBatcher credit(/*window_bytes=*/64 << 20, /*hold_ns=*/5 * kMs);
  EXPECT_FALSE(credit.Due(0));
  EXPECT_EQ(credit.DueAtNs(), -1);
  credit.Add(150'000, 100 * kMs);
  credit.Add(150'000, 102 * kMs);
  EXPECT_FALSE(credit.DueBySize());
  EXPECT_FALSE(credit.Due(104 * kMs));
  // Due 5 ms after its oldest byte, not after the latest.
  EXPECT_EQ(credit.DueAtNs(), 105 * kMs);
  EXPECT_TRUE(credit.Due(105 * kMs));
  EXPECT_EQ(credit.Take(), 300'000u);
  EXPECT_EQ(credit.pending(), 0u);
  EXPECT_FALSE(credit.Due(200 * kMs));
  // The clock starts again with the next byte taken.
  credit.Add(1, 300 * kMs);
  EXPECT_EQ(credit.DueAtNs(), 305 * kMs);
}

TEST(CreditBatcherTest, AnEighthOfTheWindowIsDueAtOnce) {
  CreditBatcher credit(/*window_bytes=*/8 << 20, /*hold_ns=*/5 * kMs);
  credit.Add((1 << 20) - 1, 0);
  EXPECT_FALSE(credit.Due(0));
  credit.Add(1, 0);
  EXPECT_TRUE(credit.DueBySize());
  EXPECT_TRUE(credit.Due(0));
  EXPECT_EQ(credit.Take(), 1u << 20);
}

TEST(CreditBatcherTest, AWindowUnderEightBytesCreditsEveryChunk) {
  CreditBatcher credit(/*window_bytes=*/1);
  credit.Add(1, 0);
  EXPECT_TRUE(credit.DueBySize());
}

}  // namespace
}  // namespace sluice::rpc
