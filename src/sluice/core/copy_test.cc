#include "sluice/core/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
  return v;
}

// Every size around the 64-byte step and the 16-byte alignment, at every offset of the
// source and the destination from a 16-byte boundary: the bytes memcpy would write, and
// none around them.
TEST(CopyTest, CopyPastCacheWritesExactlyTheBytesMemcpyWould) {
  const std::vector<uint8_t> src = Pattern(4096 + 64);
  for (size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096}) {
    for (size_t so = 0; so < 16; so += 3) {
      for (size_t dof = 0; dof < 16; ++dof) {
        std::vector<uint8_t> dst(n + 32, 0xEE);
        CopyPastCache(dst.data() + dof, src.data() + so, n);
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= dof && i < dof + n;
          const uint8_t want = inside ? src[so + i - dof] : 0xEE;
          ASSERT_EQ(dst[i], want) << "n " << n << " source offset " << so << " destination offset "
                                  << dof << " byte " << i;
        }
      }
    }
  }
}

// Runs `copies` timed copies of `n` bytes through `c`, each taking `memcpy_ns` or
// `past_ns` as the way it is told to take; returns how many went past the cache.
int Feed(CopyWayChooser& c, int copies, size_t n, int64_t memcpy_ns, int64_t past_ns) {
  int past = 0;
  for (int i = 0; i < copies; ++i) {
    const bool p = c.NextPastCache(n);
    past += p ? 1 : 0;
    c.Note(n, p ? past_ns : memcpy_ns);
  }
  return past;
}

constexpr size_t kBig = CopyWayChooser::kMinTimedBytes;
constexpr int kTrial = 2 * CopyWayChooser::kTrialCopies;

// A trial takes both ways in turn, half its copies each, then keeps the faster one.
TEST(CopyWayChooserTest, ATrialTakesBothWaysInTurnAndKeepsTheFasterOne) {
  CopyWayChooser c;
  EXPECT_FALSE(c.past_cache());
  EXPECT_EQ(Feed(c, kTrial, kBig, /*memcpy_ns=*/100'000, /*past_ns=*/80'000),
            CopyWayChooser::kTrialCopies);
  EXPECT_EQ(c.trials(), 1);
  EXPECT_TRUE(c.past_cache());
  // Settled: every copy goes the chosen way.
  EXPECT_EQ(Feed(c, 100, kBig, 100'000, 80'000), 100);

  CopyWayChooser slower_past;
  Feed(slower_past, kTrial, kBig, 80'000, 100'000);
  EXPECT_FALSE(slower_past.past_cache());
  EXPECT_EQ(Feed(slower_past, 100, kBig, 80'000, 100'000), 0);
}

// A tie keeps memcpy (it leaves the bytes in the cache); times are compared per byte.
TEST(CopyWayChooserTest, ATieKeepsMemcpy) {
  CopyWayChooser c;
  Feed(c, kTrial, kBig, 50'000, 50'000);
  EXPECT_EQ(c.trials(), 1);
  EXPECT_FALSE(c.past_cache());
}

// Copies under kMinTimedBytes are neither timed nor counted: they take the way chosen, and
// a trial does not end on them.
TEST(CopyWayChooserTest, SmallCopiesTakeTheWayChosenAndAreNotCounted) {
  CopyWayChooser c;
  EXPECT_EQ(Feed(c, 1000, kBig - 1, 1, 1'000'000), 0);
  EXPECT_EQ(c.trials(), 0);
  Feed(c, kTrial, kBig, 100'000, 60'000);
  ASSERT_TRUE(c.past_cache());
  EXPECT_EQ(Feed(c, 50, 100, 1, 1'000'000), 50);
}

// The median decides: a few copies of the faster way that were preempted (a hundred times
// their time) do not turn the choice.
TEST(CopyWayChooserTest, AFewPreemptedCopiesDoNotTurnTheChoice) {
  CopyWayChooser c;
  for (int i = 0; i < kTrial; ++i) {
    const bool p = c.NextPastCache(kBig);
    // The fast way's first five copies (of its sixteen) were preempted.
    const int64_t ns = p ? (i < 10 ? 6'000'000 : 60'000) : 100'000;
    c.Note(kBig, ns);
  }
  EXPECT_EQ(c.trials(), 1);
  EXPECT_TRUE(c.past_cache());
}

// After kSettledCopies timed copies it tries again, so a machine that changed (another
// process filling the cache, a new neighbour) turns the choice.
TEST(CopyWayChooserTest, ItTriesAgainAfterItsSettledCopiesAndFollowsAChange) {
  CopyWayChooser c;
  Feed(c, kTrial, kBig, 100'000, 60'000);
  ASSERT_TRUE(c.past_cache());
  EXPECT_EQ(Feed(c, CopyWayChooser::kSettledCopies, kBig, 60'000, 100'000),
            CopyWayChooser::kSettledCopies);
  EXPECT_EQ(c.trials(), 1);
  // The second trial sees memcpy faster now.
  EXPECT_EQ(Feed(c, kTrial, kBig, 60'000, 100'000), CopyWayChooser::kTrialCopies);
  EXPECT_EQ(c.trials(), 2);
  EXPECT_FALSE(c.past_cache());
}

}  // namespace
}  // namespace sluice
