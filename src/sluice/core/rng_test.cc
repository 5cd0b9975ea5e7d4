#include "sluice/core/rng.h"

#include <set>

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(RngTest, SeedDependsOnEveryComponent) {
  uint64_t base = SeedFor(1, 2, 3, 4);
  EXPECT_EQ(base, SeedFor(1, 2, 3, 4));
  EXPECT_NE(base, SeedFor(0, 2, 3, 4));
  EXPECT_NE(base, SeedFor(1, 3, 3, 4));
  EXPECT_NE(base, SeedFor(1, 2, 4, 4));
  EXPECT_NE(base, SeedFor(1, 2, 3, 5));
  // Swapping components must not collide (a plain XOR of the parts would).
  EXPECT_NE(SeedFor(1, 2, 3, 4), SeedFor(1, 3, 2, 4));
}

TEST(RngTest, SameSeedSameSequence) {
  Rng a(99), b(99), c(100);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    differs |= x != c.NextU64();
  }
  EXPECT_TRUE(differs);
}

TEST(RngTest, UniformStaysInRangeAndSpreads) {
  Rng r(7);
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    double u = r.Uniform(2.0, 4.0);
    ASSERT_GE(u, 2.0);
    ASSERT_LT(u, 4.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 20000, 3.0, 0.05);
}

TEST(RngTest, UniformIntCoversClosedRange) {
  Rng r(11);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    int64_t v = r.UniformInt(-2, 2);
    ASSERT_GE(v, -2);
    ASSERT_LE(v, 2);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 5u);
}

}  // namespace
}  // namespace sluice
