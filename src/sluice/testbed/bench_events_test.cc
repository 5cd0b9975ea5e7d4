// `sluice bench` on a scenario with events: the rates around an event, from the training
// loop's step ends.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/testbed/bench_runner.h"

namespace sluice::testbed {
namespace {

TEST(MeasureEventWindowsTest, RatesBeforeAfterSettlingAndPerSecond) {
  // 100 samples a second in steps of 0.5 s until the event at 4 s, 50 a second for the next
  // 2 s, then 100 again until 12 s.
  std::vector<double> ends;
  std::vector<int64_t> samples;
  int64_t total = 0;
  for (double t = 0.5; t <= 12.001; t += 0.5) {
    total += (t > 4 && t <= 6) ? 25 : 50;
    ends.push_back(t);
    samples.push_back(total);
  }
  const EventWindows w = MeasureEventWindows(ends, samples, 4, 5, 3);
  EXPECT_DOUBLE_EQ(w.t_s, 4);
  EXPECT_DOUBLE_EQ(w.before_samples_per_s, 100);
  EXPECT_DOUBLE_EQ(w.settled_samples_per_s, 100);  // from 9 s: recovered
  // Seconds from 1 s: three before, two slow, then recovered up to 12 s.
  ASSERT_EQ(w.per_s.size(), 11u);
  EXPECT_DOUBLE_EQ(w.per_s[0], 100);
  EXPECT_DOUBLE_EQ(w.per_s[3], 50);
  EXPECT_DOUBLE_EQ(w.per_s[4], 50);
  EXPECT_DOUBLE_EQ(w.per_s[5], 100);

  // Settling needs more run than there is: no settled rate, rather than a short window's.
  EXPECT_DOUBLE_EQ(MeasureEventWindows(ends, samples, 4, 15).settled_samples_per_s, 0);
  // A run that never reached the event: nothing after it.
  const EventWindows early = MeasureEventWindows(ends, samples, 20, 5);
  EXPECT_DOUBLE_EQ(early.settled_samples_per_s, 0);
  EXPECT_TRUE(early.per_s.empty());
}

}  // namespace
}  // namespace sluice::testbed
