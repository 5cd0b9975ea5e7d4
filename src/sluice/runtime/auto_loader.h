// AutoLoader: the `sluice` policy (and `auto`) at run time. It starts with the plain local
// pipeline, measures a short window of real training (the consumer's wait and step, the
// per-op costs; the workers' CPU budget, link and RTT from a probe at start), builds a
// policy::Profile and asks policy::Controller for the first plan (PlanSluice). An offloading
// plan replaces the local Loader by one with the plan, resuming from the first one's
// progress (LoaderOptions::resume), so no sample is lost or repeated. Then, about once a
// second, it feeds the controller a Measurement (rate, stall, step, per worker delivered rate
// and connection, fresh per-op costs) and applies its decisions: a ratio or shares change
// through Loader::SetShares (no reconnect), anything else (cut, read mode, codec, worker set)
// with a new Loader resumed from the old one's progress. Every decision goes into timeline().
//
// Metric store: with one (AutoOptions::metric_store), costs are looked up by the pipeline's
// and the host's fingerprints at Create; a hit plans after a much shorter window (only the
// step time needs measuring). Finish() saves the costs measured in this run. Stale or
// corrupt entries are reported through `log` and ignored.
//
// Thread-compatible: one consumer calls GetNext(); Report() from that thread too (or after it
// stopped). Cancel() from any thread.
#ifndef SLUICE_RUNTIME_AUTO_LOADER_H_
#define SLUICE_RUNTIME_AUTO_LOADER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sluice/core/clock.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/spec.h"
#include "sluice/policy/controller.h"
#include "sluice/policy/metric_store.h"
#include "sluice/policy/plan.h"
#include "sluice/policy/profile.h"
#include "sluice/rpc/worker_names.h"
#include "sluice/runtime/loader.h"
#include "sluice/runtime/profiler.h"
#include "sluice/runtime/train.h"

