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
#include <vector>

#include "sluice/core/status.h"
#include "sluice/rpc/remote_stream.h"
#include "sluice/runtime/loader.h"

namespace sluice::runtime {

// A policy; for "fixed", the Placement given (its fields are the defaults otherwise).
struct TrainPolicy : Placement {
  // "none": all local; "fixed": the cut and ratio given; "sluice" (also spelled "auto"): the
  // sluice planner with its closed loop (AutoLoader); "fastflow": FastFlow's profiling runs
  // and Algorithm 1 (FastFlowRunner), `fastflow_code` with the released code's formula.
  std::string name = "none";
  bool is_auto = false;        // spelled "auto" (the default of `sluice train`)
  bool fastflow_code = false;  // "fastflow:code"

  // "none", "auto", "sluice", "fastflow", "fastflow:code", or the placement's canonical
  // string (PlacementString: "fixed:cut=3,ratio=0.5,read=remote,compress=none[,...]").
  std::string ToString() const;
};

// Parses `none`, `auto`, `sluice`, `fastflow[:paper|:code]` or a placement (ParsePlacement:
// `fixed:cut=K,ratio=R[,read=local|remote][,compress=lz4|zstd|none][,spill=all|workers]
// [,shares=a/b/...]`). `num_ops` (when >= 0) bounds K. Errors are InvalidArgument and say
// what is wrong and what is expected.
StatusOr<TrainPolicy> ParsePolicy(std::string_view text, int num_ops = -1);

// What a training loop pulls batches from: a Loader, or an adaptive loader that replaces
// its Loader as the plan changes (AutoLoader).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Status GetNext(Element* out, bool* end_of_stream) = 0;
};

// The consumer's own clock (NowNanos), for a source that another thread drives on the
// consumer's behalf (the Python loader's fetch thread): when the consumer asked for this
// batch, and when it took the previous one (-1: none yet). The step is the time between
// the two; the wait, from asking to taking.
struct ConsumerTimes {
  int64_t asked_ns = 0;
  int64_t took_previous_ns = -1;
};

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
  // Train on the first batch over and over (FastFlow's take(1).cache().repeat(), which
  // measures the model's own rate): only one batch is taken from the loader.
  bool repeat_first_batch = false;
  // For a loader that plans while it runs: steps taken while this returns false are
  // planning steps. They do not count towards `steps`, and the warm-up starts after them,
  // so the steady figures measure the plan that was chosen (its cost is time to plan).
  // Treated as true after max_planning_steps.
  std::function<bool()> settled;
  int64_t max_planning_steps = 2000;
  // Checked before each step: true ends the run there (TrainResult::stopped), e.g. on
  // SIGINT/SIGTERM. A step already waiting for its batch finishes first.
  std::function<bool()> stop;
};

struct TrainResult {
  int64_t steps = 0;
  int64_t samples = 0;
  double wall_s = 0;
  double stall_s = 0;       // waiting in GetNext (a prep stall)
  double compute_s = 0;     // emulated accelerator time
  bool data_ended = false;  // the pipeline ran out before `steps`
  bool stopped = false;     // TrainOptions::stop ended the run
  // The same after the warm-up steps (equal to the whole run without warm-up).
  int64_t warmup_steps = 0;
  int64_t planning_steps = 0;  // steps before `settled` held (not counted in `steps` asked)
  int64_t steady_samples = 0;
  double steady_wall_s = 0;
  double steady_stall_s = 0;
  // When the loop started (seconds since the Unix epoch: a bench aligns its events with it),
  // and after each step the time since then and the samples so far: the rate over any window
  // (the recovery after a worker slowed, say).
  double start_unix_s = 0;
  std::vector<double> step_end_s;
  std::vector<int64_t> step_samples;

  double samples_per_s() const { return wall_s > 0 ? samples / wall_s : 0; }
  double stall_fraction() const { return wall_s > 0 ? stall_s / wall_s : 0; }
  double steady_samples_per_s() const {
    return steady_wall_s > 0 ? steady_samples / steady_wall_s : 0;
  }
  double steady_stall_fraction() const {
    return steady_wall_s > 0 ? steady_stall_s / steady_wall_s : 0;
  }
};

// Samples per second between two step ends (TrainResult::step_end_s, seconds since the
// loop started): from the last step end at or before from_s (the loop's start if none) to
// the last at or before to_s. 0 when that leaves no time. step_samples: samples so far at
// each step end, as TrainResult keeps them.
double WindowSamplesPerS(const std::vector<double>& step_end_s,
                         const std::vector<int64_t>& step_samples, double from_s, double to_s);

// Runs the loop: take a batch (timed as stall), then "compute" for accelerator_ms.
StatusOr<TrainResult> RunTraining(BatchSource& source, const TrainOptions& options);
StatusOr<TrainResult> RunTraining(Loader& loader, const TrainOptions& options);

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_TRAIN_H_
