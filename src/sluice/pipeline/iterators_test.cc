#include "sluice/pipeline/iterators.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/test_util.h"

namespace sluice::pipeline {
namespace {

using testing_util::Drain;
using testing_util::FakeFiles;
using testing_util::MakeElement;
using testing_util::VectorIterator;
using testing_util::WithWatchdog;

std::unique_ptr<Iterator> Numbers(int n, Status final_status = {}) {
  Schema schema({{"x", DType::kI64, {}}});
  std::vector<Element> elements;
  for (int i = 0; i < n; ++i) elements.push_back(MakeElement(i, {Tensor::Scalar(i)}));
  return std::make_unique<VectorIterator>(schema, elements, final_status);
}

std::vector<int64_t> Values(const std::vector<Element>& elements) {
  std::vector<int64_t> v;
  for (const Element& e : elements) v.push_back(e.tensors[0].scalar_int());
  return v;
}

// Blocks in GetNext until cancelled (for cancellation tests).
class BlockingIterator : public Iterator {
 public:
  Status GetNext(Element*, bool*) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return cancelled_; });
    return absl::CancelledError("cancelled");
  }
  void Cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  const Schema& schema() const override { return schema_; }

 private:
  Schema schema_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;
};

TEST(FilterTest, KeepsWhatThePredicateAccepts) {
  FilterIterator it(Numbers(10),
                    [](const Element& e) { return e.tensors[0].scalar_int() % 3 == 0; });
  EXPECT_THAT(Values(Drain(it)), ::testing::ElementsAre(0, 3, 6, 9));
}

TEST(ShuffleBufferTest, IsASeededPermutation) {
  auto run = [](uint64_t seed) {
    ShuffleBufferIterator it(Numbers(200), 16, seed);
    return Values(Drain(it));
  };
  std::vector<int64_t> a = run(1);
  std::vector<int64_t> identity(200);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
  EXPECT_EQ(a, run(1));
  EXPECT_NE(a, run(2));
  // A buffer of N can only move an element at most N - 1 places earlier.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(a[i], static_cast<int64_t>(i) + 15);
}

TEST(ShuffleBufferTest, RespectsTheBufferSizeAndBytes) {
  ShuffleBufferIterator it(Numbers(50), 8, 3);
  Element e;
  bool eos = false;
  ASSERT_TRUE(it.GetNext(&e, &eos).ok());
  EXPECT_EQ(it.buffered(), 7u);
  ShuffleBufferIterator small(Numbers(50), 8, 3, /*max_bytes=*/16);  // two 8-byte scalars
  ASSERT_TRUE(small.GetNext(&e, &eos).ok());
  EXPECT_EQ(small.buffered(), 1u);
  EXPECT_EQ(Drain(small).size(), 49u);
}

TEST(ShuffleBufferTest, ReportsTheMemoryItHolds) {
  PipelineStats stats;
  stats.Init({});
  ShuffleBufferIterator it(Numbers(50), 8, 3, /*max_bytes=*/0, &stats);
  EXPECT_EQ(Drain(it).size(), 50u);
  EXPECT_EQ(stats.shuffle_buffer_peak_samples.load(), 8);
  EXPECT_EQ(stats.shuffle_buffer_peak_bytes.load(), 8 * 8);  // 8-byte scalars
  EXPECT_EQ(stats.shuffle_buffer_samples.load(), 0);  // drained at the end
  PipelineStats capped;
  capped.Init({});
  ShuffleBufferIterator small(Numbers(50), 8, 3, /*max_bytes=*/16, &capped);
  EXPECT_EQ(Drain(small).size(), 50u);
  EXPECT_EQ(capped.shuffle_buffer_peak_bytes.load(), 16);
}

