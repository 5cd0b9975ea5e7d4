// LocalExecutor: builds and runs a whole PipelineSpec in this process:
//   source -> parallel map (all ops, fused per sample) -> [shuffle buffer] -> [batch |
//   padded batch] -> prefetch, repeated for `epochs`.
// Errors on one sample follow options.on_error. Thread-compatible (one consumer);
// Cancel() from any thread. Destruction cancels and joins.
#ifndef SLUICE_PIPELINE_LOCAL_EXECUTOR_H_
#define SLUICE_PIPELINE_LOCAL_EXECUTOR_H_

#include <memory>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/ops/registry.h"
#include "sluice/pipeline/iterator.h"
#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/stats.h"

namespace sluice::pipeline {

struct ExecutorOptions {
  int threads = 0;  // overrides spec.options.threads when > 0; 0 = spec, then CPU budget
  size_t max_buffered_bytes = 256 << 20;  // budget across the executor's queues
};

class LocalExecutor {
 public:
  // Resolves the source, builds every op against its input schema (so schema errors surface
  // here, naming the op), and starts the pipeline.
  static StatusOr<std::unique_ptr<LocalExecutor>> Create(
      const PipelineSpec& spec, const ExecutorOptions& options = {},
      const ops::Registry& registry = ops::Registry::Builtin());
  ~LocalExecutor();

  // The next batch (or sample, without batching).
  Status GetNext(Element* out, bool* end_of_stream);
  void Cancel();

  const Schema& output_schema() const;
  const PipelineStats& stats() const { return *stats_; }
  int threads() const { return threads_; }
  // Samples per epoch after `take` (known once the source is resolved).
  int64_t samples_per_epoch() const { return samples_per_epoch_; }

 private:
  LocalExecutor() = default;
  std::unique_ptr<PipelineStats> stats_;
  std::vector<std::unique_ptr<ops::Op>> ops_;
  std::unique_ptr<Iterator> root_;
  int threads_ = 1;
  int64_t samples_per_epoch_ = 0;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_LOCAL_EXECUTOR_H_
