#include "sluice/core/batch_slots.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(BatchSlotsTest, SlotsOfABatchLieSideBySideInOneBufferThenTheNextBatchGetsItsOwn) {
  BatchSlots slots(DType::kF32, {2, 3}, 3);
  const size_t row = 2 * 3 * sizeof(float);
  std::vector<Tensor> t;
  for (int i = 0; i < 5; ++i) t.push_back(slots.Take(DType::kF32, {2, 3}));
  for (const Tensor& s : t) {
    EXPECT_EQ(s.dtype(), DType::kF32);
    EXPECT_EQ(s.shape(), (Shape{2, 3}));
  }
  // The first three share a buffer of exactly three rows, in order.
  ASSERT_NE(t[0].buffer(), nullptr);
  EXPECT_EQ(t[0].buffer()->size(), 3 * row);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t[i].buffer(), t[0].buffer());
    EXPECT_EQ(t[i].offset(), i * row);
  }
  // The fourth starts the next batch's buffer.
  EXPECT_NE(t[3].buffer(), t[0].buffer());
  EXPECT_EQ(t[3].offset(), 0u);
  EXPECT_EQ(t[4].buffer(), t[3].buffer());
  EXPECT_EQ(t[4].offset(), row);
}

TEST(BatchSlotsTest, AnotherDtypeOrShapeGetsAFreshTensorAndTakesNoSlot) {
  BatchSlots slots(DType::kU8, {4}, 2);
  Tensor a = slots.Take(DType::kU8, {4});
  Tensor other_shape = slots.Take(DType::kU8, {5});
  Tensor other_dtype = slots.Take(DType::kF32, {4});
  Tensor b = slots.Take(DType::kU8, {4});
  EXPECT_EQ(other_shape.shape(), (Shape{5}));
  EXPECT_EQ(other_shape.buffer()->size(), 5u);
  EXPECT_NE(other_shape.buffer(), a.buffer());
  EXPECT_EQ(other_dtype.dtype(), DType::kF32);
  EXPECT_NE(other_dtype.buffer(), a.buffer());
  // The mismatches took no slot: b is a's neighbour.
  EXPECT_EQ(b.buffer(), a.buffer());
  EXPECT_EQ(b.offset(), 4u);
}

TEST(BatchSlotsTest, ThreadsTakingAtOnceGetEverySlotOnce) {
  constexpr int kThreads = 4, kPerThread = 250, kBatch = 7;
  BatchSlots slots(DType::kI32, {3}, kBatch);
  std::mutex mu;
  std::vector<Tensor> all;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<Tensor> mine;
      for (int i = 0; i < kPerThread; ++i) mine.push_back(slots.Take(DType::kI32, {3}));
      std::lock_guard<std::mutex> lock(mu);
      for (Tensor& m : mine) all.push_back(std::move(m));
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  std::set<std::pair<const Buffer*, size_t>> seen;
  std::set<const Buffer*> buffers;
  for (const Tensor& s : all) {
    EXPECT_TRUE(seen.insert({s.buffer().get(), s.offset()}).second) << "a slot handed out twice";
    buffers.insert(s.buffer().get());
    EXPECT_EQ(s.offset() % (3 * sizeof(int32_t)), 0u);
    EXPECT_LT(s.offset(), kBatch * 3 * sizeof(int32_t));
  }
  // Every buffer was filled before the next was started: ceil(1000 / 7) of them.
  EXPECT_EQ(buffers.size(), static_cast<size_t>((kThreads * kPerThread + kBatch - 1) / kBatch));
}

// Slots whose buffers come from a source (a worker's shared slots, rpc/slot_arena.h) give
// nothing until activated, then the source's buffers a batch at a time; a source with none
// to give, or one too small, leaves the sample a tensor of its own.
TEST(BatchSlotsTest, SlotsFromASourceStartInactiveAndFallBackWhenItHasNone) {
  std::vector<std::shared_ptr<Buffer>> given;
  size_t size = 2 * 8;  // two slots of two floats
  int calls = 0;
  BatchSlots slots(DType::kF32, {2}, 2, [&]() -> std::shared_ptr<Buffer> {
    ++calls;
    if (size == 0) return nullptr;
    given.push_back(Buffer::Allocate(size));
    return given.back();
  });
  EXPECT_FALSE(slots.active());
  Tensor before = slots.Take(DType::kF32, {2});
  EXPECT_EQ(calls, 0) << "inactive: the source is not asked";
  slots.Activate();
  Tensor a = slots.Take(DType::kF32, {2});
  Tensor b = slots.Take(DType::kF32, {2});
  ASSERT_EQ(given.size(), 1u);
  EXPECT_EQ(a.buffer(), given[0]);
  EXPECT_EQ(b.buffer(), given[0]);
  EXPECT_EQ(b.offset(), a.offset() + 8);
  EXPECT_NE(before.buffer(), given[0]);
  size = 0;  // the source has none now
  Tensor c = slots.Take(DType::kF32, {2});
  EXPECT_NE(c.buffer(), nullptr);
  EXPECT_EQ(given.size(), 1u);
  size = 8;  // too small for a batch
  Tensor d = slots.Take(DType::kF32, {2});
  EXPECT_EQ(given.size(), 2u);
  EXPECT_NE(d.buffer(), given[1]);
  size = 16;  // asked again for the next sample
  Tensor e = slots.Take(DType::kF32, {2});
  EXPECT_EQ(e.buffer(), given.back());
}

}  // namespace
}  // namespace sluice
