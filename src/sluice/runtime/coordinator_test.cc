#include "sluice/runtime/coordinator.h"

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/core/rng.h"
#include "sluice/pipeline/source.h"

namespace sluice::runtime {
namespace {

using Acquired = Coordinator::Acquired;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Coordinator> Make(CoordinatorOptions options, std::vector<double> shares,
                                  int max_open = 2) {
  std::vector<ConsumerConfig> consumers;
  for (size_t i = 0; i < shares.size(); ++i) {
    ConsumerConfig c;
    c.name = absl::StrCat("c", i);
    c.share = shares[i];
    c.max_open_splits = max_open;
    consumers.push_back(c);
  }
  auto made = Coordinator::Create(options, std::move(consumers));
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

CoordinatorOptions Options(uint64_t per_epoch, uint64_t split_size, int64_t epochs = 1) {
  CoordinatorOptions o;
  o.samples_per_epoch = per_epoch;
  o.split_size = split_size;
  o.epochs = epochs;
  return o;
}

void DeliverAll(Coordinator& c, const SplitAssignment& split) {
  for (const SampleId& id : split.samples) ASSERT_TRUE(c.MarkDelivered(id).has_value());
}

TEST(CoordinatorTest, RejectsBadOptions) {
  struct Case {
    const char* label;
    CoordinatorOptions options;
    std::vector<ConsumerConfig> consumers;
    const char* error;
  };
  ConsumerConfig ok{"ok", 1.0, 2, true};
  std::vector<Case> cases = {
      {"split size 0", Options(10, 0), {ok}, "split_size"},
      {"epochs 0", Options(10, 4, /*epochs=*/0), {ok}, "epochs"},
      {"epochs -2", Options(10, 4, /*epochs=*/-2), {ok}, "epochs"},
      {"no consumers", Options(10, 4), {}, "no consumers"},
      {"negative share", Options(10, 4), {ConsumerConfig{"bad", -0.5, 2, true}}, "negative"},
      {"all zero", Options(10, 4), {ConsumerConfig{"z", 0, 2, true}}, "zero"},
      {"no open splits", Options(10, 4), {ConsumerConfig{"cap", 1, 0, true}}, "max_open_splits"},
  };
  for (const Case& c : cases) {
    auto made = Coordinator::Create(c.options, c.consumers);
    ASSERT_FALSE(made.ok()) << c.label;
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << c.label;
    EXPECT_THAT(std::string(made.status().message()), HasSubstr(c.error)) << c.label;
  }
}

TEST(CoordinatorTest, CutsTheEpochOrderIntoSplits) {
  auto c = Make(Options(/*per_epoch=*/10, /*split_size=*/4), {1.0}, /*max_open=*/8);
  std::vector<size_t> sizes;
  std::vector<uint64_t> indices;
  SplitAssignment split;
  while (c->TryAcquire(0, &split) == Acquired::kSplit) {
    sizes.push_back(split.samples.size());
    for (size_t i = 0; i < split.samples.size(); ++i) {
      EXPECT_EQ(split.samples[i].epoch, 0u);
      EXPECT_EQ(split.seqs[i], indices.size());
      indices.push_back(split.samples[i].index);
    }
  }
  EXPECT_THAT(sizes, ElementsAre(4, 4, 2));
  EXPECT_THAT(indices, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  EXPECT_FALSE(c->done());
}

TEST(CoordinatorTest, FollowsTheShuffledSourceOrderAcrossEpochsWithoutCrossingThem) {
  CoordinatorOptions o = Options(/*per_epoch=*/7, /*split_size=*/3, /*epochs=*/2);
  o.shuffle = true;
  o.seed = 99;
  auto c = Make(o, {1.0}, /*max_open=*/1);
  std::map<uint32_t, std::vector<uint64_t>> seen;
  SplitAssignment split;
  int splits = 0;
  while (c->TryAcquire(0, &split) == Acquired::kSplit) {
    ++splits;
    for (const SampleId& id : split.samples) {
      EXPECT_EQ(id.epoch, split.epoch);
      seen[id.epoch].push_back(id.index);
    }
    DeliverAll(*c, split);
  }
  EXPECT_EQ(splits, 6);  // 3 + 3 + 1 per epoch
  EXPECT_EQ(seen[0], pipeline::EpochOrder(7, true, 99, 0));
  EXPECT_EQ(seen[1], pipeline::EpochOrder(7, true, 99, 1));
  EXPECT_NE(seen[0], seen[1]);
  EXPECT_TRUE(c->done());
  EXPECT_EQ(c->TryAcquire(0, &split), Acquired::kDone);
  EXPECT_EQ(c->Stats().epochs_completed, 2);
}

TEST(CoordinatorTest, SplitsEndWhereAShardStartsInShardOrder) {
  // Shards [0,5) [5,7) [7,16); the order permutes them whole.
  CoordinatorOptions o = Options(/*per_epoch=*/16, /*split_size=*/4, /*epochs=*/2);
  o.shuffle = true;
  o.seed = 5;
  o.shuffle_groups = o.split_groups = {0, 5, 7};
  auto c = Make(o, {1.0}, /*max_open=*/1);
  std::map<uint32_t, std::vector<uint64_t>> seen;
  SplitAssignment split;
  while (c->TryAcquire(0, &split) == Acquired::kSplit) {
    ASSERT_FALSE(split.samples.empty());
    ASSERT_LE(split.samples.size(), 4u);
    auto shard = [](uint64_t i) { return i < 5 ? 0 : i < 7 ? 1 : 2; };
    for (const SampleId& id : split.samples) {
      EXPECT_EQ(shard(id.index), shard(split.samples[0].index))
          << "a split crosses a shard: epoch " << split.epoch;
      seen[id.epoch].push_back(id.index);
    }
    DeliverAll(*c, split);
  }
  EXPECT_TRUE(c->done());
  // In the source's order of shards.
  for (uint32_t epoch : {0u, 1u}) {
    EXPECT_EQ(seen[epoch], pipeline::EpochOrder(16, true, 5, epoch, {0, 5, 7}));
  }
}

TEST(CoordinatorTest, EmptySourceIsDoneAtOnce) {
  auto c = Make(Options(/*per_epoch=*/0, /*split_size=*/4), {1.0});
  SplitAssignment split;
  EXPECT_TRUE(c->done());
  EXPECT_EQ(c->Acquire(0, &split), Acquired::kDone);
}

// Every consumer completes its splits at once and asks in turn: the samples each one got
// must approach its share.
TEST(CoordinatorTest, SharesAreReachedWithinATolerance) {
  struct Case {
    std::vector<double> shares;
  };
  const std::vector<Case> cases = {
      {{0.5, 0.5}}, {{0.25, 0.75}}, {{0.1, 0.3, 0.6}}, {{0.7, 0.2, 0.1}},
      {{0.0, 1.0}}, {{1.0, 0.0}},   {{3, 1}},  // unnormalised weights
  };
  for (const Case& tc : cases) {
    auto c = Make(Options(/*per_epoch=*/5000, /*split_size=*/10), tc.shares, /*max_open=*/1);
    SplitAssignment split;
    bool done = false;
    for (int round = 0; !done && round < 100000; ++round) {
      bool any = false;
      for (int i = 0; i < static_cast<int>(tc.shares.size()); ++i) {
        Acquired a = c->TryAcquire(i, &split);
        if (a == Acquired::kDone) done = true;
        if (a != Acquired::kSplit) continue;
        any = true;
        DeliverAll(*c, split);
      }
      ASSERT_TRUE(any || done) << "nobody could take a split";
    }
    ASSERT_TRUE(c->done());
    CoordinatorStats stats = c->Stats();
    double total = 0;
    for (double s : tc.shares) total += s;
    for (size_t i = 0; i < tc.shares.size(); ++i) {
      const double got = stats.consumers[i].assigned / 5000.0;
      EXPECT_NEAR(got, tc.shares[i] / total, 0.01)
          << "consumer " << i << " of shares " << ::testing::PrintToString(tc.shares);
    }
  }
}

TEST(CoordinatorTest, ConsumerOverItsShareWaitsForAnEligibleOneWithRoom) {
  auto c = Make(Options(/*per_epoch=*/100, /*split_size=*/10), {0.5, 0.5}, /*max_open=*/2);
  SplitAssignment a, b;
  ASSERT_EQ(c->TryAcquire(0, &a), Acquired::kSplit);
  DeliverAll(*c, a);
  // Consumer 0 has 10 of 10: over its share while consumer 1 (nothing yet, room) waits.
  EXPECT_EQ(c->TryAcquire(0, &a), Acquired::kWait);
  ASSERT_EQ(c->TryAcquire(1, &b), Acquired::kSplit);
  EXPECT_EQ(c->TryAcquire(0, &a), Acquired::kSplit);
}

TEST(CoordinatorTest, SpillsOverWhenTheOtherConsumerIsBusy) {
  auto c = Make(Options(/*per_epoch=*/100, /*split_size=*/10), {0.5, 0.5}, /*max_open=*/1);
  SplitAssignment held, split;
  ASSERT_EQ(c->TryAcquire(1, &held), Acquired::kSplit);  // never finished: 1 is at its cap
  int taken = 0;
  while (c->TryAcquire(0, &split) == Acquired::kSplit) {
    ++taken;
    DeliverAll(*c, split);
  }
  EXPECT_EQ(taken, 9);  // everything but the held split, far over a 0.5 share
  EXPECT_FALSE(c->done());
  DeliverAll(*c, held);
  EXPECT_TRUE(c->done());
}

TEST(CoordinatorTest, SpillsOverWhenTheOtherConsumerIsInactive) {
  auto c = Make(Options(/*per_epoch=*/40, /*split_size=*/10), {0.1, 0.9}, /*max_open=*/1);
  c->SetActive(1, false);
  SplitAssignment split;
  EXPECT_EQ(c->TryAcquire(1, &split), Acquired::kInactive);
  int taken = 0;
  while (c->TryAcquire(0, &split) == Acquired::kSplit) {
    ++taken;
    DeliverAll(*c, split);
  }
  EXPECT_EQ(taken, 4);
  EXPECT_TRUE(c->done());
}

TEST(CoordinatorTest, ZeroShareTakesNothingWhileAPositiveShareIsActive) {
  // ratio 1.0: the local consumer (0) has share 0 and must not spill over while the worker
  // (1) is up, even when the worker is at its open-split cap...
  auto c = Make(Options(/*per_epoch=*/40, /*split_size=*/10), {0.0, 1.0}, /*max_open=*/1);
  SplitAssignment held, split;
  ASSERT_EQ(c->TryAcquire(1, &held), Acquired::kSplit);
  EXPECT_EQ(c->TryAcquire(0, &split), Acquired::kWait);
  // ...but once the worker is gone, the run goes on locally rather than stalling.
  c->SetActive(1, false);
  int taken = 0;
  while (c->TryAcquire(0, &split) == Acquired::kSplit) {
    ++taken;
    DeliverAll(*c, split);
  }
  EXPECT_GE(taken, 3);
}

// 100 samples in splits of 10 for a local side held to a share of `local_share` (0.2;
// spill_over false) and a worker with the rest; each may hold `max_open` open splits (1).
std::unique_ptr<Coordinator> HeldLocalAndWorker(double local_share = 0.2, int max_open = 1) {
  std::vector<ConsumerConfig> consumers(2);
  consumers[0] = ConsumerConfig{"local", local_share, max_open, true, /*spill_over=*/false};
  consumers[1] = ConsumerConfig{"worker", 1 - local_share, max_open, true};
  auto made = Coordinator::Create(Options(/*per_epoch=*/100, /*split_size=*/10), consumers);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

TEST(CoordinatorTest, ConsumerWithoutSpillOverKeepsToItsShareWhileAnotherDelivers) {
  // A trainer whose CPU is the limit (spill=workers): local (0) has 0.2 and must not take
  // more while the worker (1) delivers and is at its cap, where it would spill over by
  // default...
  std::unique_ptr<Coordinator> made = HeldLocalAndWorker();
  ASSERT_NE(made, nullptr);
  Coordinator& c = *made;
  SplitAssignment split, held;
  ASSERT_EQ(c.TryAcquire(1, &held), Acquired::kSplit);
  DeliverAll(c, held);  // the worker delivers: local is held against it from here on
  ASSERT_EQ(c.TryAcquire(0, &split), Acquired::kSplit);  // 0 of 10 so far: eligible
  DeliverAll(c, split);
  ASSERT_EQ(c.TryAcquire(1, &held), Acquired::kSplit);  // the worker at its cap
  EXPECT_EQ(c.TryAcquire(0, &split), Acquired::kWait);  // 20 of 30 would be over 0.2
  // ...the worker still spills over to take what local does not, and local gets a split
  // again only when its share allows: 10 assigned is under 0.2 x (50 + 10) once 50 are out
  // (counted from the worker's first delivery).
  DeliverAll(c, held);
  for (int worker_splits = 1; worker_splits <= 3; ++worker_splits) {
    ASSERT_EQ(c.TryAcquire(1, &held), Acquired::kSplit);
    DeliverAll(c, held);
    EXPECT_EQ(c.TryAcquire(0, &split), worker_splits < 3 ? Acquired::kWait : Acquired::kSplit)
        << worker_splits;
  }
  DeliverAll(c, split);
  // To the end: local tries first each time, and still ends at its 0.2 of the 90 samples
  // handed out since the worker's first delivery, in splits of 10.
  while (!c.done()) {
    if (c.TryAcquire(0, &split) == Acquired::kSplit) DeliverAll(c, split);
    if (c.TryAcquire(1, &held) == Acquired::kSplit) DeliverAll(c, held);
  }
  EXPECT_EQ(c.Stats().consumers[0].assigned, 20);

  // When the worker fails, local takes everything that is left, its share or not.
  std::unique_ptr<Coordinator> again = HeldLocalAndWorker();
  ASSERT_NE(again, nullptr);
  Coordinator& d = *again;
  ASSERT_EQ(d.TryAcquire(1, &held), Acquired::kSplit);
  DeliverAll(d, held);
  ASSERT_EQ(d.TryAcquire(1, &held), Acquired::kSplit);
  ASSERT_EQ(d.TryAcquire(0, &split), Acquired::kSplit);
  DeliverAll(d, split);
  EXPECT_EQ(d.TryAcquire(0, &split), Acquired::kWait);
  EXPECT_EQ(d.ConsumerFailed(1), 10);
  int taken = 0;
  while (d.TryAcquire(0, &split) == Acquired::kSplit) {
    ++taken;
    DeliverAll(d, split);
  }
  EXPECT_EQ(taken, 8);
  EXPECT_TRUE(d.done());
}

TEST(CoordinatorTest, AWorkerOverItsShareIsNotKeptWaitingByAHeldConsumerWithRoom) {
  // A held trainer's share is a cap, not a claim: a worker over its share still gets a split
  // while the held local side is under its share with room for more (with spill-over on both
  // sides, the worker would wait for it: ConsumerOverItsShareWaitsForAnEligibleOneWithRoom).
  std::unique_ptr<Coordinator> made = HeldLocalAndWorker(/*local_share=*/0.8, /*max_open=*/2);
  ASSERT_NE(made, nullptr);
  Coordinator& c = *made;
  SplitAssignment split;
  ASSERT_EQ(c.TryAcquire(1, &split), Acquired::kSplit);
  DeliverAll(c, split);
  // The worker has 10 of 10 and local none: local is under its share with room, and the
  // worker takes its next split all the same, up to its open-split cap.
  ASSERT_EQ(c.TryAcquire(1, &split), Acquired::kSplit);
  ASSERT_EQ(c.TryAcquire(1, &split), Acquired::kSplit);
  EXPECT_EQ(c.TryAcquire(1, &split), Acquired::kWait);  // at its cap of two open splits
  // Local still gets a split whenever it asks while under its share.
  ASSERT_EQ(c.TryAcquire(0, &split), Acquired::kSplit);
  EXPECT_EQ(c.Stats().consumers[1].assigned, 30);
  EXPECT_EQ(c.Stats().consumers[0].assigned, 10);
}

TEST(CoordinatorTest, AConsumerHeldToItsShareIsNotHeldByAWorkerThatHasNotDeliveredYet) {
  // A worker still starting (connecting, filling its pipeline, sending its first batch)
  // displaces no receive on the trainer, so the trainer does not wait for it: the hold
  // begins with the worker's first delivered sample, and what the trainer took until then
  // does not count against its share.
  std::unique_ptr<Coordinator> made = HeldLocalAndWorker();
  ASSERT_NE(made, nullptr);
  Coordinator& c = *made;
  SplitAssignment split, held;
  ASSERT_EQ(c.TryAcquire(1, &held), Acquired::kSplit);  // the worker, at its cap, starting
  for (int i = 0; i < 3; ++i) {  // 30 of 40 handed out: far over 0.2, and not held
    ASSERT_EQ(c.TryAcquire(0, &split), Acquired::kSplit) << i;
    DeliverAll(c, split);
  }
  // Its first sample: the hold begins here, and the 30 local took are forgotten, so local
  // is within its share (0 of 0 since)...
  ASSERT_TRUE(c.MarkDelivered(held.samples[0]).has_value());
  ASSERT_EQ(c.TryAcquire(0, &split), Acquired::kSplit);
  DeliverAll(c, split);
  for (size_t i = 1; i < held.samples.size(); ++i) c.MarkDelivered(held.samples[i]);
  ASSERT_EQ(c.TryAcquire(1, &held), Acquired::kSplit);  // at its cap again
  // ...and then held to it: 10 of the 20 handed out since, over 0.2.
  EXPECT_EQ(c.TryAcquire(0, &split), Acquired::kWait);
  EXPECT_EQ(c.Stats().consumers[0].assigned, 40);

  // A worker that failed and came back is starting again: not held until it delivers.
  EXPECT_EQ(c.ConsumerFailed(1), 10);
  c.SetActive(1, true);
  ASSERT_EQ(c.TryAcquire(1, &held), Acquired::kSplit);  // the re-queued split
  EXPECT_EQ(c.TryAcquire(0, &split), Acquired::kSplit);
}

TEST(CoordinatorTest, SetSpillOverChangesWhetherAConsumerSpillsOver) {
  auto c = Make(Options(/*per_epoch=*/100, /*split_size=*/10), {0.2, 0.8}, /*max_open=*/1);
  SplitAssignment split, held;
  c->SetSpillOver(0, false);
  ASSERT_EQ(c->TryAcquire(1, &held), Acquired::kSplit);
  DeliverAll(*c, held);  // the worker delivers: the hold applies
  ASSERT_EQ(c->TryAcquire(0, &split), Acquired::kSplit);
  DeliverAll(*c, split);
  ASSERT_EQ(c->TryAcquire(1, &held), Acquired::kSplit);  // the worker at its cap
  EXPECT_EQ(c->TryAcquire(0, &split), Acquired::kWait);  // held to its 0.2
  c->SetSpillOver(0, true);
  EXPECT_EQ(c->TryAcquire(0, &split), Acquired::kSplit);  // spills over again
}

TEST(CoordinatorTest, CapsOpenSplitsPerConsumer) {
  auto c = Make(Options(/*per_epoch=*/100, /*split_size=*/10), {1.0}, /*max_open=*/2);
  SplitAssignment s1, s2, s3;
  ASSERT_EQ(c->TryAcquire(0, &s1), Acquired::kSplit);
  ASSERT_EQ(c->TryAcquire(0, &s2), Acquired::kSplit);
  EXPECT_EQ(c->TryAcquire(0, &s3), Acquired::kWait);
  // Part of a split is not enough; all of it (delivered or skipped) is.
  for (size_t i = 0; i + 1 < s1.samples.size(); ++i) c->MarkDelivered(s1.samples[i]);
  EXPECT_EQ(c->TryAcquire(0, &s3), Acquired::kWait);
  c->MarkSkipped(s1.samples.back());
  EXPECT_EQ(c->TryAcquire(0, &s3), Acquired::kSplit);
  EXPECT_EQ(c->Stats().consumers[0].open_splits, 2);
}

TEST(CoordinatorTest, FailedConsumerSplitsAreRequeuedAtTheFrontWithoutDeliveredSamples) {
  auto c = Make(Options(/*per_epoch=*/100, /*split_size=*/10), {0.5, 0.5}, /*max_open=*/2);
  SplitAssignment l1, w1, w2, split;
  ASSERT_EQ(c->TryAcquire(0, &l1), Acquired::kSplit);  // seqs 0..9
  ASSERT_EQ(c->TryAcquire(1, &w1), Acquired::kSplit);  // 10..19
  ASSERT_EQ(c->TryAcquire(1, &w2), Acquired::kSplit);  // 20..29
  DeliverAll(*c, l1);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c->MarkDelivered(w1.samples[i]).has_value());
  c->MarkSkipped(w2.samples[0]);

  EXPECT_EQ(c->ConsumerFailed(1), 6 + 9);
  EXPECT_EQ(c->TryAcquire(1, &split), Acquired::kInactive);
  CoordinatorStats stats = c->Stats();
  EXPECT_EQ(stats.requeued_samples, 15);
  EXPECT_EQ(stats.consumers[1].assigned, 5);  // only what it resolved stays counted
  EXPECT_EQ(stats.consumers[1].open_splits, 0);

  // The survivor gets the re-queued samples first, oldest split first, then fresh ones.
  ASSERT_EQ(c->TryAcquire(0, &split), Acquired::kSplit);
  EXPECT_EQ(split.seqs, std::vector<uint64_t>({14, 15, 16, 17, 18, 19}));
  DeliverAll(*c, split);
  ASSERT_EQ(c->TryAcquire(0, &split), Acquired::kSplit);
  EXPECT_EQ(split.seqs, std::vector<uint64_t>({21, 22, 23, 24, 25, 26, 27, 28, 29}));
  DeliverAll(*c, split);
  ASSERT_EQ(c->TryAcquire(0, &split), Acquired::kSplit);
  EXPECT_EQ(split.seqs.front(), 30u);
}

TEST(CoordinatorTest, LateDeliveryOfARequeuedSampleIsAcceptedOnceAndLeftOutOfItsNewSplit) {
  auto c = Make(Options(/*per_epoch=*/20, /*split_size=*/10), {0.5, 0.5}, /*max_open=*/1);
  SplitAssignment w, split;
  ASSERT_EQ(c->TryAcquire(1, &w), Acquired::kSplit);
  c->ConsumerFailed(1);
  // A sample of the failed consumer arrives late (it was in flight).
  EXPECT_EQ(c->MarkDelivered(w.samples[3]), std::optional<uint64_t>(3));
  EXPECT_EQ(c->MarkDelivered(w.samples[3]), std::nullopt);  // and again: a duplicate
  ASSERT_EQ(c->TryAcquire(0, &split), Acquired::kSplit);
  EXPECT_EQ(split.samples.size(), 9u);
  for (const SampleId& id : split.samples) EXPECT_NE(id, w.samples[3]);
  EXPECT_EQ(c->Stats().duplicates, 1);
}

TEST(CoordinatorTest, ReleaseSplitRequeuesWhatTheConsumerDidNotDeliver) {
  auto c = Make(Options(/*per_epoch=*/10, /*split_size=*/10), {1.0}, /*max_open=*/1);
  SplitAssignment s, again;
  ASSERT_EQ(c->TryAcquire(0, &s), Acquired::kSplit);
  for (int i = 0; i < 7; ++i) c->MarkDelivered(s.samples[i]);
  EXPECT_EQ(c->ReleaseSplit(s.split_id), 3);
  EXPECT_EQ(c->ReleaseSplit(s.split_id), 0);
  ASSERT_EQ(c->TryAcquire(0, &again), Acquired::kSplit);
  EXPECT_EQ(again.seqs, std::vector<uint64_t>({7, 8, 9}));
  DeliverAll(*c, again);
  EXPECT_TRUE(c->done());
}

TEST(CoordinatorTest, UnknownAndFinishedSamplesAreNotAccepted) {
  auto c = Make(Options(/*per_epoch=*/4, /*split_size=*/4, /*epochs=*/2), {1.0}, 1);
  SplitAssignment s;
  EXPECT_EQ(c->MarkDelivered(SampleId{0, 1}), std::nullopt);  // never handed out
  ASSERT_EQ(c->TryAcquire(0, &s), Acquired::kSplit);
  EXPECT_EQ(c->MarkDelivered(SampleId{0, 99}), std::nullopt);  // not in the source
  DeliverAll(*c, s);
  EXPECT_EQ(c->Stats().epochs_completed, 1);
  EXPECT_EQ(c->MarkDelivered(SampleId{0, 1}), std::nullopt);  // its epoch is over
  EXPECT_EQ(c->SeqOf(SampleId{0, 1}), std::nullopt);
  EXPECT_EQ(c->Stats().duplicates, 1);
}

TEST(CoordinatorTest, WindowHoldsFreshSplitsNearTheOldestUnresolvedSample) {
  CoordinatorOptions o = Options(/*per_epoch=*/100, /*split_size=*/10);
  o.window = 20;
  auto c = Make(o, {1.0}, /*max_open=*/10);
  SplitAssignment s1, s2, s3;
  ASSERT_EQ(c->TryAcquire(0, &s1), Acquired::kSplit);
  ASSERT_EQ(c->TryAcquire(0, &s2), Acquired::kSplit);
  EXPECT_EQ(c->TryAcquire(0, &s3), Acquired::kWait);
  DeliverAll(*c, s2);  // later samples do not move the window
  EXPECT_EQ(c->TryAcquire(0, &s3), Acquired::kWait);
  c->MarkDelivered(s1.samples[0]);
  ASSERT_EQ(c->TryAcquire(0, &s3), Acquired::kSplit);
  EXPECT_EQ(s3.seqs.front(), 20u);
}

TEST(CoordinatorTest, BlockedAcquireWakesOnDeliveryAndOnCancel) {
  auto c = Make(Options(/*per_epoch=*/100, /*split_size=*/10), {1.0}, /*max_open=*/1);
  SplitAssignment s1;
  ASSERT_EQ(c->Acquire(0, &s1), Acquired::kSplit);
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    SplitAssignment s;
    result = static_cast<int>(c->Acquire(0, &s));
  });
  DeliverAll(*c, s1);
  waiter.join();
  EXPECT_EQ(result.load(), static_cast<int>(Acquired::kSplit));

  std::thread cancelled([&] {
    SplitAssignment s;
    result = static_cast<int>(c->Acquire(0, &s));  // at its cap: blocks
  });
  c->Cancel();
  cancelled.join();
  EXPECT_EQ(result.load(), static_cast<int>(Acquired::kCancelled));
}

// Several consumers on threads, one of which fails halfway and comes back: every sample of
// every epoch is delivered exactly once.
TEST(CoordinatorTest, ExactlyOnceUnderConcurrencyAndFailure) {
  CoordinatorOptions o = Options(/*per_epoch=*/997, /*split_size=*/13, /*epochs=*/3);
  o.shuffle = true;
  o.seed = 5;
  auto c = Make(o, {0.4, 0.3, 0.3}, /*max_open=*/3);
  std::mutex mu;
  std::map<SampleId, int> delivered;
  std::vector<std::thread> threads;
  for (int consumer = 0; consumer < 3; ++consumer) {
    threads.emplace_back([&, consumer] {
      Rng rng(SeedFor(1, 0, consumer, 0));
      int splits = 0;
      bool failed_once = false;
      for (;;) {
        SplitAssignment s;
        Acquired a = c->Acquire(consumer, &s);
        if (a == Acquired::kInactive) {
          c->SetActive(consumer, true);
          continue;
        }
        if (a != Acquired::kSplit) return;
        ++splits;
        if (consumer == 2 && !failed_once && splits == 10) {
          // Deliver part of the split, then fail with it (and any other open split) open.
          for (size_t i = 0; i < s.samples.size() / 2; ++i) {
            if (c->MarkDelivered(s.samples[i])) {
              std::lock_guard<std::mutex> lock(mu);
              ++delivered[s.samples[i]];
            }
          }
          c->ConsumerFailed(consumer);
          failed_once = true;
          continue;
        }
        for (const SampleId& id : s.samples) {
          if (rng.Bernoulli(0.01)) {
            if (c->MarkSkipped(id)) {
              std::lock_guard<std::mutex> lock(mu);
              ++delivered[id];
            }
          } else if (c->MarkDelivered(id)) {
            std::lock_guard<std::mutex> lock(mu);
            ++delivered[id];
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(c->done());
  ASSERT_EQ(delivered.size(), 3u * 997u);
  for (const auto& [id, n] : delivered) {
    ASSERT_EQ(n, 1) << id.epoch << "/" << id.index;
    ASSERT_LT(id.index, 997u);
  }
  CoordinatorStats stats = c->Stats();
  EXPECT_EQ(stats.delivered + stats.skipped, 3 * 997);
  EXPECT_GT(stats.requeued_samples, 0);
  EXPECT_EQ(stats.epochs_completed, 3);
}

}  // namespace
}  // namespace sluice::runtime

namespace sluice::runtime {
namespace {

TEST(CoordinatorResumeTest, ConsumedSamplesAreReservedAndNeverHandedOut) {
  CoordinatorOptions o = Options(/*per_epoch=*/10, /*split_size=*/4, /*epochs=*/3);
  o.shuffle = true;
  o.seed = 3;
  auto progress = std::make_shared<pipeline::SourceProgress>();
  progress->first_epoch = 1;
  progress->consumed[1] = std::vector<bool>(10, false);
  for (uint64_t i : {0, 4, 5, 9}) progress->consumed[1][i] = true;
  o.resume = progress;
  std::unique_ptr<Coordinator> c = Make(o, {1.0});
  ASSERT_NE(c, nullptr);
  std::vector<SampleId> reserved = c->ReservedSamples();
  ASSERT_EQ(reserved.size(), 4u);
  // The reserved samples resolve (as the Loader does through the merge) with sequence
  // numbers counted from the first resumed epoch.
  for (const SampleId& id : reserved) {
    std::optional<uint64_t> seq = c->MarkSkipped(id);
    ASSERT_TRUE(seq.has_value());
    EXPECT_LT(*seq, 10u);
  }
  std::set<SampleId> handed;
  SplitAssignment split;
  while (c->TryAcquire(0, &split) == Acquired::kSplit) {
    EXPECT_LE(split.samples.size(), 4u);
    for (const SampleId& id : split.samples) {
      EXPECT_FALSE(progress->Consumed(id)) << id.epoch << "/" << id.index;
      EXPECT_TRUE(handed.insert(id).second);
    }
    DeliverAll(*c, split);
  }
  EXPECT_TRUE(c->done());
  EXPECT_EQ(handed.size(), 6u + 10u);  // epoch 1 minus the 4 consumed, then epoch 2
  CoordinatorStats stats = c->Stats();
  EXPECT_EQ(stats.resumed, 4);
  EXPECT_EQ(stats.skipped, 0);
  EXPECT_EQ(stats.delivered, 16);
  EXPECT_EQ(stats.epochs_completed, 2);
}

TEST(CoordinatorResumeTest, ResumingAtTheEndIsDoneAtOnce) {
  CoordinatorOptions o = Options(10, 4, /*epochs=*/2);
  auto progress = std::make_shared<pipeline::SourceProgress>();
  progress->first_epoch = 2;
  o.resume = progress;
  std::unique_ptr<Coordinator> c = Make(o, {1.0});
  ASSERT_NE(c, nullptr);
  SplitAssignment split;
  EXPECT_EQ(c->TryAcquire(0, &split), Acquired::kDone);
}

}  // namespace
}  // namespace sluice::runtime

namespace sluice::runtime {
namespace {

// Drains a one-consumer coordinator: the samples it hands out, in order, with their files.
std::vector<std::pair<SampleId, uint64_t>> DrainShares(Coordinator& c) {
  std::vector<std::pair<SampleId, uint64_t>> out;
  SplitAssignment split;
  while (c.TryAcquire(0, &split) == Acquired::kSplit) {
    EXPECT_EQ(split.files.size(), split.samples.size());
    for (size_t i = 0; i < split.samples.size(); ++i) {
      out.emplace_back(split.samples[i], split.files[i]);
    }
    DeliverAll(c, split);
  }
  return out;
}

TEST(CoordinatorShardTest, HandsOutOnlyTheRanksShareAndThePaddedSamplesFiles) {
  CoordinatorOptions o = Options(/*per_epoch=*/10, /*split_size=*/2, /*epochs=*/2);
  o.shuffle = true;
  o.seed = 3;
  o.shard = pipeline::Shard{2, 3};
  o.even = pipeline::EvenRule::kPad;
  std::unique_ptr<Coordinator> c = Make(o, {1.0});
  ASSERT_NE(c, nullptr);
  std::vector<std::pair<SampleId, uint64_t>> expected;
  for (uint32_t epoch = 0; epoch < 2; ++epoch) {
    pipeline::EpochShare share =
        pipeline::EpochShareOf(10, true, 3, epoch, o.shard, o.even, nullptr);
    for (uint64_t id : share.ids) expected.emplace_back(SampleId{epoch, id}, share.FileOf(id));
  }
  ASSERT_EQ(expected.size(), 8u);
  EXPECT_GE(expected[3].first.index, 10u);  // rank 2 gets the second padded sample
  EXPECT_EQ(DrainShares(*c), expected);
  EXPECT_TRUE(c->done());
  // Another rank's sample is not this coordinator's to accept.
  auto other = Make(o, {1.0});
  pipeline::EpochShare rank0 =
      pipeline::EpochShareOf(10, true, 3, 0, pipeline::Shard{0, 3}, o.even, nullptr);
  SplitAssignment split;
  ASSERT_EQ(other->TryAcquire(0, &split), Acquired::kSplit);
  EXPECT_FALSE(other->MarkDelivered(SampleId{0, rank0.ids[0]}).has_value());
}

// After an elastic resume an epoch holds only the share of what remained: shorter than a
// whole epoch's share, or empty (fewer samples left than ranks under drop), and the run
// still ends.
TEST(CoordinatorShardTest, AnEpochDividedAfreshIsShorterOrEmpty) {
  for (int consumed : {5, 8}) {
    CoordinatorOptions o = Options(/*per_epoch=*/10, /*split_size=*/2, /*epochs=*/2);
    o.shard = pipeline::Shard{1, 3};
    auto progress = std::make_shared<pipeline::SourceProgress>();
    progress->consumed[0] = std::vector<bool>(10, false);
    for (int i = 0; i < consumed; ++i) progress->consumed[0][i] = true;
    progress->divided = progress->consumed;
    o.resume = progress;
    std::unique_ptr<Coordinator> c = Make(o, {1.0});
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(c->ReservedSamples().empty());
    std::vector<std::pair<SampleId, uint64_t>> got = DrainShares(*c);
    const size_t first = consumed == 5 ? 1 : 0;  // 5 left: one each; 2 left: none
    ASSERT_EQ(got.size(), first + 3) << consumed;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first.epoch, i < first ? 0u : 1u) << consumed;
      EXPECT_GE(got[i].first.index, i < first ? static_cast<uint64_t>(consumed) : 0u);
    }
    EXPECT_TRUE(c->done()) << consumed;
    EXPECT_EQ(c->Stats().epochs_completed, 2) << consumed;
  }
}

}  // namespace
}  // namespace sluice::runtime
