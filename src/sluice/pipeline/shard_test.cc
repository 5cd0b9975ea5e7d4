#include "sluice/pipeline/shard.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/test_util.h"

namespace sluice::pipeline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::FakeFiles;

const std::vector<uint64_t> kOrder = {5, 3, 8, 1, 0, 9, 2, 7, 4, 6};

TEST(ShareOfTest, OneRankTakesTheWholeOrder) {
  EpochShare share = ShareOf(kOrder, nullptr, Shard{}, EvenRule::kPad);
  EXPECT_EQ(share.ids, kOrder);
  EXPECT_EQ(share.divided, 10u);
  EXPECT_EQ(share.dropped + share.padded, 0u);
}

TEST(ShareOfTest, RanksTakeStridedPositionsAndDropTheTail) {
  std::vector<std::vector<uint64_t>> ids;
  for (int64_t rank = 0; rank < 3; ++rank) {
    EpochShare share = ShareOf(kOrder, nullptr, Shard{rank, 3}, EvenRule::kDrop);
    EXPECT_EQ(share.dropped, 1u);
    ids.push_back(share.ids);
  }
  EXPECT_THAT(ids[0], ElementsAre(5, 1, 2));
  EXPECT_THAT(ids[1], ElementsAre(3, 0, 7));
  EXPECT_THAT(ids[2], ElementsAre(8, 9, 4));  // 6, the last of the order, goes to no rank
}

TEST(ShareOfTest, PaddedSamplesRepeatTheStartOfTheOrderUnderTheirOwnIndices) {
  std::vector<EpochShare> shares;
  for (int64_t rank = 0; rank < 3; ++rank) {
    shares.push_back(ShareOf(kOrder, nullptr, Shard{rank, 3}, EvenRule::kPad));
    EXPECT_EQ(shares.back().padded, 2u);
  }
  EXPECT_THAT(shares[0].ids, ElementsAre(5, 1, 2, 6));
  EXPECT_THAT(shares[1].ids, ElementsAre(3, 0, 7, 10));
  EXPECT_THAT(shares[2].ids, ElementsAre(8, 9, 4, 11));
  EXPECT_EQ(shares[1].FileOf(10), 5u);  // order[0]
  EXPECT_EQ(shares[2].FileOf(11), 3u);  // order[1]
  EXPECT_EQ(shares[2].FileOf(4), 4u);
}

TEST(ShareOfTest, SamplesConsumedBeforeTheDivisionAreLeftOut) {
  std::vector<bool> before(10, false);
  before[5] = before[3] = before[8] = true;  // the first three of the order
  EpochShare share = ShareOf(kOrder, &before, Shard{0, 2}, EvenRule::kDrop);
  EXPECT_EQ(share.divided, 7u);
  EXPECT_EQ(share.dropped, 1u);
  EXPECT_THAT(share.ids, ElementsAre(1, 9, 7));  // of 1 0 9 2 7 4 6
}

TEST(CheckShardTest, RefusesBadRanksAndWorldSizes) {
  EXPECT_TRUE(CheckShard(Shard{3, 4}).ok());
  EXPECT_EQ(CheckShard(Shard{0, 0}).message(), "world_size: must be at least 1, got 0");
  EXPECT_EQ(CheckShard(Shard{4, 4}).message(), "rank: must be in [0, 3] for world_size 4, got 4");
  EXPECT_EQ(CheckShard(Shard{-1, 2}).message(), "rank: must be in [0, 1] for world_size 2, got -1");
  EXPECT_THAT(CheckShard(Shard{0, 5}, EvenRule::kDrop, 4).message(),
              HasSubstr("world_size 5 is larger than the 4 samples of an epoch"));
  EXPECT_TRUE(CheckShard(Shard{0, 5}, EvenRule::kPad, 4).ok());
}

TEST(DescribeShardTest, SaysHowManyAreDroppedOrPadded) {
  EXPECT_EQ(DescribeShard(Shard{1, 4}, EvenRule::kDrop, 10),
            "rank 1 of 4: 2 samples per epoch (even: drop leaves out 2 of the 10 samples of "
            "every epoch, on every rank the same)");
  EXPECT_THAT(DescribeShard(Shard{1, 4}, EvenRule::kPad, 10),
              HasSubstr("3 samples per epoch (even: pad repeats 2 of the 10 samples"));
}

// Every rank's SampleIds by epoch, drained from a SourceIterator per rank.
std::vector<std::map<uint32_t, std::vector<Element>>> DrainRanks(int n, int64_t world,
                                                                 EvenRule even, int64_t epochs,
                                                                 const SourceOptions& base = {}) {
  std::vector<std::map<uint32_t, std::vector<Element>>> out;
  for (int64_t rank = 0; rank < world; ++rank) {
    SourceOptions o = base;
    o.shuffle = true;
    o.seed = 9;
    o.epochs = epochs;
    o.shard = Shard{rank, world};
    o.even = even;
    SourceIterator it(FakeFiles(n), o);
    std::map<uint32_t, std::vector<Element>> by_epoch;
    for (Element& e : testing_util::Drain(it)) by_epoch[e.id.epoch].push_back(std::move(e));
    out.push_back(std::move(by_epoch));
  }
  return out;
}

