// The hang deadline as a table of cases, and DeliveryWatch driven by a made-up clock.
#include "sluice/runtime/liveness.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::runtime {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kS = 1000000000;  // nanoseconds per second

TEST(HangDeadlineTest, Table) {
  const HangPolicy policy;  // multiplier 4, floor 10 s, 30 s before a rate is measured
  struct Case {
    const char* what;
    int64_t held;
    double rate;
    double want_s;
  };
  const std::vector<Case> cases = {
      {"fast worker: the floor", /*held=*/24, /*rate=*/1000, 10},
      {"just at the floor", 25, 10, 10},
      {"slow worker: 4 x the held samples' time", 24, 2, 48},
      {"more held, longer", 96, 2, 192},
      {"no rate yet", 24, 0, 30},
      {"negative rate is no rate", 24, -1, 30},
      {"a single sample at 0.1 samples/s", 1, 0.1, 40},
  };
  for (const Case& c : cases) {
    EXPECT_DOUBLE_EQ(HangDeadlineS(policy, c.held, c.rate), c.want_s) << c.what;
  }
  EXPECT_TRUE(std::isinf(HangDeadlineS(policy, 0, 10))) << "holding nothing is never late";
}

TEST(HangDeadlineTest, PolicyValuesApply) {
  HangPolicy p;
  p.multiplier = 2;
  p.floor_s = 1;
  p.unmeasured_s = 5;
  EXPECT_DOUBLE_EQ(HangDeadlineS(p, 10, 10), 2);  // 2 x 1 s
  EXPECT_DOUBLE_EQ(HangDeadlineS(p, 1, 100), 1);  // the floor
  EXPECT_DOUBLE_EQ(HangDeadlineS(p, 10, 0), 5);   // unmeasured
  p.unmeasured_s = 0.5;
  EXPECT_DOUBLE_EQ(HangDeadlineS(p, 10, 0), 1);  // never below the floor
}

TEST(DeliveryWatchTest, SilentWorkerHoldingSamplesIsHungAfterTheDeadline) {
  DeliveryWatch w;
  w.Restart(0);
  // 10 samples a second for 3 s: the rate is measured.
  for (int i = 1; i <= 30; ++i) w.Delivered(1, i * kS / 10);
  EXPECT_NEAR(w.samples_per_s(), 10, 1e-9);
  const int64_t last = 3 * kS;
  // Holding 24 samples: expected 2.4 s, x4 = 9.6 s, so the 10 s floor applies.
  EXPECT_FALSE(w.Check(24, last + 9 * kS).has_value());
  EXPECT_FALSE(w.Check(24, last + 10 * kS).has_value());
  std::optional<HangVerdict> v = w.Check(24, last + 10 * kS + 1);
  ASSERT_TRUE(v.has_value());
  EXPECT_NEAR(v->silence_s, 10, 1e-6);
  EXPECT_DOUBLE_EQ(v->deadline_s, 10);
  EXPECT_EQ(v->held_samples, 24);
  EXPECT_THAT(v->Describe(w.policy()),
              HasSubstr("nothing delivered for 10.0 s while it held 24 samples"));
}

TEST(DeliveryWatchTest, SlowWorkerGetsALongerDeadline) {
  DeliveryWatch w;
  w.Restart(0);
  for (int i = 1; i <= 10; ++i) w.Delivered(1, i * kS);  // 1 sample a second
  // 24 held at 1/s: 4 x 24 s = 96 s.
  EXPECT_FALSE(w.Check(24, 10 * kS + 95 * kS).has_value());
  std::optional<HangVerdict> v = w.Check(24, 10 * kS + 97 * kS);
  ASSERT_TRUE(v.has_value());
  EXPECT_NEAR(v->deadline_s, 96, 1e-6);
}

TEST(DeliveryWatchTest, HoldingNothingIsNeverSilence) {
  DeliveryWatch w;
  w.Restart(0);
  w.Delivered(10, kS);
  // A minute with nothing handed out, then samples again: the silence starts then.
  EXPECT_FALSE(w.Check(0, 61 * kS).has_value());
  EXPECT_FALSE(w.Check(8, 61 * kS + kS / 4).has_value());
  EXPECT_FALSE(w.Check(8, 70 * kS).has_value());
  EXPECT_TRUE(w.Check(8, 71 * kS + 1).has_value());
}

TEST(DeliveryWatchTest, NoDeliveryYetUsesTheUnmeasuredDeadline) {
  DeliveryWatch w;
  w.Restart(5 * kS);
  EXPECT_EQ(w.samples_per_s(), 0);
  EXPECT_FALSE(w.Check(8, 5 * kS + 30 * kS).has_value());
  std::optional<HangVerdict> v = w.Check(8, 5 * kS + 30 * kS + 1);
  ASSERT_TRUE(v.has_value());
  EXPECT_THAT(v->Describe(w.policy()), HasSubstr("no rate measured yet"));
}

TEST(DeliveryWatchTest, RestartKeepsTheRateAndRestartsTheSilence) {
  DeliveryWatch w;
  w.Restart(0);
  for (int i = 1; i <= 20; ++i) w.Delivered(2, i * kS);
  const double rate = w.samples_per_s();
  EXPECT_NEAR(rate, 2, 1e-9);
  w.Restart(100 * kS);  // a new stream long after: not silence
  EXPECT_FALSE(w.Check(8, 105 * kS).has_value());
  EXPECT_DOUBLE_EQ(w.samples_per_s(), rate);
  EXPECT_FALSE(w.Check(8, 115 * kS).has_value());  // 8 samples at 2/s, x 4: 16 s
  EXPECT_TRUE(w.Check(8, 116 * kS + 1).has_value());
}

TEST(DeliveryWatchTest, RateFollowsAWorkerThatSlowsDown) {
  DeliveryWatch w;
  w.Restart(0);
  int64_t t = 0;
  for (int i = 0; i < 100; ++i) w.Delivered(10, t += kS / 10);  // 100 samples/s for 10 s
  EXPECT_NEAR(w.samples_per_s(), 100, 1e-6);
  for (int i = 0; i < 200; ++i) w.Delivered(1, t += kS / 10);  // then 10 samples/s for 20 s
  // An exponential mean with a 30 s time constant: over three quarters of the way to 10
  // after 20 s (30.7).
  EXPECT_LT(w.samples_per_s(), 35);
  EXPECT_GT(w.samples_per_s(), 10);
}

}  // namespace
}  // namespace sluice::runtime
