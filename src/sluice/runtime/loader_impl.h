// Loader::Impl: what a Loader holds, shared by loader.cc (building and serving the pipeline)
// and remote_link.h (one worker's stream), with the limits and error tests both use.
// Internal to the runtime.
#ifndef SLUICE_RUNTIME_LOADER_IMPL_H_
#define SLUICE_RUNTIME_LOADER_IMPL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/core/clock.h"
#include "sluice/core/error_kind.h"
#include "sluice/core/cpu_budget.h"
#include "sluice/pipeline/batch.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/iterators.h"
#include "sluice/pipeline/map.h"
#include "sluice/pipeline/source.h"
#include "sluice/runtime/coordinator.h"
#include "sluice/runtime/merge.h"
#include "sluice/runtime/loader.h"
#include "sluice/runtime/progress_tracker.h"
#include "sluice/runtime/split_source.h"

namespace sluice::runtime {

inline constexpr uint64_t kDefaultSplitSize = 32;
inline constexpr size_t kMaxWarnings = 100;
inline constexpr double kReconnectTimeoutS = 1.0;
// How often a reader waiting for its worker checks the worker's silence against its
// deadline: a hang is found within a quarter of a second of its deadline (the deadline is at
// least 10 s), for four wake-ups a second of a thread that is waiting anyway.
inline constexpr int64_t kLivenessCheckMs = 250;

// A sample failure that on_error: fail makes fatal, as opposed to a broken stream.
// A message over the size limit fails again on every retry and on every worker: it ends the
// run with its message instead of re-queueing the same samples forever.
inline bool IsMessageLimitError(const Status& status) {
  return KindOf(status) == ErrorKind::kMessageLimit;
}

inline bool IsDataError(const Status& status, pipeline::OnError on_error) {
  if (IsMessageLimitError(status)) return true;
  if (on_error != pipeline::OnError::kFail) return false;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnauthenticated:
      return false;
    default:
      return KindOf(status) == ErrorKind::kData;
  }
}

class RemoteLink;

struct Loader::Impl {
  ~Impl();
  void Warn(const std::string& message);
  void CancelAll();
  // A sample that will never reach the consumer (on_error: skip, drop_remainder).
  void SkipSample(SampleId id) {
    progress.Mark(id);
    if (merge != nullptr) merge->Skip(id);
  }

  pipeline::PipelineSpec spec;
  LoaderOptions options;
  int threads = 1;
  bool after_batch = false;
  int prefix_end = 0;  // ops [0, prefix_end) run where the sample is assigned

  ProgressTracker progress;

  // Local only: the whole pipeline in this process, as pipeline::LocalExecutor runs it.
  bool local = false;
  std::vector<std::unique_ptr<ops::Op>> local_ops;  // outlives `root`, whose map uses them

  // Offloaded.
  std::shared_ptr<const pipeline::SourceFiles> files;
  bool with_label = false;
  int64_t per_epoch = 0;
  pipeline::BuiltOps built;
  std::unique_ptr<pipeline::PipelineStats> stats;
  std::vector<std::unique_ptr<ops::Op>> wrappers;  // ReportingOps over built.ops
  std::vector<pipeline::MapStage> read_stage;      // ops[0], for local_read feeding
  rpc::SessionConfig session;
  std::unique_ptr<Coordinator> coordinator;
  std::shared_ptr<Merge> merge;
  std::unique_ptr<SplitBatcher> batcher;
  std::unique_ptr<pipeline::Iterator> prefix;
  std::thread pump;
  std::vector<std::unique_ptr<RemoteLink>> links;
  std::unique_ptr<pipeline::Iterator> root;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> samples_out{0};
  std::atomic<int64_t> batches_out{0};

  mutable std::mutex warn_mu;
  std::vector<std::string> warnings ABSL_GUARDED_BY(warn_mu);

  mutable std::mutex plan_mu;
  double ratio_now ABSL_GUARDED_BY(plan_mu) = 0;  // options.ratio, then SetShares'
  // options.local_spill_over, then SetLocalSpillOver's.
  bool local_spill_over_now ABSL_GUARDED_BY(plan_mu) = true;
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_LOADER_IMPL_H_
