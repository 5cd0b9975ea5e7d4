#include "sluice/runtime/merge.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::runtime {
namespace {

using Acquired = Coordinator::Acquired;

struct Fixture {
  std::unique_ptr<Coordinator> coordinator;
  std::vector<SplitAssignment> splits;
};

// A coordinator over `per_epoch` unshuffled samples with every split already handed out to
// consumer 0 (so the merge may accept any of them).
Fixture MakeFixture(uint64_t per_epoch, uint64_t split_size, int64_t epochs = 1) {
  Fixture f;
  CoordinatorOptions o;
  o.samples_per_epoch = per_epoch;
  o.split_size = split_size;
  o.epochs = epochs;
  auto made = Coordinator::Create(o, {ConsumerConfig{"local", 1.0, 1000, true}});
  EXPECT_TRUE(made.ok());
  f.coordinator = *std::move(made);
  SplitAssignment s;
  while (f.coordinator->TryAcquire(0, &s) == Acquired::kSplit) f.splits.push_back(s);
  return f;
}

Element Sample(uint32_t epoch, uint64_t index, uint8_t value = 0) {
  Element e;
  e.id = SampleId{epoch, index};
  e.tensors.push_back(Tensor::FromBytes(std::string(4, static_cast<char>(value))));
  return e;
}

Element Batch(std::vector<SampleId> members) {
  Element e;
  e.id = members.front();
  e.members = std::move(members);
  e.tensors.push_back(Tensor::Zeros(DType::kU8, {static_cast<int64_t>(e.members.size()), 2}));
  return e;
}

std::vector<uint64_t> DrainIndices(Merge& merge) {
  std::vector<uint64_t> out;
  for (;;) {
    Element e;
    bool end = false;
    Status s = merge.GetNext(&e, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    out.push_back(e.id.index);
  }
  return out;
}

TEST(MergeTest, FirstComeDeliversInArrivalOrderAndCountsPlaces) {
  Fixture f = MakeFixture(/*per_epoch=*/5, /*split_size=*/5);
  Merge merge(f.coordinator.get(), Schema(), /*num_places=*/3, MergeOptions{});
  const std::vector<std::pair<int, uint64_t>> pushes = {{2, 3}, {0, 0}, {1, 4}, {0, 1}, {2, 2}};
  for (auto [place, index] : pushes) {
    auto kept = merge.Push(place, Sample(0, index));
    ASSERT_TRUE(kept.ok());
    EXPECT_TRUE(*kept);
  }
  EXPECT_THAT(DrainIndices(merge), ::testing::ElementsAre(3, 0, 4, 1, 2));
  MergeStats stats = merge.Stats();
  EXPECT_THAT(stats.samples_by_place, ::testing::ElementsAre(2, 1, 2));
  EXPECT_EQ(stats.duplicates_dropped, 0);
  EXPECT_TRUE(f.coordinator->done());
}

TEST(MergeTest, LateDuplicatesAreDroppedAndCounted) {
  Fixture f = MakeFixture(/*per_epoch=*/3, /*split_size=*/3);
  Merge merge(f.coordinator.get(), Schema(), 2, MergeOptions{});
  EXPECT_TRUE(*merge.Push(1, Sample(0, 0, /*value=*/1)));
  EXPECT_FALSE(*merge.Push(0, Sample(0, 0, /*value=*/2)));
  EXPECT_TRUE(*merge.Push(0, Sample(0, 1)));
  merge.Skip(SampleId{0, 2});
  EXPECT_FALSE(*merge.Push(1, Sample(0, 2)));  // skipped already: a duplicate too
  Element e;
  bool end = false;
  ASSERT_TRUE(merge.GetNext(&e, &end).ok());
  EXPECT_EQ(e.tensors[0].bytes()[0], 1);  // the first copy won
  EXPECT_THAT(DrainIndices(merge), ::testing::ElementsAre(1));
  MergeStats stats = merge.Stats();
  EXPECT_EQ(stats.duplicates_dropped, 2);
  EXPECT_EQ(stats.skipped, 1);
  EXPECT_THAT(stats.samples_by_place, ::testing::ElementsAre(1, 1));
}

TEST(MergeTest, DeterministicReleasesInEpochOrderWhateverTheArrivalOrder) {
  Fixture f = MakeFixture(/*per_epoch=*/6, /*split_size=*/2, /*epochs=*/2);
  MergeOptions options;
  options.deterministic = true;
  Merge merge(f.coordinator.get(), Schema(), 2, options);
  std::atomic<bool> finished{false};
  std::vector<uint64_t> order;
  std::vector<uint32_t> epochs;
  std::thread consumer([&] {
    for (;;) {
      Element e;
      bool end = false;
      ASSERT_TRUE(merge.GetNext(&e, &end).ok());
      if (end) break;
      order.push_back(e.id.index);
      epochs.push_back(e.id.epoch);
    }
    finished = true;
  });
  // Epoch 1 first, epoch 0 backwards, with one sample skipped.
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(*merge.Push(i % 2, Sample(1, i)));
  for (uint64_t i = 6; i-- > 0;) {
    if (i == 2) {
      merge.Skip(SampleId{0, 2});
    } else {
      ASSERT_TRUE(*merge.Push(0, Sample(0, i)));
    }
  }
  consumer.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(order, std::vector<uint64_t>({0, 1, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(epochs, std::vector<uint32_t>({0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
}

TEST(MergeTest, DeterministicOrdersBatchesByTheirFirstMember) {
  Fixture f = MakeFixture(/*per_epoch=*/8, /*split_size=*/4);
  MergeOptions options;
  options.deterministic = true;
  Merge merge(f.coordinator.get(), Schema(), 2, options);
  ASSERT_TRUE(*merge.Push(1, Batch({{0, 6}, {0, 7}})));
  ASSERT_TRUE(*merge.Push(1, Batch({{0, 4}, {0, 5}})));
  ASSERT_TRUE(*merge.Push(0, Batch({{0, 2}, {0, 3}})));
  EXPECT_FALSE(*merge.Push(0, Batch({{0, 6}, {0, 7}})));  // a duplicate batch
  ASSERT_TRUE(*merge.Push(0, Batch({{0, 0}, {0, 1}})));
  EXPECT_THAT(DrainIndices(merge), ::testing::ElementsAre(0, 2, 4, 6));
  MergeStats stats = merge.Stats();
  EXPECT_THAT(stats.samples_by_place, ::testing::ElementsAre(4, 4));
  EXPECT_EQ(stats.duplicates_dropped, 2);
}

TEST(MergeTest, FirstComePushBlocksWhileFull) {
  Fixture f = MakeFixture(/*per_epoch=*/3, /*split_size=*/3);
  MergeOptions options;
  options.max_elements = 2;
  Merge merge(f.coordinator.get(), Schema(), 1, options);
  ASSERT_TRUE(*merge.Push(0, Sample(0, 0)));
  ASSERT_TRUE(*merge.Push(0, Sample(0, 1)));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    EXPECT_TRUE(*merge.Push(0, Sample(0, 2)));
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pushed.load());
  EXPECT_EQ(merge.Stats().buffered, 2u);
  Element e;
  bool end = false;
  ASSERT_TRUE(merge.GetNext(&e, &end).ok());
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_THAT(DrainIndices(merge), ::testing::ElementsAre(1, 2));
  EXPECT_EQ(merge.Stats().peak_buffered, 2u);
}

// A worker's chunk goes in with one PushAll: in order, its duplicates dropped and counted,
// and when the chunk is more than the merge holds, the consumer (asleep in GetNext before the
// push began) is woken for what went in before the producer waits for room, so neither waits
// for the other forever. The watchdog only bounds how long a broken build takes to fail.
TEST(MergeTest, PushAllOfAChunkLargerThanTheRoomWakesTheConsumerBeforeWaiting) {
  Fixture f = MakeFixture(/*per_epoch=*/6, /*split_size=*/6);
  MergeOptions options;
  options.max_elements = 2;
  Merge merge(f.coordinator.get(), Schema(), 1, options);
  ASSERT_TRUE(*merge.Push(0, Sample(0, 0)));
  Element first;
  bool end = false;
  ASSERT_TRUE(merge.GetNext(&first, &end).ok());
  std::vector<uint64_t> drained;
  std::thread consumer([&] { drained = DrainIndices(merge); });
  std::vector<Element> chunk;
  for (uint64_t index : {1, 0, 2, 3, 4, 5}) chunk.push_back(Sample(0, index));
  std::future<Status> pushed = std::async(std::launch::async, [&] {
    return merge.PushAll(0, std::move(chunk));
  });
  const bool finished = pushed.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(finished) << "PushAll and the consumer wait for each other";
  if (!finished) merge.Cancel();
  consumer.join();
  if (!finished) return;
  EXPECT_TRUE(pushed.get().ok());
  EXPECT_THAT(drained, ::testing::ElementsAre(1, 2, 3, 4, 5));
  const MergeStats stats = merge.Stats();
  EXPECT_EQ(stats.duplicates_dropped, 1);
  EXPECT_LE(stats.peak_buffered, 2u);
  EXPECT_THAT(stats.samples_by_place, ::testing::ElementsAre(6));
  EXPECT_EQ(merge.PushAll(0, {}).code(), absl::StatusCode::kOk);
  merge.Cancel();
  std::vector<Element> late;
  late.push_back(Sample(0, 1));
  EXPECT_EQ(merge.PushAll(0, std::move(late)).code(), absl::StatusCode::kCancelled);
}

TEST(MergeTest, FailEndsTheStreamAndCancelWakesProducers) {
  Fixture f = MakeFixture(/*per_epoch=*/4, /*split_size=*/4);
  MergeOptions options;
  options.max_elements = 1;
  Merge merge(f.coordinator.get(), Schema(), 1, options);
  ASSERT_TRUE(*merge.Push(0, Sample(0, 0)));
  merge.Fail(absl::DataLossError("ops[1].decode_jpeg: a.jpg: corrupt"));
  merge.Fail(absl::InternalError("second"));
  Element e;
  bool end = false;
  Status s = merge.GetNext(&e, &end);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(merge.Push(0, Sample(0, 1)).status().code(), absl::StatusCode::kDataLoss);

  Fixture g = MakeFixture(/*per_epoch=*/4, /*split_size=*/4);
  Merge blocked(g.coordinator.get(), Schema(), 1, options);
  ASSERT_TRUE(*blocked.Push(0, Sample(0, 0)));
  std::atomic<int> code{-1};
  std::thread producer(
      [&] { code = static_cast<int>(blocked.Push(0, Sample(0, 1)).status().code()); });
  blocked.Cancel();
  producer.join();
  EXPECT_EQ(code.load(), static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(blocked.GetNext(&e, &end).code(), absl::StatusCode::kCancelled);
}

TEST(MergeTest, ReaderForwardsToTheSharedMerge) {
  Fixture f = MakeFixture(/*per_epoch=*/1, /*split_size=*/1);
  Schema schema({FieldSpec{"data", DType::kBytes, {kUnknownDim}}});
  auto merge = std::make_shared<Merge>(f.coordinator.get(), schema, 1, MergeOptions{});
  MergeReader reader(merge);
  EXPECT_EQ(reader.schema(), schema);
  ASSERT_TRUE(*merge->Push(0, Sample(0, 0)));
  Element e;
  bool end = false;
  ASSERT_TRUE(reader.GetNext(&e, &end).ok());
  EXPECT_FALSE(end);
  ASSERT_TRUE(reader.GetNext(&e, &end).ok());
  EXPECT_TRUE(end);
}

}  // namespace
}  // namespace sluice::runtime
