#include "sluice/pipeline/split_groups.h"

#include <vector>

#include "gtest/gtest.h"

namespace sluice::pipeline {
namespace {

Element Sample(uint64_t index) {
  Element e;
  e.id = SampleId{0, index};
  return e;
}

std::vector<uint64_t> Ids(const std::vector<Element>& members) {
  std::vector<uint64_t> out;
  for (const Element& e : members) out.push_back(e.id.index);
  return out;
}

TEST(SplitGroupsTest, BatchesFollowSplitOrderWhateverOrderSamplesFinishIn) {
  SplitGroups groups(/*samples=*/5, /*batch_size=*/2, /*drop_remainder=*/false);
  // Position 1 first: nothing is complete until position 0 is in.
  EXPECT_TRUE(groups.Resolve(1, Sample(11)).batches.empty());
  SplitGroups::Ready r = groups.Resolve(0, Sample(10));
  ASSERT_EQ(r.batches.size(), 1u);
  EXPECT_EQ(Ids(r.batches[0]), (std::vector<uint64_t>{10, 11}));
  // A failed sample is left out: 2 fails, 3 and 4 make the last batch once all are in.
  EXPECT_TRUE(groups.Resolve(4, Sample(14)).batches.empty());
  EXPECT_TRUE(groups.Resolve(2, std::nullopt).batches.empty());
  EXPECT_FALSE(groups.done());
  r = groups.Resolve(3, Sample(13));
  ASSERT_EQ(r.batches.size(), 1u);
  EXPECT_EQ(Ids(r.batches[0]), (std::vector<uint64_t>{13, 14}));
  EXPECT_TRUE(groups.done());
  // A position resolved again changes nothing.
  EXPECT_TRUE(groups.Resolve(3, Sample(13)).batches.empty());
}

TEST(SplitGroupsTest, AShortLastBatchIsGivenOutOrDropped) {
  for (bool drop : {false, true}) {
    SplitGroups groups(3, 2, drop);
    EXPECT_EQ(groups.Resolve(0, Sample(0)).batches.size(), 0u);
    EXPECT_EQ(groups.Resolve(1, Sample(1)).batches.size(), 1u);
    SplitGroups::Ready r = groups.Resolve(2, Sample(2));
    if (drop) {
      EXPECT_TRUE(r.batches.empty());
      EXPECT_EQ(Ids(r.dropped), std::vector<uint64_t>{2});
    } else {
      ASSERT_EQ(r.batches.size(), 1u);
      EXPECT_EQ(Ids(r.batches[0]), std::vector<uint64_t>{2});
      EXPECT_TRUE(r.dropped.empty());
    }
    EXPECT_TRUE(groups.done());
  }
}

}  // namespace
}  // namespace sluice::pipeline
