// BoundedQueue: a multi-producer, multi-consumer FIFO bounded both in element count and in
// bytes. Thread-safe. Memory in a pipeline is bounded because every stage hands its output
// through one of these.
//
// A push blocks while the queue is full; one item is always admitted into an empty queue
// even if it alone exceeds the byte budget (otherwise a large item could never pass).
// Close() means "no more pushes": consumers drain what is left and then see end of stream.
// Cancel() wakes everyone at once: pending and future pushes and pops fail immediately.
#ifndef SLUICE_CORE_QUEUE_H_
#define SLUICE_CORE_QUEUE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"

namespace sluice {

template <typename T>
class BoundedQueue {
 public:
  // REQUIRES: max_items >= 1. max_bytes == 0 means no byte limit.
  BoundedQueue(size_t max_items, size_t max_bytes) : max_items_(max_items), max_bytes_(max_bytes) {}

  // Blocks until there is room. Returns false (dropping `item`) if the queue was closed or
  // cancelled.
  bool Push(T item, size_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return cancelled_ || closed_ || HasRoomLocked(bytes); });
    if (cancelled_ || closed_) return false;
    items_.emplace_back(std::move(item), bytes);
    bytes_ += bytes;
    not_empty_.notify_one();
    return true;
  }

  // Blocks until an item is available. Returns nullopt at end of stream (closed and
  // drained) or when cancelled.
  std::optional<T> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return cancelled_ || closed_ || !items_.empty(); });
    if (cancelled_ || items_.empty()) return std::nullopt;
    auto [item, bytes] = std::move(items_.front());
    items_.pop_front();
    bytes_ -= bytes;
    not_full_.notify_all();
    return std::move(item);
  }

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    items_.clear();
    bytes_ = 0;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }
  size_t bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }

 private:
  bool HasRoomLocked(size_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (items_.empty()) return true;
    if (items_.size() >= max_items_) return false;
    return max_bytes_ == 0 || bytes_ + bytes <= max_bytes_;
  }

  const size_t max_items_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::deque<std::pair<T, size_t>> items_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice

#endif  // SLUICE_CORE_QUEUE_H_