namespace sluice::runtime {

// `message` to `log`, or without one to stderr as "sluice: <message>".
void LogNote(const std::function<void(const std::string&)>& log, const std::string& message);

struct AutoOptions {
  std::vector<rpc::ConnectOptions> workers;
  // The worker list as given, when it names workers ("dns:NAME:PORT", "file:PATH";
  // rpc::NamesWorkers): expanded again every `rediscover_s` while the plan is watched. An
  // address that appears is probed and joins the plan; one that vanishes leaves it (as a
  // draining worker does, without a penalty) and may come back. Empty: `workers` is the set.
  // Every 5 s: a Kubernetes Service's endpoints change within seconds, a join then takes
  // about one interval plus a probe, and a trainer asks its resolver once per 5 s.
  std::vector<rpc::ConnectOptions> worker_names;
  double rediscover_s = 5.0;
  // Threads, split size, buffers, reconnects, warn: used for every Loader it creates (its
  // workers, cut, ratio, shares, read mode, compression and resume are set by the plans).
  LoaderOptions base;
  // The all-local measuring window: at least this long and this many batches, after
  // `warmup_batches` (start-up) batches.
  double measure_s = 2.0;
  int64_t measure_batches = 8;
  // ... or, where batches are slow (a step of a second, say), at least measure_cap_batches
  // batches once measure_cap_s have passed: time to plan stays under 10 s.
  double measure_cap_s = 4.0;
  int64_t measure_cap_batches = 3;
  // The same with costs from the metric store (only the step time is measured).
  // The step is the shortest one seen, and a trainer short of CPU wakes late from most of
  // its steps: the window holds as many batches as a measured one (3 had read a 15 ms step
  // as 33 ms), only not as long.
  double stored_measure_s = 0.5;
  int64_t stored_measure_batches = 8;
  int64_t warmup_batches = 1;
  // The window starts again at a batch after which the process faulted in more than this
  // many fresh pages per sample delivered since the last batch, for at most `measure_s` (and
  // `measure_cap_s`) from its first start: the engine is still growing its memory (its queues
  // filling with fresh buffers), and each fresh page costs its op a fault and the kernel's
  // zeroing.
  // Why 1: growth faults in a sample's output pages (54-265 a sample measured on the image
  // pipeline's first two seconds, when normalize cost 113-147 us a sample against 35 us
  // after), steady state reuses its buffers (0.0-0.2 a sample on the same runs), and one
  // 4 KB page a sample costs about a microsecond, under what the loop resolves for any
  // pipeline whose samples are worth offloading.
  double growth_faults_per_sample = 1.0;
  bool closed_loop = true;
  double observe_interval_s = 1.0;
  // How many batches the caller takes after the first plan, where it knows (`sluice train
  // --steps`, whose planning steps come on top); 0: not known, as for a Python loop, whose
  // pass may be followed by others. With it each measurement says how long the run has
  // left (policy::Measurement::remaining_s), and the loop does not spend the end of a short
  // run on an all-local check that cannot pay back (policy::Controller::CheckPaysBack).
  int64_t batches_after_plan = 0;
  // false: plan but keep the local pipeline (`sluice plan`).
  bool apply_plans = true;
  // Where costs are kept between runs; nullopt: no store.
  std::optional<policy::MetricStoreOptions> metric_store;
  policy::ControllerOptions controller;
  // Notes for the user (metric store hits and misses, warnings): default stderr.
  std::function<void(const std::string&)> log;
  // Called with every decision as it is applied (the first plan and each re-plan), from the
  // thread that calls GetNext: what a caller watches instead of the log's wording.
  std::function<void(const policy::TimelineEntry&)> on_decision;
  // false: decisions go only to on_decision, not to `log`.
  bool log_decisions = true;
  // The wall clock the loop is measured on (nanoseconds, monotonic); empty: NowNanos. A test
  // injects its own to move time by exactly the steps it means, instead of sleeping. (CPU
  // time, which the costs come from, is the process's own either way.) ConsumerTimes given
  // to GetNext must be on the same clock.
  std::function<int64_t()> clock;
  // The process's minor page faults so far (growth_faults_per_sample); null:
  // ProcessMinorFaults. A test injects its own, as it does the clock.
  std::function<int64_t()> minor_faults;
};

struct AutoReport {
  policy::Plan plan;  // in force now
  // Every decision other than keep, as the controller made it (the first one's reason says
  // where the costs came from).
  std::vector<policy::TimelineEntry> timeline;
  std::optional<policy::Profile> profile;  // what the first plan was made from
  // From the first batch request to the first plan applied (or the decision not to offload);
  // nullopt if the run ended before.
  std::optional<double> time_to_plan_s;
  // The workers' probe in Create, which ran before the pipeline started (0: no workers).
  // time_to_plan_s includes it.
  double probe_s = 0;
  bool costs_from_store = false;
  std::string store_path;   // the entry looked up (empty: no store)
  std::string store_note;   // "hit (saved 12 s ago)", "miss", or the warning
  int loaders_created = 0;  // 1 + the plan switches that needed a new Loader
  // Summed over every Loader of the run (workers by address).
  LoaderReport loader;
};

class AutoLoader final : public BatchSource {
 public:
  // Probes the workers (their CPU budget, RTT and link, timed before anything else runs
  // here), then creates the local Loader and looks the costs up in the metric store.
  static StatusOr<std::unique_ptr<AutoLoader>> Create(const pipeline::PipelineSpec& spec,
                                                      AutoOptions options);
  ~AutoLoader() override;

  Status GetNext(Element* out, bool* end_of_stream) override;
  // The same, timed on the consumer's clock rather than the calling thread's.
  Status GetNext(Element* out, bool* end_of_stream, const ConsumerTimes& times);
  void Cancel();
  // Saves the costs measured in this run to the metric store (when there is one and the run
  // measured them). Returns the save's status (OK when there was nothing to save).
  Status Finish();
  // Starts the next pass over the data (a Python loader iterated again): the spec's epochs
  // end at `epochs` and the new pass resumes at `resume`. The plan in force, the controller
  // and everything it measured carry over, so the pass neither measures all-local again nor
  // re-plans; only the Loader is new. The consumer's pause between passes (validation, a
  // checkpoint) counts as neither its step nor its wait, and no measuring period spans it.
  // Call between batches, from the consumer's thread.
  Status NextPass(int64_t epochs, std::shared_ptr<const pipeline::SourceProgress> resume);

