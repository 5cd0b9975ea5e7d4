#include "sluice/pipeline/segment.h"

#include <algorithm>
#include <utility>

namespace sluice::pipeline {

BatchOptions BatchOptionsOf(const BatchSpec& batch) {
  BatchOptions o;
  o.size = batch.size;
  o.drop_remainder = batch.drop_remainder;
  o.padded = batch.padded;
  o.padding_value = batch.padding_value;
  o.padding_values = batch.padding_values;
  return o;
}

std::map<int, std::shared_ptr<BatchSlots>> BatchSlotsFor(const Schema& schema, int64_t batch_size) {
  std::map<int, std::shared_ptr<BatchSlots>> slots;
  for (int i = 0; i < schema.size(); ++i) {
    const FieldSpec& field = schema.field(i);
    if (field.dtype == DType::kBytes) continue;  // byte strings are padded when batched
    if (std::find(field.shape.begin(), field.shape.end(), kUnknownDim) != field.shape.end()) {
      continue;
    }
    slots[i] = std::make_shared<BatchSlots>(field.dtype, field.shape, batch_size);
  }
  return slots;
}

StatusOr<std::unique_ptr<Iterator>> AssembleSegment(const PipelineSpec& spec,
                                                    std::unique_ptr<Iterator> input,
                                                    SegmentOptions options) {
  std::unique_ptr<Iterator> it = std::move(input);
  const size_t budget = options.max_buffered_bytes;
  const bool batching = options.shuffle_and_batch && spec.batch.size > 0;
  if (!options.stages.empty()) {
    MapOptions mo;
    mo.threads = std::max(1, options.threads);
    mo.deterministic = options.keep_order && spec.options.deterministic;
    const int64_t slots_size =
        batching && spec.shuffle_buffer == 0 ? spec.batch.size : options.batch_slots_size;
    if (slots_size > 0 && (!mo.deterministic || mo.threads == 1)) {
      // For the context of the op that produces the output last.
      options.stages.back().context.batch_slots = BatchSlotsFor(options.output_schema, slots_size);
    }
    mo.on_error = spec.options.on_error;
    mo.max_buffered_bytes = budget / 4;
    // A batcher takes elements in bursts (it stacks a whole batch at once); enough slack in
    // flight lets the map threads keep working meanwhile instead of waiting for it, one
    // hand-off per element. The byte budget still bounds memory.
    mo.max_in_flight = static_cast<size_t>(std::max(2 * mo.threads, batching ? 16 : 0));
    // The batcher waits for a batch: wake it for a group of samples, not each (half the slack
    // in flight, so the workers keep the other half going while it takes them).
    if (batching) {
      mo.wake_after = static_cast<size_t>(
          std::min<int64_t>(spec.batch.size, static_cast<int64_t>(mo.max_in_flight / 2)));
    }
    mo.stats = options.stats;
    mo.on_skip = std::move(options.on_skip);
    it = ParallelMapIterator::Create(std::move(it), std::move(options.stages),
                                     std::move(options.output_schema), std::move(mo));
  }
  if (options.shuffle_and_batch && spec.shuffle_buffer > 0) {
    it = std::make_unique<ShuffleBufferIterator>(std::move(it),
                                                 static_cast<size_t>(spec.shuffle_buffer),
                                                 spec.source.seed, budget / 4, options.stats);
  }
  if (batching) {
    BatchOptions bo = BatchOptionsOf(spec.batch);
    bo.in_place = options.stats != nullptr ? &options.stats->batches_in_place : nullptr;
    // Without `deterministic` the maps deliver unordered, so the order of what reaches the
    // batcher is already free: a batch may take its members so that they are one buffer's
    // slots (BatchOptions::order_free). Not behind a shuffle buffer (no slots there).
    bo.order_free = !spec.options.deterministic && spec.shuffle_buffer == 0;
    bo.slot_streams = options.slot_streams;
    SLUICE_ASSIGN_OR_RETURN(it, BatchIterator::Create(std::move(it), std::move(bo)));
  }
  if (options.prefetch && spec.prefetch > 0) {
    it = PrefetchIterator::Create(std::move(it), static_cast<size_t>(spec.prefetch), budget / 2);
  }
  return it;
}

}  // namespace sluice::pipeline
