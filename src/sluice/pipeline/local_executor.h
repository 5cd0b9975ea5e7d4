// LocalExecutor: builds and runs a whole PipelineSpec in this process:
//   source -> parallel map (all ops, fused per sample) -> [shuffle buffer] -> [batch |
//   padded batch] -> prefetch; the source walks `epochs` epochs itself (each its own
//   permutation), so the stages after it see one continuous stream.
// Errors on one sample follow options.on_error. Memory is bounded by the stage capacities:
// the map keeps at most 2 x threads samples in flight, the shuffle buffer `shuffle_buffer`
// samples, the prefetch queue `prefetch` batches, each also capped in bytes by a share of
// ExecutorOptions::max_buffered_bytes (a quarter to the map, a quarter to the shuffle
// buffer, half to the prefetch queue).
// Thread-compatible (one consumer); Cancel() from any thread. Destruction cancels and joins.
#ifndef SLUICE_PIPELINE_LOCAL_EXECUTOR_H_
#define SLUICE_PIPELINE_LOCAL_EXECUTOR_H_

#include <memory>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/ops/registry.h"
#include "sluice/pipeline/iterator.h"
#include "sluice/pipeline/shard.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/stats.h"

namespace sluice::pipeline {

struct ExecutorOptions {
  int threads = 0;  // overrides spec.options.threads when > 0; 0 = spec, then CPU budget
  size_t max_buffered_bytes = 256 << 20;  // budget across the executor's queues
  // Run only this rank's share of every epoch (shard.h); the spec's source.even decides the
  // remainder.
  Shard shard;
};

class LocalExecutor {
 public:
  // Resolves the source, builds every op against its input schema (so schema errors surface
  // here, naming the op), and starts the pipeline.
  static StatusOr<std::unique_ptr<LocalExecutor>> Create(
      const PipelineSpec& spec, const ExecutorOptions& options = {},
      const ops::Registry& registry = ops::Registry::Builtin());
  ~LocalExecutor();

  // The next batch (or sample, without batching). Counts stats().samples_out (the
  // samples in it) and stats().batches_out (one per call that returns an element).
  Status GetNext(Element* out, bool* end_of_stream);
  void Cancel();

  const Schema& output_schema() const;
  const PipelineStats& stats() const { return *stats_; }
  int threads() const { return threads_; }
  // Samples per epoch after `take` (known once the source is resolved).
  int64_t samples_per_epoch() const { return samples_per_epoch_; }
  // The resolved file list (paths, labels, class names).
  const SourceFiles& source_files() const { return *files_; }

 private:
  LocalExecutor() = default;
  std::unique_ptr<PipelineStats> stats_;
  std::shared_ptr<const SourceFiles> files_;
  std::vector<std::unique_ptr<ops::Op>> ops_;  // outlives root_, whose map points at them
  std::unique_ptr<Iterator> root_;
  int threads_ = 1;
  int64_t samples_per_epoch_ = 0;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_LOCAL_EXECUTOR_H_
