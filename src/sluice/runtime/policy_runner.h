// PolicyRunner: the one place that decides which runtime serves which offloading policy,
// for `sluice train`, `sluice plan` and the Python loader alike.
//
//   none            the plain local pipeline (Loader without workers);
//   fixed:...       a Loader with the given cut, ratio, read mode, codec and spill-over;
//   sluice / auto   AutoLoader: measure, plan, switch, keep adapting (docs/policy.md); `auto`
//                   without workers is the local pipeline, and says so once;
//   fastflow[:code] FastFlow's profiling runs and Algorithm 1 (fastflow_runner.h), then a
//                   Loader with its plan. With a known accelerator step (`sluice train`) the
//                   runs are made at Open(); without one (Python) the consumer's step is
//                   measured on its first batches all-local, the runs emulate it, and the
//                   plan's Loader resumes where the local one stopped.
//
// Open() takes the parsed policy, the worker connections and the Loader options (threads,
// split size, warn, resume); the runner is a BatchSource whatever the policy. Report() says
// what ran: the plan in force (and its explanation), every decision (the timeline), what
// the planner measured (profile), the metric store's use, and, when everything runs locally
// for a reason (no workers, none reachable, no stall), that reason.
//
// Thread-compatible: one consumer calls GetNext(); Report(), Progress() and Finish() from that
// thread too, or after it stopped. Cancel() from any thread. The callbacks (`log`,
// `on_decision`) run on the thread that calls GetNext() (and Open()).
#ifndef SLUICE_RUNTIME_POLICY_RUNNER_H_
#define SLUICE_RUNTIME_POLICY_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/core/status.h"
#include "sluice/pipeline/spec.h"
#include "sluice/policy/controller.h"
#include "sluice/policy/metric_store.h"
#include "sluice/policy/plan.h"
#include "sluice/policy/profile.h"
#include "sluice/runtime/loader.h"
#include "sluice/runtime/train.h"
#include "sluice/runtime/trainer_metrics.h"

namespace sluice::runtime {

struct RunnerOptions {
  TrainPolicy policy;
  std::vector<rpc::ConnectOptions> workers;
  // Threads, split size, warn and resume (where the run starts) for every Loader; the plan
  // fields are the policy's.
  LoaderOptions base;
  // sluice/auto: seconds (and batches) of all-local training measured before the first plan
  // (0 batches: AutoOptions' default).
  double measure_s = 2.0;
  int64_t measure_batches = 0;
  // sluice/auto: false plans once and keeps the local pipeline (`sluice plan`).
  bool apply_plans = true;
  // sluice/auto: where measured costs are kept between runs; nullopt: no store.
  std::optional<policy::MetricStoreOptions> metric_store;
  // fastflow: the accelerator step its profiling runs emulate, in ms; < 0: measured on the
  // consumer's first batches. `fastflow_steps` > 0: steps per profiling run (FastFlow's 100
  // after 10 warm-up steps otherwise).
  double accelerator_ms = -1;
  int64_t fastflow_steps = 0;
  // sluice/auto: the batches the caller takes after the first plan, where it knows (its
  // steps); 0: not known (AutoOptions::batches_after_plan).
  int64_t batches_after_plan = 0;
  // Notes for the user (why the run is local, metric store hits, unreachable workers,
  // FastFlow's runs). Default: stderr.
  std::function<void(const std::string&)> log;
  // Every planner decision as it is applied (the first plan, each re-plan).
  std::function<void(const policy::TimelineEntry&)> on_decision;
  // Where the run's metrics go (each batch's wait, and the report about once a second);
  // null: none are kept.
  std::shared_ptr<TrainerMetrics> metrics;
};

struct RunnerReport {
  std::string policy;                 // as spelled ("auto", "fixed:cut=3,...")
  // The policy that served it (`auto` without workers is served by `none`).
  TrainPolicy parsed;
  std::optional<policy::Plan> plan;   // sluice and fastflow: the plan in force
  std::vector<policy::TimelineEntry> timeline;
  std::optional<double> time_to_plan_s;
  nlohmann::json profile;             // what the planner measured; null for none and fixed
  std::optional<policy::Profile> measured;  // sluice: the profile of the first plan
  // Why everything runs in this process when it does for a reason; empty otherwise.
  std::string local_reason;
  LoaderReport loader;                // summed over every Loader of the run

