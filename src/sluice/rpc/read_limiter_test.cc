#include "sluice/rpc/read_limiter.h"

#include <gtest/gtest.h>

namespace sluice::rpc {
namespace {

TEST(ReadLimiterTest, SavedSecondThenTheRate) {
  ReadLimiter limiter(/*bytes_per_s=*/1000);
  // A fresh bucket holds one second's worth.
  EXPECT_DOUBLE_EQ(limiter.Reserve(1000, /*now_s=*/10.0), 0.0);
  // Then every byte costs 1 ms.
  EXPECT_DOUBLE_EQ(limiter.Reserve(500, 10.0), 0.5);
  EXPECT_DOUBLE_EQ(limiter.Reserve(500, 10.0), 1.0);
  // Waiting pays the debt off.
  EXPECT_NEAR(limiter.Reserve(100, 11.0), 0.1, 1e-9);
}

TEST(ReadLimiterTest, IdleTimeSavesAtMostOneSecond) {
  ReadLimiter limiter(1000);
  EXPECT_DOUBLE_EQ(limiter.Reserve(100, 0.0), 0.0);
  // A long pause: only one second's worth is available at once.
  EXPECT_DOUBLE_EQ(limiter.Reserve(3000, 100.0), 2.0);
}

TEST(ReadLimiterTest, LongRunAverageIsTheRate) {
  ReadLimiter limiter(2000);
  double now = 0;
  int64_t bytes = 0;
  for (int i = 0; i < 1000; ++i) {
    now += limiter.Reserve(100, now);  // a reader that waits as told, back to back
    bytes += 100;
  }
  // 100 KB at 2 KB/s: 50 s, less the one second saved at the start.
  EXPECT_NEAR(now, 49.0, 0.01);
  EXPECT_EQ(bytes, 100000);
}

}  // namespace
}  // namespace sluice::rpc