// Disjoint and complete coverage of every epoch, for 1 to 4 ranks under both rules: the
// ranks' real samples never overlap; under pad they cover the epoch, under drop all but
// n mod W of it (the last of the epoch's order); every rank gets the same count; a padded
// sample (index >= n) reads a file of the epoch and each rank has at most one.
TEST(ShardedSourceTest, RanksCoverEveryEpochDisjointlyWithEqualCounts) {
  for (int n : {10, 11, 13}) {
    for (int64_t world = 1; world <= 4; ++world) {
      for (EvenRule even : {EvenRule::kDrop, EvenRule::kPad}) {
        const std::string label = absl::StrCat("n=", n, " world_size=", world, " ",
                                               even == EvenRule::kPad ? "pad" : "drop");
        auto ranks = DrainRanks(n, world, even, /*epochs=*/2);
        const uint64_t per_rank = SamplesPerRank(n, Shard{0, world}, even);
        for (uint32_t epoch = 0; epoch < 2; ++epoch) {
          std::set<uint64_t> seen;
          for (int64_t rank = 0; rank < world; ++rank) {
            const std::vector<Element>& got = ranks[rank][epoch];
            EXPECT_EQ(got.size(), per_rank) << label << " rank " << rank;
            int pads = 0;
            for (const Element& e : got) {
              if (e.id.index >= static_cast<uint64_t>(n)) {
                ++pads;
                EXPECT_LT(e.id.index, static_cast<uint64_t>(n + world)) << label;
                continue;
              }
              EXPECT_TRUE(seen.insert(e.id.index).second) << label << ": " << e.id.index;
              EXPECT_EQ(e.origin, FakeFiles(n)->paths[e.id.index]) << label;
            }
            EXPECT_LE(pads, 1) << label;
          }
          const std::vector<uint64_t> order = EpochOrder(n, true, 9, epoch);
          const uint64_t left_out = even == EvenRule::kDrop ? n % world : 0;
          EXPECT_EQ(seen.size(), n - left_out) << label;
          for (uint64_t k = 0; k < left_out; ++k) {
            EXPECT_EQ(seen.count(order[n - 1 - k]), 0u) << label << ": the tail is dropped";
          }
        }
      }
    }
  }
}

// Equal batch counts per rank, with and without drop_remainder, over two epochs.
TEST(ShardedSourceTest, EveryRankYieldsTheSameNumberOfBatches) {
  testing_util::TempDir dir;
  PipelineSpec spec;
  spec.source.files = {dir.WriteFiles(13)};
  spec.source.shuffle = true;
  spec.epochs = 2;
  spec.batch.size = 3;
  spec.prefetch = 0;
  for (bool drop_remainder : {false, true}) {
    for (EvenRule even : {EvenRule::kDrop, EvenRule::kPad}) {
      spec.batch.drop_remainder = drop_remainder;
      spec.source.even = even;
      for (int64_t world = 1; world <= 4; ++world) {
        const int64_t samples = 2 * static_cast<int64_t>(SamplesPerRank(13, Shard{0, world}, even));
        const int64_t batches = drop_remainder ? samples / 3 : (samples + 2) / 3;
        for (int64_t rank = 0; rank < world; ++rank) {
          ExecutorOptions options;
          options.threads = 2;
          options.shard = Shard{rank, world};
          auto ex = LocalExecutor::Create(spec, options);
          ASSERT_TRUE(ex.ok()) << ex.status();
          int64_t got = 0;
          for (;;) {
            Element e;
            bool end = false;
            ASSERT_TRUE((*ex)->GetNext(&e, &end).ok());
            if (end) break;
            ++got;
          }
          EXPECT_EQ(got, batches) << "world_size " << world << " rank " << rank;
        }
      }
    }
  }
  ExecutorOptions bad;
  bad.shard = Shard{2, 2};
  EXPECT_THAT(LocalExecutor::Create(spec, bad).status().message(),
              HasSubstr("rank: must be in [0, 1]"));
}

