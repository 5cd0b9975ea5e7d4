#include "sluice/core/sample_digests.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

Tensor Filled(Shape shape, uint8_t base) {
  Tensor t = Tensor::Empty(DType::kU8, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<uint8_t>()[i] = base + i;
  return t;
}

// A batch of samples `ids`, sample k's row filled from `bases[k]`.
Element Batch(const std::vector<SampleId>& ids, const std::vector<uint8_t>& bases) {
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor t = Tensor::Empty(DType::kU8, {n, 4});
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t i = 0; i < 4; ++i) t.mutable_data<uint8_t>()[k * 4 + i] = bases[k] + i;
  }
  Element e;
  e.tensors = {t};
  e.members = ids;
  return e;
}

TEST(Digest64Test, StableAndSensitive) {
  EXPECT_EQ(Digest64("hello"), Digest64("hello"));
  EXPECT_NE(Digest64("hello"), Digest64("hellp"));
  EXPECT_NE(Digest64("hello", 1), Digest64("hello", 2));
  EXPECT_NE(Digest64(""), Digest64(std::string(1, '\0')));
  EXPECT_NE(Digest64("0123456789abcdef"), Digest64("0123456789abcdeg"));
}

TEST(SampleDigestsTest, IndependentOfBatchOrderAndGrouping) {
  const SampleId a{0, 1}, b{0, 2}, c{1, 0};
  SampleDigests one;
  one.Add(Batch({a, b}, {10, 20}));
  one.Add(Batch({c}, {30}));
  SampleDigests two;
  two.Add(Batch({c, b}, {30, 20}));
  two.Add(Batch({a}, {10}));
  EXPECT_EQ(one.size(), 3u);
  EXPECT_EQ(one.ToString(), two.ToString());
  EXPECT_EQ(one.Combined(), two.Combined());
}

TEST(SampleDigestsTest, DetectsChangedContentAndSwappedIds) {
  const SampleId a{0, 1}, b{0, 2};
  SampleDigests base, changed, swapped;
  base.Add(Batch({a, b}, {10, 20}));
  changed.Add(Batch({a, b}, {10, 21}));
  swapped.Add(Batch({b, a}, {10, 20}));
  EXPECT_NE(base.Combined(), changed.Combined());
  EXPECT_NE(base.Combined(), swapped.Combined());
}

TEST(SampleDigestsTest, ListsSamplesInIdOrder) {
  SampleDigests d;
  d.Add(Batch({SampleId{1, 0}, SampleId{0, 5}}, {1, 2}));
  const std::string text = d.ToString();
  EXPECT_THAT(text,
              ::testing::MatchesRegex("0 5 [0-9a-f]{16}\n1 0 [0-9a-f]{16}\nall [0-9a-f]{16}\n"));
}

TEST(SampleDigestsTest, SingleSamplesWithoutBatching) {
  Element e;
  e.id = SampleId{0, 3};
  e.tensors = {Filled({2, 2}, 1)};
  SampleDigests d;
  d.Add(e);
  EXPECT_EQ(d.size(), 1u);
  SampleDigests other;
  e.tensors = {Filled({4}, 1)};  // same bytes, another shape
  other.Add(e);
  EXPECT_NE(d.Combined(), other.Combined());
}

}  // namespace
}  // namespace sluice