  bool planned() const { return controller_ != nullptr; }
  AutoReport Report() const;
  // The current Loader's (each Loader resumes from the one before).
  pipeline::SourceProgress Progress() const { return loader_->Progress(); }
  const Schema& output_schema() const { return loader_->output_schema(); }
  int64_t samples_per_epoch() const { return loader_->samples_per_epoch(); }

 private:
  AutoLoader(pipeline::PipelineSpec spec, AutoOptions options);
  void Log(const std::string& message) const;
  void LogDecision(const policy::TimelineEntry& entry) const;
  Status Next(Element* out, bool* end_of_stream, const ConsumerTimes* times);
  double Seconds(int64_t now_ns) const { return (now_ns - t0_ns_) / 1e9; }
  int64_t Now() const { return options_.clock ? options_.clock() : NowNanos(); }
  Status Tick(int64_t now_ns);
  Status PlanFirst(int64_t now_ns);
  Status Observe(int64_t now_ns);
  Status Apply(const policy::Plan& plan);
  // The Loader options that run `plan` (its workers, placement; local when it offloads
  // nothing).
  LoaderOptions OptionsFor(const policy::Plan& plan) const;
  // A new Loader with `options`, resuming from the current one's progress, or from `resume`
  // when given.
  Status Replace(LoaderOptions options,
                 std::shared_ptr<const pipeline::SourceProgress> resume = nullptr);
  // After a Loader with an uncompressed offload starts: the receive cost is measured afresh
  // once it has settled.
  void ScheduleReceiveMark();
  policy::Costs MeasuredCosts() const;

  // The trainer's whole-process CPU while a Loader offloads on uncompressed streams: the
  // streams' own counters miss gRPC's threads. Marked when such a Loader starts.
  struct ReceiveMark {
    int64_t process_cpu_ns = 0;
    int64_t samples_out = 0;
    int64_t remote_samples = 0;
    int64_t bytes = 0;
    // The local ops' counters (their CPU over a window, and its op costs: OpStatsSince).
    std::vector<pipeline::OpStatsSnapshot> ops;
    // Per worker (by address): the CPU it reported for its session, and the samples its
    // last op had processed in the same report.
    std::map<std::string, std::pair<int64_t, int64_t>> worker_cpu;
  };
  ReceiveMark MarkNow() const;
  // The window from `was` to now, in seconds and counts.
  ReceiveWindow WindowSince(const ReceiveMark& was) const;
  // The receive cost since the mark: the process's CPU net of the ops and batching, put on
  // the one parameter the current cut tells apart (after batching, elements are few: per
  // byte; per sample otherwise, bytes at the known rate). nullopt until enough was received.
  std::optional<ReceiveFit> MeasuredReceive() const;
  // Each worker's whole CPU per sample since the mark, as it reported it (empty where none
  // reported enough: a session that started since, or fewer than kMinFitSamples samples).
  std::vector<policy::WorkerCpuReading> MeasuredWorkerCpu() const;
  std::optional<ReceiveMark> receive_mark_;
  // Taken when the all-local measuring window starts: the engine's own CPU per sample
  // (FitLocalCost) is read from it at the first plan. The codec probe's CPU on the
  // consumer's thread (codec_probe_cpu_ns_) is not the engine's per-sample cost.
  std::optional<ReceiveMark> window_mark_;
  int64_t codec_probe_cpu_ns_ = 0;
  // When the mark is to be taken (-1: none due): the controller's settle_s after a Loader
  // starts, so that its start-up (connections, threads, the streams filling) is not read as
  // the cost of receiving.
  int64_t receive_mark_due_ns_ = -1;
  bool receive_recalibrated_ = false;
  bool worker_cpu_recalibrated_ = false;  // likewise, the workers' CPU (once a Loader)

  pipeline::PipelineSpec spec_;  // its epochs change with each pass (NextPass)
  AutoOptions options_;
  // NextPass ran and no batch of the new pass was asked for yet: the pause ends there.
  bool between_passes_ = false;
  int64_t last_after_ns_ = -1;  // when the last call here returned
  // Written by the consumer's thread only (Create, Replace), under swap_mu_; Cancel() takes
  // swap_mu_ to reach it from another thread, and a Loader created after a Cancel() is
  // cancelled at once.
  std::unique_ptr<Loader> loader_;
  mutable std::mutex swap_mu_;
  bool cancelled_ = false;  // guarded by swap_mu_
  bool offloaded_ = false;
  policy::Plan applied_;  // the plan the current Loader runs
  LoaderReport retired_;  // the Loaders replaced so far, summed
  int loaders_created_ = 0;

