// BatchSlots: the samples' output tensors of one field, handed out as consecutive slots of
// batch-sized buffers, so that a batch's samples are already side by side when the batcher
// takes them and stacking them is no copy (pipeline::StackBatch sees the members tile one
// buffer and returns a view of it; docs/ARCHITECTURE.md, "Samples written into their batch").
//
// The last op of a per-sample chain asks for its output through OpContext::NewOutput; the
// segment that batches right after the map (no shuffle buffer between, pipeline/segment.h)
// gives that op's context one BatchSlots per field with a fully known shape. Slots are taken
// in call order: a sample's place in the buffer is the order in which the samples reached
// their last op. When that order is not the batcher's (two threads finishing out of turn at
// a batch's edge, a sample dropped after taking a slot), the batch is stacked by copying, as
// without slots: the slots never decide what a batch holds, only where its bytes already are.
//
// A slot is a Tensor view: its buffer lives while any slot of it (or the batch made of them)
// does, so a stage that held samples for long would hold whole batches; only the batcher
// right after the map may take them. Thread-safe.
#ifndef SLUICE_CORE_BATCH_SLOTS_H_
#define SLUICE_CORE_BATCH_SLOTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "sluice/core/tensor.h"

namespace sluice {

class BatchSlots {
 public:
  // Slots for samples of `dtype` and `shape` (every dimension known), `batch_size` a buffer.
  // REQUIRES: batch_size >= 1, every dim of `shape` >= 0.
  BatchSlots(DType dtype, Shape shape, int64_t batch_size);
  // Where a batch's buffer comes from instead of Buffer::Allocate: one of buffer_bytes()
  // (the slots a worker writes for its trainer's batches, rpc/slot_arena.h), or nullptr when
  // there is none now, and then the sample gets a tensor of its own.
  // Slots with a source start inactive (Take gives every sample a tensor of its own, and
  // OpContext::HasBatchSlots says there are none) until Activate: the source has buffers
  // to give from then on.
  using Source = std::function<std::shared_ptr<Buffer>()>;
  BatchSlots(DType dtype, Shape shape, int64_t batch_size, Source source);
  void Activate() { active_.store(true, std::memory_order_release); }
  bool active() const { return active_.load(std::memory_order_acquire); }

  // A tensor of `dtype` and `shape`, uninitialised: the next slot when they are this
  // field's, else a fresh tensor (Tensor::Empty).
  Tensor Take(DType dtype, const Shape& shape);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t batch_size() const { return batch_size_; }
  // The bytes of one batch's buffer.
  size_t buffer_bytes() const { return slot_bytes_ * static_cast<size_t>(batch_size_); }

 private:
  const DType dtype_;
  const Shape shape_;
  const int64_t batch_size_;
  const size_t slot_bytes_;
  const Source source_;  // empty: Buffer::Allocate
  std::atomic<bool> active_;
  std::mutex mu_;
  std::shared_ptr<Buffer> buffer_ ABSL_GUARDED_BY(mu_);  // the buffer being filled
  int64_t next_ ABSL_GUARDED_BY(mu_) = 0;                // its next free slot
};

// The field of `slots` whose batch buffers are the largest (the one worth sharing); -1 when
// there is none.
int LargestSlotsField(const std::map<int, std::shared_ptr<BatchSlots>>& slots);

}  // namespace sluice

#endif  // SLUICE_CORE_BATCH_SLOTS_H_
