// The FastFlow baseline at run time (docs/policy.md, "The FastFlow baseline"): its profiling
// phase executed as real short training runs, in the order policy::FastFlowProfilingRuns
// lists them — Gthp on one cached batch repeated, Lthp and Pcycle with the local pipeline,
// then (only if phase 1 found a bottleneck) Rthp(p) and Ocycle(p) for each candidate run
// 100% remotely — and policy::PlanFastFlow on what they measured. Each run is a fresh Loader
// over the pipeline repeated (so it never runs out of data) and does not touch the training
// run that follows; its time counts in time_to_plan_s.
//
// The CPU cycles are this process's CPU time (user + system, getrusage) over each run's steps
// after its warm-up; every run has the same number of steps, so Ocycle/Pcycle compares like
// with like.
//
// Blocking; call from one thread.
#ifndef SLUICE_RUNTIME_FASTFLOW_RUNNER_H_
#define SLUICE_RUNTIME_FASTFLOW_RUNNER_H_

#include <functional>
#include <string>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/pipeline/spec.h"
#include "sluice/policy/fastflow_planner.h"
#include "sluice/runtime/loader.h"

namespace sluice::runtime {

struct FastFlowRunnerOptions {
  std::vector<rpc::ConnectOptions> workers;
  LoaderOptions base;  // threads, splits, warn (the plan fields are set per run)
  double accelerator_ms = 0;
  policy::FastFlowOptions fastflow;
  // Progress notes ("fastflow: Lthp + Pcycle: 123.4 samples/s"); default: none.
  std::function<void(const std::string&)> log;
};

struct FastFlowRunRecord {
  policy::FastFlowProfilingRun run;
  double samples_per_s = 0;  // after the warm-up steps
  double cpu_s = 0;          // this process's CPU seconds over the same steps
  double wall_s = 0;         // the whole run, warm-up included
  std::string error;         // the run could not be made (its candidate stays unmeasured)
};

struct FastFlowOutcome {
  policy::FastFlowMetrics metrics;
  policy::FastFlowDecision decision;
  std::vector<FastFlowRunRecord> runs;
  double profiling_s = 0;  // every run, start to end
};

// REQUIRES: spec valid for a Loader.
StatusOr<FastFlowOutcome> RunFastFlowProfiling(const pipeline::PipelineSpec& spec,
                                               const FastFlowRunnerOptions& options);

// The Loader options of the plan FastFlow decided: equal shares, no spill-over.
LoaderOptions FastFlowLoaderOptions(const policy::Plan& plan, const FastFlowRunnerOptions& options);

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_FASTFLOW_RUNNER_H_
