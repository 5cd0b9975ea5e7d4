#include "sluice/pipeline/local_executor.h"

#include <algorithm>

#include <utility>

#include "sluice/core/cpu_budget.h"
#include "sluice/pipeline/batch.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/iterators.h"
#include "sluice/pipeline/map.h"
#include "sluice/pipeline/segment.h"

namespace sluice::pipeline {

StatusOr<std::unique_ptr<LocalExecutor>> LocalExecutor::Create(const PipelineSpec& spec,
                                                               const ExecutorOptions& options,
                                                               const ops::Registry& registry) {
  SLUICE_RETURN_IF_ERROR(CheckSpecRanges(spec));
  if (options.threads > SpecLimits::kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threads: must be in [1, ", SpecLimits::kMaxThreads, "], got ", options.threads));
  }
  std::unique_ptr<LocalExecutor> ex(new LocalExecutor());

  SLUICE_ASSIGN_OR_RETURN(SourceFiles files, ResolveSource(spec.source));
  ex->files_ = std::make_shared<const SourceFiles>(std::move(files));
  ex->samples_per_epoch_ = SamplesPerEpoch(*ex->files_, spec.take);
  SLUICE_RETURN_IF_ERROR(
      CheckShard(options.shard, spec.source.even, static_cast<uint64_t>(ex->samples_per_epoch_)));
  const bool with_label = HasLabel(spec.source);

  SLUICE_ASSIGN_OR_RETURN(BuiltOps built,
                          BuildOps(spec.ops, spec.source.seed, registry,
                                   SourceSchema(spec.source), 0,
                                   LocalEnv(spec.options.limits)));
  ex->stats_ = std::make_unique<PipelineStats>();
  ex->stats_->Init(built.names);

  if (options.threads > 0) {
    ex->threads_ = options.threads;
  } else if (spec.options.threads > 0) {
    ex->threads_ = spec.options.threads;
  } else {
    ex->threads_ = ProbeCpuBudget().threads();
  }

  SourceOptions source_options;
  source_options.shuffle = spec.source.shuffle;
  source_options.seed = spec.source.seed;
  source_options.take = spec.take;
  source_options.epochs = spec.epochs;
  source_options.with_label = with_label;
  source_options.produced = &ex->stats_->source_samples;
  source_options.shard = options.shard;
  source_options.even = spec.source.even;
  source_options.shuffle_groups = ShuffleGroups(
      spec.source, *ex->files_, static_cast<uint64_t>(SamplesPerEpoch(*ex->files_, spec.take)));
  std::unique_ptr<Iterator> it = std::make_unique<SourceIterator>(ex->files_, source_options);

  SegmentOptions segment;
  segment.stages = MakeStages(built, ex->stats_.get());
  segment.output_schema = built.output_schema;
  segment.threads = ex->threads_;
  segment.max_buffered_bytes = options.max_buffered_bytes;
  segment.stats = ex->stats_.get();
  SLUICE_ASSIGN_OR_RETURN(it, AssembleSegment(spec, std::move(it), std::move(segment)));
  ex->ops_ = std::move(built.ops);
  ex->root_ = std::move(it);
  return ex;
}

LocalExecutor::~LocalExecutor() {
  if (root_ != nullptr) root_->Cancel();
  root_.reset();  // joins every thread before the ops go away
}

Status LocalExecutor::GetNext(Element* out, bool* end_of_stream) {
  SLUICE_RETURN_IF_ERROR(root_->GetNext(out, end_of_stream));
  if (!*end_of_stream) {
    int64_t samples = out->members.empty() ? 1 : static_cast<int64_t>(out->members.size());
    stats_->samples_out.fetch_add(samples, std::memory_order_relaxed);
    stats_->batches_out.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void LocalExecutor::Cancel() { root_->Cancel(); }

const Schema& LocalExecutor::output_schema() const { return root_->schema(); }

}  // namespace sluice::pipeline
