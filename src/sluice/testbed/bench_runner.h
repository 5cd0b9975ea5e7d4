// RunBench: the engine of `sluice bench` (cli/bench_command.cc keeps its flags and printing).
// It builds a scenario's emulated cluster (testbed.h), verifies its links and CPU quotas,
// generates the data once, starts a `sluice worker` in every worker host and runs each policy
// as a `sluice train` in the trainer host (this binary, /proc/self/exe), then tears
// everything down, also on failure or a signal, and returns one JSON report. Needs root.
#ifndef SLUICE_TESTBED_BENCH_RUNNER_H_
#define SLUICE_TESTBED_BENCH_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/core/status.h"
#include "sluice/testbed/scenario.h"

namespace sluice::testbed {

// What `sluice bench` was asked for (its flags).
struct BenchOptions {
  std::string scenario_path;
  std::vector<std::string> policies;  // SplitBenchPolicies of --policies
  std::string json_out;               // --json (the command writes it)
  std::string plot_out;               // --plot (the command draws it)
  std::string work_dir;               // logs, per-run JSON, the metric store
  std::string data_dir;               // generated data sets (default: work_dir)
  bool verify = true;
  double hold_s = 0;  // > 0: set up, verify, stand this long, tear down (no policies)
  double run_timeout_s = 600;
};

// Runs `options.policies` on `scenario` (or only stands the testbed up for options.hold_s).
// A signal taken by StartBenchSignalThread ends it early with Cancelled, torn down.
StatusOr<nlohmann::json> RunBench(const BenchOptions& options, Scenario scenario);

// Blocks SIGINT, SIGTERM and SIGHUP in every thread started after it and takes them on one
// thread, which records them (BenchSignal) for RunBench to stop and tear down.
void StartBenchSignalThread();
// The signal taken, or 0.
int BenchSignal();

// The policies the bench knows by name (beside `fixed:...`).
std::vector<std::string> BenchPolicyNames();

// `sluice bench --policies`: "none,fixed:cut=2,ratio=0.5,oracle" -> {"none",
// "fixed:cut=2,ratio=0.5", "oracle"}; a word with '=' continues the fixed:... before it
// unless it starts a fixed:... of its own.
std::vector<std::string> SplitBenchPolicies(const std::string& list);

// The oracle's sweep stops a run that lasts twice as long as the fastest run so far (the
// highest samples_per_s among `sweep`'s entries with a wall_s): it measures under half that
// rate, so it can be neither the oracle's pick nor one of the pairs pass 2 explores.
// `limit_s` 0 (no run measured yet) means no limit; `fastest` names that run.
struct SweepRunLimit {
  double limit_s = 0;
  std::string fastest;
};
SweepRunLimit OracleRunLimit(const nlohmann::json& sweep);

// A scenario event seen from the training loop (times in seconds since the loop started,
// runtime::TrainResult::step_end_s): the rate in the `before_s` before it, the rate from
// `settle_s` after it to the end of the run (what "recovered" is judged on), and the rate in
// each second from `before_s` before it to the end (a recovery curve).
struct EventWindows {
  double t_s = 0;
  double before_samples_per_s = 0;
  double settled_samples_per_s = 0;  // 0 when the run ended before t_s + settle_s
  std::vector<double> per_s;         // per_s[i]: second [t_s - before_s + i, ... + 1)
};
EventWindows MeasureEventWindows(const std::vector<double>& step_end_s,
                                 const std::vector<int64_t>& step_samples, double event_t_s,
                                 double settle_s, double before_s = 3);

}  // namespace sluice::testbed

#endif  // SLUICE_TESTBED_BENCH_RUNNER_H_
