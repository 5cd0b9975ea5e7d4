#include "sluice/core/queue.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "sluice/core/thread_pool.h"

namespace sluice {
namespace {

using std::chrono::seconds;

TEST(BoundedQueueTest, FifoAndCloseDrains) {
  BoundedQueue<int> q(10, 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.Push(i, 1));
  q.Close();
  EXPECT_FALSE(q.Push(9, 1));  // closed: no more pushes
  EXPECT_EQ(q.Pop(), 0);
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_EQ(q.Pop(), std::nullopt);
  EXPECT_EQ(q.Pop(), std::nullopt);
}

TEST(BoundedQueueTest, ItemCapacityBlocksProducer) {
  BoundedQueue<int> q(2, 0);
  ASSERT_TRUE(q.Push(1, 0));
  ASSERT_TRUE(q.Push(2, 0));
  auto pushed = std::async(std::launch::async, [&] { return q.Push(3, 0); });
  EXPECT_EQ(pushed.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(q.Pop(), 1);
  ASSERT_EQ(pushed.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_TRUE(pushed.get());
  EXPECT_EQ(q.size(), 2u);
}

TEST(BoundedQueueTest, ByteCapacityBlocksButAdmitsOneOversizedItem) {
  BoundedQueue<int> q(100, 1000);
  ASSERT_TRUE(q.Push(1, 5000));  // alone in an empty queue: admitted
  EXPECT_EQ(q.bytes(), 5000u);
  auto pushed = std::async(std::launch::async, [&] { return q.Push(2, 10); });
  EXPECT_EQ(pushed.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  EXPECT_EQ(q.Pop(), 1);
  ASSERT_EQ(pushed.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(q.bytes(), 10u);
}

TEST(BoundedQueueTest, CancelWakesBlockedProducersAndConsumers) {
  BoundedQueue<int> full(1, 0);
  ASSERT_TRUE(full.Push(1, 0));
  auto producer = std::async(std::launch::async, [&] { return full.Push(2, 0); });
  BoundedQueue<int> empty(1, 0);
  auto consumer = std::async(std::launch::async, [&] { return empty.Pop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  full.Cancel();
  empty.Cancel();
  ASSERT_EQ(producer.wait_for(seconds(5)), std::future_status::ready);
  ASSERT_EQ(consumer.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_FALSE(producer.get());
  EXPECT_EQ(consumer.get(), std::nullopt);
  EXPECT_EQ(full.Pop(), std::nullopt);  // cancelled queues drop their contents
}

TEST(BoundedQueueTest, ManyProducersManyConsumersLoseNothing) {
  BoundedQueue<int> q(4, 0);
  std::atomic<int64_t> sum{0};
  std::atomic<int> count{0};
  {
    ThreadPool consumers(3);
    for (int c = 0; c < 3; ++c) {
      consumers.Schedule([&] {
        while (auto v = q.Pop()) {
          sum += *v;
          ++count;
        }
      });
    }
    std::vector<std::thread> producers;
    for (int p = 0; p < 3; ++p) {
      producers.emplace_back([&, p] {
        for (int i = 0; i < 1000; ++i) q.Push(p * 1000 + i, 1);
      });
    }
    for (auto& t : producers) t.join();
    q.Close();
  }
  EXPECT_EQ(count.load(), 3000);
  EXPECT_EQ(sum.load(), int64_t{2999} * 3000 / 2);
}

TEST(ThreadPoolTest, RunsEverythingBeforeDestruction) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    EXPECT_EQ(pool.num_threads(), 2);
    for (int i = 0; i < 100; ++i) pool.Schedule([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace sluice
