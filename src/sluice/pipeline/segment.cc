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
    mo.on_error = spec.options.on_error;
    mo.max_buffered_bytes = budget / 4;
    // A batcher takes elements in bursts (it stacks a whole batch at once); enough slack in
    // flight lets the map threads keep working meanwhile instead of waiting for it, one
    // hand-off per element. The byte budget still bounds memory.
    mo.max_in_flight = static_cast<size_t>(std::max(2 * mo.threads, batching ? 16 : 0));
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
    SLUICE_ASSIGN_OR_RETURN(it, BatchIterator::Create(std::move(it), BatchOptionsOf(spec.batch)));
  }
  if (options.prefetch && spec.prefetch > 0) {
    it = PrefetchIterator::Create(std::move(it), static_cast<size_t>(spec.prefetch), budget / 2);
  }
  return it;
}

}  // namespace sluice::pipeline
