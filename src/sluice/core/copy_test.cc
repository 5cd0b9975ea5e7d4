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

// Past the cache only what is larger than the last-level cache, and nothing when its size is
// unknown.
TEST(CopyTest, OnlyUnitsLargerThanTheLastLevelCacheGoPastIt) {
  const size_t cache = LastLevelCacheBytes();
  EXPECT_FALSE(CopyPastCacheFor(0));
  EXPECT_FALSE(CopyPastCacheFor(cache));
  EXPECT_EQ(CopyPastCacheFor(cache + 1), cache > 0);
  EXPECT_EQ(CopyPastCacheFor(size_t{1} << 40), cache > 0);
}

}  // namespace
}  // namespace sluice
