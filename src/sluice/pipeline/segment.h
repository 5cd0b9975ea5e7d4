// AssembleSegment: the one place a pipeline's iterators are put together. Every place that
// runs ops over a stream of elements on this process builds the same chain: the ops
// [first, last) on map threads, then what the spec puts after the ops (the shuffle buffer,
// batching, prefetch) where that segment ends the pipeline. LocalExecutor builds the whole
// pipeline with it; the trainer's Loader its local pipeline, its local prefix (ops only) and
// its suffix after the workers' merge. (A worker runs its ops per sample, pipeline::
// ApplyStages over MakeStages, and batches per split: no iterators.)
#ifndef SLUICE_PIPELINE_SEGMENT_H_
#define SLUICE_PIPELINE_SEGMENT_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "sluice/core/batch_slots.h"
#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/batch.h"
#include "sluice/pipeline/iterators.h"
#include "sluice/pipeline/map.h"
#include "sluice/pipeline/spec.h"

namespace sluice::pipeline {

struct SegmentOptions {
  std::vector<MapStage> stages;  // the ops to run (MakeStages); none: no map
  Schema output_schema;          // what the last stage produces
  int threads = 1;               // map threads
  // The segment's memory budget (0: none): the map's finished elements and the shuffle
  // buffer hold a quarter of it each, prefetched batches half.
  size_t max_buffered_bytes = 0;
  PipelineStats* stats = nullptr;
  // Under on_error: skip, called for each sample an op drops (MapOptions::on_skip).
  std::function<void(const Element& element, const Status& error)> on_skip;
  // What follows the ops: the spec's shuffle buffer and batching (false where batches arrive
  // made, or where the segment feeds another), and its prefetch.
  bool shuffle_and_batch = true;
  bool prefetch = true;
  // false: the map delivers elements as they finish whatever the spec's `deterministic` (a
  // segment that feeds the merge, which restores the order itself).
  bool keep_order = true;
  // The segment's samples go straight to a batcher outside it that stacks them in the order
  // they come (the trainer's after-batch cut, runtime/split_source.h's SplitBatcher): its
  // last op writes into batch slots as a segment that batches does, under the same order
  // condition. Batches of `batch_slots_size` samples; 0: none.
  int64_t batch_slots_size = 0;
  // What feeds the segment's batcher: how many producers fill slot buffers of their own at
  // once (BatchOptions::slot_streams).
  int slot_streams = 1;
};

// The spec's batching as BatchIterator options.
BatchOptions BatchOptionsOf(const BatchSpec& batch);

// `input` -> map over options.stages -> [shuffle buffer] -> [batch] -> [prefetch], each only
// where the spec (and `options`) asks for it. Takes the spec's deterministic and on_error.
// Where the batcher follows the map directly (batching, no shuffle buffer, and the map
// delivers samples in the order they reach their last op: unordered, or one thread), the
// last op writes the output fields whose shape the schema knows in full into their batch's
// slots (core/batch_slots.h), counted in options.stats->batches_in_place; so does a segment
// whose samples a batcher outside it takes as they come (options.batch_slots_size).
// One BatchSlots (core/batch_slots.h) of `batch_size` per field of `schema` whose every
// dimension is known (byte strings, which are padded when batched, have none), by field index.
std::map<int, std::shared_ptr<BatchSlots>> BatchSlotsFor(const Schema& schema, int64_t batch_size);

StatusOr<std::unique_ptr<Iterator>> AssembleSegment(const PipelineSpec& spec,
                                                    std::unique_ptr<Iterator> input,
                                                    SegmentOptions options);

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_SEGMENT_H_