// A rank resumed from its own progress goes on with exactly the rest of its own share,
// padded sample included.
TEST(ShardedSourceTest, OwnProgressResumesTheRestOfTheOwnShare) {
  const Shard shard{2, 3};
  auto full = DrainRanks(10, 3, EvenRule::kPad, 1)[2][0];
  ASSERT_EQ(full.size(), 4u);
  ASSERT_GE(full.back().id.index, 10u);  // rank 2's padded sample comes last
  auto progress = std::make_shared<SourceProgress>();
  progress->consumed[0] = std::vector<bool>(10, false);
  progress->consumed[0][full[1].id.index] = true;
  progress->padded.insert(full[3].id);
  SourceOptions o;
  o.shuffle = true;
  o.seed = 9;
  o.shard = shard;
  o.even = EvenRule::kPad;
  o.resume = progress;
  SourceIterator it(FakeFiles(10), o);
  std::vector<Element> rest = testing_util::Drain(it);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].id, full[0].id);
  EXPECT_EQ(rest[1].id, full[2].id);
}

// Elastic resume at the source: 2 ranks each take part of their share, their progress is
// merged, and 3 ranks divide the rest: every sample not yet taken goes to exactly one of
// them (under drop, all but fewer than 3), with equal counts.
TEST(ShardedSourceTest, MergedProgressIsDividedAfreshAmongANewNumberOfRanks) {
  constexpr int kN = 23;
  for (EvenRule even : {EvenRule::kDrop, EvenRule::kPad}) {
    auto before = DrainRanks(kN, 2, even, 1);
    std::vector<SourceProgress> ranks(2);
    std::set<uint64_t> taken;
    for (int rank = 0; rank < 2; ++rank) {
      ranks[rank].consumed[0] = std::vector<bool>(kN, false);
      for (int i = 0; i < 3; ++i) {  // the first 3 of each rank's share
        ranks[rank].consumed[0][before[rank][0][i].id.index] = true;
        taken.insert(before[rank][0][i].id.index);
      }
    }
    StatusOr<SourceProgress> merged = MergeRankProgress(ranks);
    ASSERT_TRUE(merged.ok()) << merged.status();
    SourceOptions base;
    base.resume = std::make_shared<const SourceProgress>(*merged);
    auto after = DrainRanks(kN, 3, even, 1, base);
    std::set<uint64_t> seen = taken;
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(after[rank][0].size(), SamplesPerRank(kN - 6, Shard{0, 3}, even));
      for (const Element& e : after[rank][0]) {
        if (e.id.index >= kN) continue;
        EXPECT_TRUE(seen.insert(e.id.index).second) << e.id.index << " twice";
      }
    }
    EXPECT_EQ(seen.size(), even == EvenRule::kPad ? kN : kN - (kN - 6) % 3);
  }
}

// A batch fetched but not taken (a next() that a signal interrupted) leaves the progress.
TEST(UnreceiveTest, ClearsTheBitsAndReopensAnEpochTheirReceiptFolded) {
  SourceProgress p;
  p.first_epoch = 2;
  p.consumed[2] = {true, true, false, true};
  SourceProgress back = Unreceive(p, {SampleId{2, 1}, SampleId{2, 3}}, 4);
  EXPECT_EQ(back.first_epoch, 2u);
  EXPECT_EQ(back.consumed.at(2), (std::vector<bool>{true, false, false, false}));
  // The batch completed epoch 1 and began epoch 2.
  back = Unreceive(p, {SampleId{1, 2}, SampleId{2, 3}}, 4);
  EXPECT_EQ(back.first_epoch, 1u);
  EXPECT_EQ(back.consumed.at(1), (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(back.consumed.at(2), (std::vector<bool>{true, true, false, false}));
  // A padded sample (index past the epoch) leaves the padded set.
  p.padded = {SampleId{2, 4}};
  EXPECT_TRUE(Unreceive(p, {SampleId{2, 4}}, 4).padded.empty());
  // A rank's folded epoch stays folded.
  SourceProgress rank;
  rank.first_epoch = 2;
  rank.finished[1] = {true, false, true, false};
  EXPECT_EQ(Unreceive(rank, {SampleId{1, 2}}, 4).first_epoch, 2u);
}

TEST(MergeRankProgressTest, OrsTheRanksAndUsesTheFinishedEpochOfARankAhead) {
  SourceProgress behind;
  behind.first_epoch = 3;
  behind.consumed[3] = {true, false, false, false};
  behind.consumed[4] = {false, true, false, false};
  SourceProgress ahead;
  ahead.first_epoch = 4;
  ahead.finished[3] = {false, false, true, false};
  ahead.consumed[4] = {false, false, false, true};
  StatusOr<SourceProgress> merged = MergeRankProgress({behind, ahead});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->first_epoch, 3u);
  EXPECT_EQ(merged->consumed.at(3), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(merged->consumed.at(4), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(merged->divided, merged->consumed);
  EXPECT_TRUE(merged->padded.empty());

  ahead.first_epoch = 5;
  EXPECT_THAT(MergeRankProgress({behind, ahead}).status().message(),
              HasSubstr("rank 1 has finished epoch 4 while rank 0 is still in epoch 3"));
  EXPECT_FALSE(MergeRankProgress({}).ok());
}

}  // namespace
}  // namespace sluice::pipeline
