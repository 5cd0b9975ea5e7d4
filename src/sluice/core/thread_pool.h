// ThreadPool: a fixed set of threads running scheduled closures in FIFO order.
// Thread-safe. The destructor finishes the closures already scheduled, then joins.
// Closures must not throw.
#ifndef SLUICE_CORE_THREAD_POOL_H_
#define SLUICE_CORE_THREAD_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace sluice {

class ThreadPool {
 public:
  // REQUIRES: num_threads >= 1.
  explicit ThreadPool(int num_threads, std::string name = "sluice");
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  void Schedule(std::function<void()> fn);
  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_THREAD_POOL_H_