TEST(ShuffleBufferTest, ErrorsStick) {
  ShuffleBufferIterator it(Numbers(3, absl::InternalError("boom")), 10, 1);
  Element e;
  bool eos = false;
  EXPECT_EQ(it.GetNext(&e, &eos).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(it.GetNext(&e, &eos).code(), absl::StatusCode::kInternal);
}

TEST(TakeTest, StopsAfterCount) {
  TakeIterator it(Numbers(10), 4);
  EXPECT_THAT(Values(Drain(it)), ::testing::ElementsAre(0, 1, 2, 3));
  TakeIterator more(Numbers(2), 4);
  EXPECT_EQ(Drain(more).size(), 2u);
  TakeIterator none(Numbers(2), 0);
  EXPECT_EQ(Drain(none).size(), 0u);
}

TEST(RepeatTest, RecreatesTheInputForEachEpoch) {
  std::vector<int64_t> epochs_made;
  auto factory = [&](int64_t epoch) -> StatusOr<std::unique_ptr<Iterator>> {
    epochs_made.push_back(epoch);
    SourceOptions o;
    o.shuffle = true;
    o.seed = static_cast<uint64_t>(epoch);
    return std::unique_ptr<Iterator>(new SourceIterator(FakeFiles(3), o));
  };
  StatusOr<std::unique_ptr<RepeatIterator>> it = RepeatIterator::Create(factory, 3);
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_EQ(Drain(**it).size(), 9u);
  EXPECT_THAT(epochs_made, ::testing::ElementsAre(0, 1, 2));
  EXPECT_FALSE(RepeatIterator::Create(factory, 0).ok());
}

TEST(RepeatTest, ForeverStopsOnAnEmptyEpoch) {
  auto factory = [&](int64_t) -> StatusOr<std::unique_ptr<Iterator>> { return Numbers(0); };
  StatusOr<std::unique_ptr<RepeatIterator>> it = RepeatIterator::Create(factory, -1);
  ASSERT_TRUE(it.ok());
  EXPECT_EQ(Drain(**it).size(), 0u);
  auto endless = RepeatIterator::Create(
      [&](int64_t) -> StatusOr<std::unique_ptr<Iterator>> { return Numbers(2); }, -1);
  ASSERT_TRUE(endless.ok());
  EXPECT_EQ(Drain(**endless, 1001).size(), 1001u);
}

TEST(PrefetchTest, DeliversEverythingInOrderThenStickyEnd) {
  auto it = PrefetchIterator::Create(Numbers(100), 4, 0);
  std::vector<int64_t> v = Values(Drain(*it));
  ASSERT_EQ(v.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(v[i], i);
  Element e;
  bool eos = false;
  ASSERT_TRUE(it->GetNext(&e, &eos).ok());
  EXPECT_TRUE(eos);
}

TEST(PrefetchTest, BoundsItsQueue) {
  auto it = PrefetchIterator::Create(Numbers(100), 3, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_LE(it->buffered(), 3u);
  auto by_bytes = PrefetchIterator::Create(Numbers(100), 50, /*max_bytes=*/16);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_LE(by_bytes->buffered(), 2u);
}

TEST(PrefetchTest, ErrorsArriveAfterTheElementsAndStick) {
  auto it = PrefetchIterator::Create(Numbers(5, absl::DataLossError("bad")), 2, 0);
  for (int i = 0; i < 5; ++i) {
    Element e;
    bool eos = false;
    ASSERT_TRUE(it->GetNext(&e, &eos).ok());
  }
  Element e;
  bool eos = false;
  EXPECT_EQ(it->GetNext(&e, &eos).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(it->GetNext(&e, &eos).code(), absl::StatusCode::kDataLoss);
}

TEST(PrefetchTest, CancelFromEveryState) {
  WithWatchdog(20, [] {
    // Consumer blocked while the producer is blocked in its input.
    auto it = PrefetchIterator::Create(std::make_unique<BlockingIterator>(), 2, 0);
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      it->Cancel();
    });
    Element e;
    bool eos = false;
    EXPECT_TRUE(absl::IsCancelled(it->GetNext(&e, &eos)));
    canceller.join();
    it.reset();
    // Producer blocked on a full queue, never consumed.
    it = PrefetchIterator::Create(Numbers(100), 2, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    it->Cancel();
    EXPECT_TRUE(absl::IsCancelled(it->GetNext(&e, &eos)));
    it.reset();
    // Destroyed without Cancel, with the producer blocked in its input.
    it = PrefetchIterator::Create(std::make_unique<BlockingIterator>(), 2, 0);
    it.reset();
    // After end of stream.
    it = PrefetchIterator::Create(Numbers(2), 2, 0);
    EXPECT_EQ(Drain(*it).size(), 2u);
    it->Cancel();
    EXPECT_TRUE(absl::IsCancelled(it->GetNext(&e, &eos)));
  });
}

TEST(SyncIteratorsTest, CancelPropagatesToTheInput) {
  WithWatchdog(20, [] {
    auto blocking = std::make_unique<BlockingIterator>();
    TakeIterator take(std::move(blocking), 5);
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      take.Cancel();
    });
    Element e;
    bool eos = false;
    EXPECT_TRUE(absl::IsCancelled(take.GetNext(&e, &eos)));
    canceller.join();
    ShuffleBufferIterator shuffle(std::make_unique<BlockingIterator>(), 4, 1);
    std::thread c2([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      shuffle.Cancel();
    });
    EXPECT_TRUE(absl::IsCancelled(shuffle.GetNext(&e, &eos)));
    c2.join();
    FilterIterator filter(std::make_unique<BlockingIterator>(),
                          [](const Element&) { return true; });
    std::thread c3([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      filter.Cancel();
    });
    EXPECT_TRUE(absl::IsCancelled(filter.GetNext(&e, &eos)));
    c3.join();
  });
}

}  // namespace
}  // namespace sluice::pipeline