  std::vector<std::optional<rpc::LinkProbe>> probes_;
  std::vector<std::string> probe_errors_;
  std::vector<bool> reachable_;  // per configured worker, at last sight
  double probe_s_ = 0;  // the workers' probe in Create, before the pipeline started
  // Workers not reachable at last sight are probed again now and then (a worker that comes
  // back, or starts late, joins the plan).
  void Reprobe(int64_t now_ns);
  std::thread reprober_;
  std::shared_ptr<std::atomic<bool>> reprobe_done_;
  std::vector<std::optional<rpc::LinkProbe>> reprobes_;  // written by reprober_
  int64_t last_reprobe_ns_ = 0;

  std::optional<policy::MetricStore> store_;
  policy::MetricKey key_;
  std::optional<policy::Costs> stored_costs_;
  std::vector<policy::MeasuredPlan> stored_losses_;      // with the stored costs
  std::optional<policy::MeasuredPlan> stored_ended_on_;  // ... and the plan a run ended on
  std::string store_note_;
  std::optional<policy::Costs> costs_;  // the costs of the first plan
  std::optional<policy::Profile> profile_for_report_;
  bool codecs_measured_ = false;
  std::vector<policy::CodecCost> codec_costs_;

  ConsumerMeter meter_;
  int64_t t0_ns_ = -1;
  int64_t window_start_ns_ = -1;
  ConsumerCounters window_start_;
  // (Re)starts the all-local measuring window at `now_ns`.
  void StartWindow(int64_t now_ns);
  // True when the process faulted in more than growth_faults_per_sample fresh pages per
  // sample delivered since the last call (the codec probe's own faults left out).
  bool MemoryGrew();
  int64_t Faults() const;
  int64_t first_window_ns_ = -1;  // the window's first start
  int64_t growth_faults_ = 0;     // at the last MemoryGrew
  int64_t growth_samples_ = 0;
  int64_t codec_probe_faults_ = 0;
  std::unique_ptr<policy::Controller> controller_;
  std::vector<policy::TimelineEntry> timeline_;
  std::optional<double> time_to_plan_s_;
  int64_t last_observe_ns_ = 0;
  // The process's CPU clock at the last observation, and the CPUs the trainer may use (the
  // profile's budget): each period's Measurement::trainer_cpu_busy.
  int64_t last_observe_cpu_ns_ = 0;
  double trainer_cpu_budget_ = 0;
  ConsumerCounters last_observe_;
  int64_t plan_batches_ = 0;  // handed out when the first plan was applied
  double smoothed_step_s_ = 0;
  // Workers found by name (AutoOptions::worker_names): the list expanded again in the
  // background; its result taken in at the next observation (Rediscover).
  void Rediscover(int64_t now_ns);
  void TakeWorkerSet(const std::vector<rpc::ConnectOptions>& current);
  struct Discovery {
    std::atomic<bool> done{false};
    StatusOr<rpc::ExpandedWorkers> result = rpc::ExpandedWorkers();
  };
  std::thread discoverer_;
  std::shared_ptr<Discovery> discovery_;
  int64_t last_discover_ns_ = 0;
  std::string last_discover_error_;
  std::vector<bool> listed_;  // per worker: in the last expansion of the names

  std::vector<int64_t> last_worker_samples_;  // per configured worker, at the last observe
  std::vector<int64_t> last_worker_failures_;  // the same, broken or drained streams
  std::vector<int64_t> last_worker_drains_;    // the same, drained streams
  // Per worker: the CPU this trainer is entitled to there as last reported, by a session's
  // metrics or by a re-probe (0: none yet, the first probe's figure holds). Kept across
  // plan switches: a new Loader's sessions report their first share about a second after
  // they open, and the first probe's figure may date from before the other trainers came.
  std::vector<double> last_share_;
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_AUTO_LOADER_H_
