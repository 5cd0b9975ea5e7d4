// What `sluice train` runs: an offloading policy parsed from its command-line spelling, and
// a training loop whose accelerator is emulated (each step sleeps; it stands in for a GPU
// and costs the host no CPU), so prep stalls are real and measurable on a CPU-only machine.
//
// ParsePolicy is a pure function. RunTraining drives one Loader from the calling thread
// (the Loader's own rules apply: one consumer).
#ifndef SLUICE_RUNTIME_TRAIN_H_
#define SLUICE_RUNTIME_TRAIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "sluice/core/status.h"
#include "sluice/rpc/remote_stream.h"
#include "sluice/runtime/loader.h"

namespace sluice::runtime {

struct TrainPolicy {
  std::string name = "none";  // "none": all local; "fixed": the cut and ratio given
  int cut = 0;                // kCutAfterBatch for cut=batch
  double ratio = 0;
  rpc::ReadMode read_mode = rpc::ReadMode::kRemoteRead;
  rpc::Compression compression = rpc::Compression::kNone;

  // "none", or "fixed:cut=3,ratio=0.5,read=remote,compress=none".
  std::string ToString() const;
};

// Parses `none` or `fixed:cut=K,ratio=R[,read=local|remote][,compress=lz4|zstd|none]`
// (K an op count or `batch`, R in [0, 1]). `num_ops` (when >= 0) bounds K. Errors are
// InvalidArgument and say what is wrong and what is expected.
StatusOr<TrainPolicy> ParsePolicy(std::string_view text, int num_ops = -1);

struct TrainProgress {
  int64_t steps = 0;
  int64_t samples = 0;
  double elapsed_s = 0;
  double stall_s = 0;  // time spent waiting for data so far
};

struct TrainOptions {
  int64_t steps = 0;          // 0: until the data ends
  double accelerator_ms = 0;  // emulated step time
  // Steps left out of the steady-state figures (start-up: connecting, filling the queues).
  // -1: a tenth of `steps`, at most 10 (none for fewer than 10 steps or steps = 0).
  int64_t warmup_steps = -1;
  // Called with each batch before its step (from the calling thread; time counts as compute).
  std::function<void(const Element&)> on_batch;
  // Called after each step (from the calling thread).
  std::function<void(const TrainProgress&)> on_step;
};

struct TrainResult {
  int64_t steps = 0;
  int64_t samples = 0;
  double wall_s = 0;
  double stall_s = 0;       // waiting in GetNext (a prep stall)
  double compute_s = 0;     // emulated accelerator time
  bool data_ended = false;  // the pipeline ran out before `steps`
  // The same after the warm-up steps (equal to the whole run without warm-up).
  int64_t warmup_steps = 0;
  int64_t steady_samples = 0;
  double steady_wall_s = 0;
  double steady_stall_s = 0;

  double samples_per_s() const { return wall_s > 0 ? samples / wall_s : 0; }
  double stall_fraction() const { return wall_s > 0 ? stall_s / wall_s : 0; }
  double steady_samples_per_s() const {
    return steady_wall_s > 0 ? steady_samples / steady_wall_s : 0;
  }
  double steady_stall_fraction() const {
    return steady_wall_s > 0 ? steady_stall_s / steady_wall_s : 0;
  }
};

// Runs the loop: take a batch (timed as stall), then "compute" for accelerator_ms.
StatusOr<TrainResult> RunTraining(Loader& loader, const TrainOptions& options);

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_TRAIN_H_
