// The small iterators a pipeline is assembled from (besides source.h, map.h and batch.h):
//   FilterIterator         keeps the elements a predicate accepts (C++ API only for now);
//   ShuffleBufferIterator  trainer-side shuffle: a seeded random pick from a bounded buffer;
//   PrefetchIterator       a background thread keeps a bounded queue of ready elements;
//   TakeIterator           the first `count` elements;
//   RepeatIterator         re-creates its input for each of `count` epochs (-1: forever).
// All follow iterator.h: one consumer thread at a time, Cancel() from any thread (it also
// cancels the input), end of stream and errors are sticky, destruction cancels and joins.
// Only PrefetchIterator starts a thread; the others run in the consumer's thread.
#ifndef SLUICE_PIPELINE_ITERATORS_H_
#define SLUICE_PIPELINE_ITERATORS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/core/element.h"
#include "sluice/core/queue.h"
#include "sluice/pipeline/stats.h"
#include "sluice/core/rng.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/iterator.h"

namespace sluice::pipeline {

// The op position reserved for the shuffle buffer's randomness.
inline constexpr uint32_t kShuffleBufferRngPosition = 0xFFFFFFFEu;

class FilterIterator : public Iterator {
 public:
  using Predicate = std::function<bool(const Element&)>;
  FilterIterator(std::unique_ptr<Iterator> input, Predicate keep)
      : input_(std::move(input)), keep_(std::move(keep)) {}

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return input_->schema(); }

 private:
  std::unique_ptr<Iterator> input_;
  Predicate keep_;
  std::atomic<bool> cancelled_{false};
};

class ShuffleBufferIterator : public Iterator {
 public:
  // Holds at most `buffer_size` elements (REQUIRES >= 1), and stops filling early once they
  // hold `max_bytes` (0: no byte limit). Draws come from Rng(SeedFor(seed, 0, 0,
  // kShuffleBufferRngPosition)). With `stats`, keeps its shuffle_buffer_* counters (the
  // memory the buffer costs) up to date.
  ShuffleBufferIterator(std::unique_ptr<Iterator> input, size_t buffer_size, uint64_t seed,
                        size_t max_bytes = 0, PipelineStats* stats = nullptr);

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return input_->schema(); }

  size_t buffered() const { return buffer_.size(); }

 private:
  std::unique_ptr<Iterator> input_;
  const size_t buffer_size_;
  const size_t max_bytes_;
  Rng rng_;
  std::vector<Element> buffer_;
  size_t bytes_ = 0;
  PipelineStats* const stats_;
  bool input_done_ = false;
  Status final_status_;  // sticky input error
  std::atomic<bool> cancelled_{false};
};

class PrefetchIterator : public Iterator {
 public:
  // Starts the producer thread at once. The queue holds at most `buffer_size` elements
  // (>= 1) and `max_bytes` bytes (0: no byte limit; one element always fits).
  static std::unique_ptr<PrefetchIterator> Create(std::unique_ptr<Iterator> input,
                                                  size_t buffer_size, size_t max_bytes);
  ~PrefetchIterator() override;

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return input_->schema(); }

  size_t buffered() const { return queue_.size(); }

 private:
  struct Item {
    Status status;
    Element element;
    bool end_of_stream = false;
  };

  PrefetchIterator(std::unique_ptr<Iterator> input, size_t buffer_size, size_t max_bytes)
      : input_(std::move(input)), queue_(std::max<size_t>(1, buffer_size), max_bytes) {}
  void Produce();

  std::unique_ptr<Iterator> input_;
  BoundedQueue<Item> queue_;
  std::atomic<bool> cancelled_{false};
  bool done_ = false;  // consumer side
  Status final_status_;
  std::thread thread_;
};

class TakeIterator : public Iterator {
 public:
  TakeIterator(std::unique_ptr<Iterator> input, int64_t count)
      : input_(std::move(input)), remaining_(count) {}

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return input_->schema(); }

 private:
  std::unique_ptr<Iterator> input_;
  int64_t remaining_;
  std::atomic<bool> cancelled_{false};
};

class RepeatIterator : public Iterator {
 public:
  // Makes the input of epoch `epoch` (0, 1, ...).
  using Factory = std::function<StatusOr<std::unique_ptr<Iterator>>(int64_t epoch)>;

  // Creates epoch 0's input at once; `count` epochs (-1: forever). An epoch that yields
  // nothing ends the stream (an empty input repeated forever would spin).
  static StatusOr<std::unique_ptr<RepeatIterator>> Create(Factory factory, int64_t count);

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return schema_; }

 private:
  RepeatIterator(Factory factory, int64_t count, std::unique_ptr<Iterator> first);

  Factory factory_;
  const int64_t count_;
  const Schema schema_;
  int64_t epoch_ = 0;
  bool epoch_empty_ = true;
  bool done_ = false;
  Status final_status_;
  std::mutex mu_;  // guards the swap of `current_` against Cancel()
  std::unique_ptr<Iterator> current_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_ITERATORS_H_
