// Batching: BatchIterator groups `size` consecutive elements of its input into one batch
// element whose tensors gain a leading dimension (docs/ARCHITECTURE.md, "How a pipeline runs").
//
// Plain batching needs every member's field to have the same shape; a mismatch is an
// error naming the field, both shapes and both files, and suggesting padded_batch or a
// resize. Byte strings (rank-1 `bytes` fields such as `path`) are the exception: they are
// padded with NUL bytes to the longest in the batch, the way NumPy stores fixed-width byte
// strings (dtype S<n>, which drops the trailing NULs on reading), so file paths survive
// batching. Padded batching pads each field that has a per-sample (unknown) dimension in
// the schema to the batch maximum with `padding_value` (or `padding_values[field]`) and
// adds a field `<field>_shape`: i64[batch, rank] holding every member's original shape.
// A batch element's `members` are the members' SampleIds in order; its `id` is the first
// member's. A field whose members lie side by side in one buffer, in order (samples written
// into their batch's slots, core/batch_slots.h), becomes a view of those bytes, not a copy.
//
// Runs in the consumer's thread; thread-compatible, Cancel() from any thread (iterator.h).
#ifndef SLUICE_PIPELINE_BATCH_H_
#define SLUICE_PIPELINE_BATCH_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/iterator.h"

namespace sluice::pipeline {

struct BatchOptions {
  int64_t size = 1;  // >= 1
  bool drop_remainder = false;
  bool padded = false;
  double padding_value = 0;
  std::map<std::string, double> padding_values;  // per field, overrides padding_value
  // Counts the batches with a field whose members were already side by side in one buffer
  // (written into their slots, core/batch_slots.h), so stacking it was no copy. May be null.
  std::atomic<int64_t>* in_place = nullptr;
  // The members' order is free (an unordered map before the batcher). Then the batcher
  // groups what it reads by the slot buffer it was written into (core/batch_slots.h) and
  // makes each batch of one buffer's slots, in slot order: a view instead of a copy, however
  // the streams that fill buffers interleave and whichever sample finished out of turn.
  // Elements not in a slot buffer are batched together as they come. The samples of a
  // buffer that never fills (a sample dropped after taking its slot, a producer that stopped)
  // are batched by copying, with the oldest others, once a sample two epochs after theirs is
  // read (so every epoch but the last two reached is delivered whole), at the end of the
  // input, or once more than `size` x (2 slot_streams + 1) elements wait (two buffers a
  // producer at an edge, and one): what waits, and the buffers it holds, stay bounded.
  bool order_free = false;
  // With order_free: how many producers take slot buffers of their own and fill them at once
  // (the trainer's local prefix and the received samples: 2; one map: 1).
  int slot_streams = 1;
};

// The schema of the batches made from elements of `input`: a leading batch dimension
// (known only with drop_remainder), and with padding the `<field>_shape` fields.
// InvalidArgument for a size < 1, a padding value for a field that does not exist, or a
// `<field>_shape` name that is already taken.
StatusOr<Schema> BatchSchema(const Schema& input, const BatchOptions& options);

// Stacks `members` (all of `input` schema) into one batch element. `members` is consumed.
// REQUIRES: !members.empty().
StatusOr<Element> StackBatch(std::vector<Element> members, const Schema& input,
                             const BatchOptions& options);

// Fills `count` values of `dtype` at `dst` with `value` converted to that dtype; integers as
// the `cast` op converts them (truncated toward zero, saturated to the type's range, NaN 0).
void FillValue(DType dtype, double value, void* dst, size_t count);

class BatchIterator : public Iterator {
 public:
  static StatusOr<std::unique_ptr<BatchIterator>> Create(std::unique_ptr<Iterator> input,
                                                         BatchOptions options);

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return schema_; }

 private:
  BatchIterator(std::unique_ptr<Iterator> input, BatchOptions options, Schema schema)
      : input_(std::move(input)), options_(std::move(options)), schema_(std::move(schema)) {}

  // The next element of the input into `out` (false at its end, which sets done_). An error
  // other than cancellation is kept as the final status.
  StatusOr<bool> Read(Element* out);
  // BatchOptions::order_free: the next batch's members, by the rules there; empty at the end.
  StatusOr<std::vector<Element>> NextGathered();
  // Moves the waiting elements of group `group` (nullptr: the loose ones) to `out`, oldest
  // first, at most `max`.
  void TakeGroup(const Buffer* group, size_t max, std::vector<Element>* out);

  std::unique_ptr<Iterator> input_;
  const BatchOptions options_;
  const Schema schema_;
  std::atomic<bool> cancelled_{false};
  bool done_ = false;
  Status final_status_;
  // order_free: what was read and waits for its batch, oldest first, with the slot buffer it
  // is in (nullptr: none); how many wait a buffer; the newest epoch read.
  struct Waiting {
    Element element;
    const Buffer* group;
  };
  std::deque<Waiting> waiting_;
  std::map<const Buffer*, int64_t> groups_;
  uint64_t newest_epoch_ = 0;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_BATCH_H_