  // `sluice train --json`'s `plan`: policy (a planner's as spelled, else parsed.name), cut (int, "batch" or null), read_mode, ratio,
  // spill, compression, workers [{address, share}]; a planner's plan adds planner, offload,
  // policy_string, predictions and explanation.
  nlohmann::json PlanJson() const;
  // The decisions, without each plan's candidates table (that goes once, under profile).
  nlohmann::json TimelineJson() const;
};

// A decision as JSON, without its plan's candidates table.
nlohmann::json TimelineEntryJson(const policy::TimelineEntry& entry);

// "initial plan: cut=4, ratio 0.88, remote_read, compress none, spill workers, on A (0.88)"
// or "initial plan: all local", followed by the first line of the reason.
std::string DescribeDecision(const policy::TimelineEntry& entry);

class AutoLoader;

class PolicyRunner final : public BatchSource {
 public:
  // Errors: InvalidArgument for a policy that needs workers without any (fixed, fastflow),
  // and whatever the Loader or FastFlow's profiling runs return.
  static StatusOr<std::unique_ptr<PolicyRunner>> Open(const pipeline::PipelineSpec& spec,
                                                      RunnerOptions options);
  ~PolicyRunner() override;

  Status GetNext(Element* out, bool* end_of_stream) override;
  // The same, timed on the consumer's clock (a consumer on another thread, e.g. Python).
  Status GetNext(Element* out, bool* end_of_stream, const ConsumerTimes& times);
  void Cancel();
  // Saves what a planner measured for the next run (the metric store). OK when nothing to do.
  // May be called more than once (at the end of each pass).
  Status Finish();
  // The next pass over the data (Python iterating its loader again): the spec's epochs end at
  // `epochs`, the pass starts at `resume`, and the policy goes on as it was: a planner keeps
  // its plan, what it measured and its closed loop (AutoLoader::NextPass), FastFlow keeps its
  // plan, `none` and `fixed` their placement. Only the Loader is new. Call between batches.
  Status NextPass(int64_t epochs, std::shared_ptr<const pipeline::SourceProgress> resume);

  // true once the planner's first plan is applied (and always for none and fixed): what
  // TrainOptions::settled watches.
  bool settled() const;
  RunnerReport Report() const;
  pipeline::SourceProgress Progress() const;
  const Schema& output_schema() const;
  int64_t samples_per_epoch() const;

 private:
  PolicyRunner(pipeline::PipelineSpec spec, RunnerOptions options);
  void Log(const std::string& message) const;
  Status Next(Element* out, bool* end_of_stream, const ConsumerTimes* times);
  Status NextBatch(Element* out, bool* end_of_stream, const ConsumerTimes* times);
  void RecordMetrics(int64_t entered_ns, const ConsumerTimes* times, const Element& batch);
  Status OpenFastFlow();
  Status PlanFastFlow();

  pipeline::PipelineSpec spec_;  // its epochs change with each pass (NextPass)
  RunnerOptions options_;
  // The options loader_ was created with (none, fixed, fastflow): a new pass runs on them.
  LoaderOptions loader_options_;
  std::string policy_text_;
  std::string local_reason_;
  std::unique_ptr<AutoLoader> auto_;
  std::unique_ptr<Loader> loader_;
  LoaderReport retired_;  // the fastflow runner's local Loader, once replaced

  // fastflow: the plan, its timeline entry and what the runs measured.
  std::optional<policy::Plan> fastflow_plan_;
  std::vector<policy::TimelineEntry> timeline_;
  nlohmann::json profile_;
  std::optional<double> time_to_plan_s_;
  // fastflow without a known step: the consumer's batches so far and its shortest step.
  int64_t t0_ns_ = -1;
  int64_t batches_ = 0;
  int64_t last_took_ns_ = -1;
  int64_t min_step_ns_ = 0;
  // metrics: when the last batch was handed over (-1: none yet).
  int64_t last_return_ns_ = -1;
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_POLICY_RUNNER_H_
