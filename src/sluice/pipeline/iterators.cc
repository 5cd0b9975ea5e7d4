#include "sluice/pipeline/iterators.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace sluice::pipeline {
namespace {

Status CancelledStatus() { return absl::CancelledError("pipeline cancelled"); }

}  // namespace

// ---------------------------------------------------------------------------- Filter

Status FilterIterator::GetNext(Element* out, bool* end_of_stream) {
  for (;;) {
    if (cancelled_.load(std::memory_order_relaxed)) return CancelledStatus();
    Element e;
    SLUICE_RETURN_IF_ERROR(input_->GetNext(&e, end_of_stream));
    if (*end_of_stream) return absl::OkStatus();
    if (keep_(e)) {
      *out = std::move(e);
      return absl::OkStatus();
    }
  }
}

void FilterIterator::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  input_->Cancel();
}

// ---------------------------------------------------------------------------- Shuffle buffer

ShuffleBufferIterator::ShuffleBufferIterator(std::unique_ptr<Iterator> input, size_t buffer_size,
                                             uint64_t seed, size_t max_bytes,
                                             PipelineStats* stats)
    : input_(std::move(input)),
      buffer_size_(std::max<size_t>(1, buffer_size)),
      max_bytes_(max_bytes),
      rng_(SeedFor(seed, 0, 0, kShuffleBufferRngPosition)),
      stats_(stats) {}

Status ShuffleBufferIterator::GetNext(Element* out, bool* end_of_stream) {
  if (cancelled_.load(std::memory_order_relaxed)) return CancelledStatus();
  if (!final_status_.ok()) return final_status_;
  while (!input_done_ && buffer_.size() < buffer_size_ &&
         (max_bytes_ == 0 || buffer_.empty() || bytes_ < max_bytes_)) {
    Element e;
    bool eos = false;
    Status status = input_->GetNext(&e, &eos);
    if (!status.ok()) {
      if (!absl::IsCancelled(status)) {
        final_status_ = status;
        buffer_.clear();
        bytes_ = 0;
      }
      return status;
    }
    if (eos) {
      input_done_ = true;
      break;
    }
    bytes_ += e.nbytes();
    buffer_.push_back(std::move(e));
  }
  if (stats_ != nullptr) stats_->RecordShuffleBuffer(buffer_.size(), bytes_);
  if (buffer_.empty()) {
    *end_of_stream = true;
    return absl::OkStatus();
  }
  size_t pick = static_cast<size_t>(rng_.UniformInt(0, static_cast<int64_t>(buffer_.size()) - 1));
  std::swap(buffer_[pick], buffer_.back());
  *out = std::move(buffer_.back());
  buffer_.pop_back();
  bytes_ -= out->nbytes();
  *end_of_stream = false;
  return absl::OkStatus();
}

void ShuffleBufferIterator::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  input_->Cancel();
}

// ---------------------------------------------------------------------------- Prefetch

std::unique_ptr<PrefetchIterator> PrefetchIterator::Create(std::unique_ptr<Iterator> input,
                                                           size_t buffer_size, size_t max_bytes) {
  std::unique_ptr<PrefetchIterator> it(
      new PrefetchIterator(std::move(input), buffer_size, max_bytes));
  it->thread_ = std::thread([p = it.get()] { p->Produce(); });
  pthread_setname_np(it->thread_.native_handle(), "sluice-prefetch");
  return it;
}

PrefetchIterator::~PrefetchIterator() {
  Cancel();
  if (thread_.joinable()) thread_.join();
}

void PrefetchIterator::Produce() {
  for (;;) {
    if (cancelled_.load(std::memory_order_relaxed)) return;
    Item item;
    Status status = input_->GetNext(&item.element, &item.end_of_stream);
    if (!status.ok()) {
      item.status = std::move(status);
      item.end_of_stream = false;
      item.element = Element();
      queue_.Push(std::move(item), 0);
      return;
    }
    if (item.end_of_stream) {
      queue_.Push(std::move(item), 0);
      return;
    }
    size_t bytes = item.element.nbytes();
    if (!queue_.Push(std::move(item), bytes)) return;
  }
}

Status PrefetchIterator::GetNext(Element* out, bool* end_of_stream) {
  if (cancelled_.load(std::memory_order_relaxed)) return CancelledStatus();
  if (done_) {
    *end_of_stream = final_status_.ok();
    return final_status_;
  }
  std::optional<Item> item = queue_.Pop();
  if (!item.has_value() || cancelled_.load(std::memory_order_relaxed)) return CancelledStatus();
  if (!item->status.ok() || item->end_of_stream) {
    // The producer has stopped: whatever ended it (even an input cancelled on its own)
    // is the answer from now on.
    done_ = true;
    final_status_ = item->status;
    *end_of_stream = final_status_.ok();
    return final_status_;
  }
  *out = std::move(item->element);
  *end_of_stream = false;
  return absl::OkStatus();
}

void PrefetchIterator::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  queue_.Cancel();
  input_->Cancel();
}

// ---------------------------------------------------------------------------- Take

Status TakeIterator::GetNext(Element* out, bool* end_of_stream) {
  if (cancelled_.load(std::memory_order_relaxed)) return CancelledStatus();
  if (remaining_ <= 0) {
    *end_of_stream = true;
    return absl::OkStatus();
  }
  SLUICE_RETURN_IF_ERROR(input_->GetNext(out, end_of_stream));
  if (*end_of_stream) {
    remaining_ = 0;
  } else {
    --remaining_;
  }
  return absl::OkStatus();
}

void TakeIterator::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  input_->Cancel();
}

// ---------------------------------------------------------------------------- Repeat

StatusOr<std::unique_ptr<RepeatIterator>> RepeatIterator::Create(Factory factory, int64_t count) {
  if (count == 0 || count < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("epochs: must be at least 1, or -1 for forever; got ", count));
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Iterator> first, factory(0));
  return std::unique_ptr<RepeatIterator>(
      new RepeatIterator(std::move(factory), count, std::move(first)));
}

RepeatIterator::RepeatIterator(Factory factory, int64_t count, std::unique_ptr<Iterator> first)
    : factory_(std::move(factory)),
      count_(count),
      schema_(first->schema()),
      current_(std::move(first)) {}

Status RepeatIterator::GetNext(Element* out, bool* end_of_stream) {
  for (;;) {
    Iterator* current;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) return CancelledStatus();
      current = current_.get();
    }
    if (done_) {
      *end_of_stream = final_status_.ok();
      return final_status_;
    }
    Status status = current->GetNext(out, end_of_stream);
    if (!status.ok()) {
      if (!absl::IsCancelled(status)) {
        done_ = true;
        final_status_ = status;
      }
      return status;
    }
    if (!*end_of_stream) {
      epoch_empty_ = false;
      return absl::OkStatus();
    }
    // This epoch is over: start the next one, unless that was the last or it was empty.
    if (epoch_empty_ || (count_ >= 0 && epoch_ + 1 >= count_)) {
      done_ = true;
      final_status_ = absl::OkStatus();
      continue;
    }
    StatusOr<std::unique_ptr<Iterator>> next = factory_(epoch_ + 1);
    if (!next.ok()) {
      done_ = true;
      final_status_ = next.status();
      continue;
    }
    ++epoch_;
    epoch_empty_ = true;
    std::unique_ptr<Iterator> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = std::move(current_);
      current_ = *std::move(next);
      if (cancelled_) current_->Cancel();
    }
  }
}

void RepeatIterator::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  current_->Cancel();
}

}  // namespace sluice::pipeline
