#include "sluice/runtime/auto_loader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/core/clock.h"
#include "sluice/core/cpu_budget.h"
#include "sluice/policy/sluice_planner.h"

namespace sluice::runtime {
namespace {

int64_t SamplesOf(const Element& e) {
  return e.members.empty() ? 1 : static_cast<int64_t>(e.members.size());
}

}  // namespace

AutoLoader::AutoLoader(pipeline::PipelineSpec spec, AutoOptions options)
    : spec_(std::move(spec)), options_(std::move(options)) {}

AutoLoader::~AutoLoader() {
  Cancel();
  if (reprober_.joinable()) reprober_.join();
  // A resolver can take seconds to give up: the expansion writes only its own shared state.
  if (discoverer_.joinable()) discoverer_.detach();
  loader_.reset();
}

void LogNote(const std::function<void(const std::string&)>& log, const std::string& message) {
  if (log) {
    log(message);
  } else {
    std::fprintf(stderr, "sluice: %s\n", message.c_str());
  }
}

void AutoLoader::Log(const std::string& message) const { LogNote(options_.log, message); }

StatusOr<std::unique_ptr<AutoLoader>> AutoLoader::Create(const pipeline::PipelineSpec& spec,
                                                         AutoOptions options) {
  std::unique_ptr<AutoLoader> a(new AutoLoader(spec, std::move(options)));
  const size_t n = a->options_.workers.size();
  a->reachable_.assign(n, false);
  a->last_worker_samples_.assign(n, 0);
  a->last_worker_failures_.assign(n, 0);
  a->last_worker_drains_.assign(n, 0);
  a->last_share_.assign(n, 0);
  a->listed_.assign(n, true);
  if (n > 0) {
    // The links are timed before the pipeline starts. Timed beside it, a reading was the
    // trainer's CPU left over for receiving, not the link: on a 0.5-CPU trainer a 1 Gbit link
    // read 42-92 MB/s from run to run and carried 102 MB/s in the same runs' offloading, and
    // the model, which charges receiving to the trainer's CPU per byte, counted that CPU
    // twice. Workers are connected in parallel, so one that does not answer delays the first
    // batch by its connect timeout, not by one per worker.
    const int64_t probe_start = a->Now();
    a->probes_ = ProbeWorkers(rpc::ConnectorOr(a->options_.base.connector), a->options_.workers,
                              &a->probe_errors_, StorageCheckPath(a->spec_));
    a->probe_s_ = (a->Now() - probe_start) / 1e9;
    for (size_t i = 0; i < n; ++i) {
      const std::optional<rpc::LinkProbe>& p = a->probes_[i];
      a->reachable_[i] = p.has_value();
      if (!p.has_value()) {
        a->Log(absl::StrCat("warning: worker ", a->options_.workers[i].address,
                            " did not answer the probe; planning without it: ",
                            a->probe_errors_[i]));
      } else if (p->can_read == false) {
        a->Log(absl::StrCat("worker ", p->info.address, " cannot read the data itself (",
                            p->read_error, "): it gets the bytes from here (local_read)"));
      }
    }
  }
  LoaderOptions local = a->options_.base;
  local.workers.clear();
  local.ratio = 0;
  local.cut = 0;
  // base.resume is where the run starts; every later Loader resumes from the one before.
  a->options_.base.resume = nullptr;
  SLUICE_ASSIGN_OR_RETURN(a->loader_, Loader::Create(a->spec_, local));
  a->loaders_created_ = 1;
  a->applied_ = policy::Plan();

  if (a->options_.metric_store.has_value()) {
    a->store_.emplace(*a->options_.metric_store);
    // Costs per sample do not depend on how many epochs run.
    pipeline::PipelineSpec costed = a->spec_;
    costed.epochs = 1;
    a->key_.pipeline_fingerprint = pipeline::Fingerprint(costed);
    a->key_.host_fingerprint = policy::ProbeHostFingerprint(ProbeCpuBudget().cpus());
    policy::MetricLoadResult loaded = a->store_->Load(a->key_);
    if (loaded.costs.has_value()) {
      a->stored_costs_ = std::move(loaded.costs);
      a->stored_losses_ = std::move(loaded.losses);
      a->stored_ended_on_ = std::move(loaded.ended_on);
      a->store_note_ = absl::StrCat("hit (saved ", static_cast<int64_t>(loaded.age_s), " s ago)");
      a->Log(absl::StrCat("metric store: planning from the costs in ", loaded.path, ", saved ",
                          static_cast<int64_t>(loaded.age_s), " s ago"));
    } else if (!loaded.warning.empty()) {
      a->store_note_ = loaded.warning;
      a->Log(absl::StrCat("warning: ", loaded.warning));
    } else {
      a->store_note_ = "miss";
    }
  }
  return a;
}

void AutoLoader::Cancel() {
  std::lock_guard<std::mutex> lock(swap_mu_);
  cancelled_ = true;
  if (loader_ != nullptr) loader_->Cancel();
}

Status AutoLoader::GetNext(Element* out, bool* end_of_stream) {
  return Next(out, end_of_stream, nullptr);
}

Status AutoLoader::GetNext(Element* out, bool* end_of_stream, const ConsumerTimes& times) {
  return Next(out, end_of_stream, &times);
}

Status AutoLoader::Next(Element* out, bool* end_of_stream, const ConsumerTimes* times) {
  const int64_t before = times != nullptr ? times->asked_ns : Now();
  if (t0_ns_ < 0) t0_ns_ = before;
  // The previous batch reached the consumer after it left here: that hand-over was waiting.
  if (times != nullptr && times->took_previous_ns >= 0) meter_.ExtendWait(times->took_previous_ns);
  if (loader_ == nullptr) {
    return absl::FailedPreconditionError(
        "no loader: switching to a new plan failed earlier (that call returned why)");
  }
  if (between_passes_) {
    // The pause between passes (the consumer's validation, a checkpoint) is neither step nor
    // wait, and every clock that measures training leaves it out: the run's (Seconds: no
    // duration the controller watches grows by it), the all-local window's and the current
    // period's (a rate over a span holding the pause would read as a fall in the rate).
    between_passes_ = false;
    meter_.Pause();
    const int64_t pause = last_after_ns_ >= 0 ? before - last_after_ns_ : 0;
    t0_ns_ += pause;
    if (window_start_ns_ >= 0) window_start_ns_ += pause;
    last_observe_ns_ += pause;
  }
  meter_.Before(before);
  Status s = loader_->GetNext(out, end_of_stream);
  const int64_t after = Now();
  meter_.After(after, s.ok() && !*end_of_stream ? SamplesOf(*out) : 0);
  last_after_ns_ = after;
  SLUICE_RETURN_IF_ERROR(s);
  if (*end_of_stream) return absl::OkStatus();
  const int loaders = loaders_created_;
  // Once, on a batch early in the measuring window: what compression would do to the wire,
  // at the output and at the cuts before it.
  bool measured_codecs = false;
  if (!codecs_measured_ && window_start_ns_ >= 0 && !stored_costs_.has_value()) {
    codecs_measured_ = true;
    measured_codecs = true;
    const int64_t cpu_before = ThreadCpuNanos();
    const int64_t faults_before = Faults();
    codec_costs_ = MeasureCodecs(*out, CostDefaults().recv_cpu_s_per_byte);
    // And at the cuts before the last, from samples run through the ops here.
    std::vector<policy::CodecCost> at_cuts = MeasureCodecsAtCuts(
        spec_, loader_->source_files(), CostDefaults().recv_cpu_s_per_byte);
    codec_costs_.insert(codec_costs_.end(), at_cuts.begin(), at_cuts.end());
    codec_probe_cpu_ns_ = ThreadCpuNanos() - cpu_before;
    codec_probe_faults_ = Faults() - faults_before;
  }
  // The probe is the profiler's own cost: neither a stall nor the accelerator's step.
  if (measured_codecs) meter_.Exclude(Now());
  Status ticked = Tick(Now());
  // A plan switch on the consumer's thread: the consumer waited for it.
  if (loaders_created_ != loaders) meter_.ExtendWait(Now());
  return ticked;
}

Status AutoLoader::Tick(int64_t now_ns) {
  const ConsumerCounters& c = meter_.counters();
  if (controller_ == nullptr) {
    if (window_start_ns_ < 0) {
      if (c.batches >= options_.warmup_batches) {
        first_window_ns_ = now_ns;
        StartWindow(now_ns);
        MemoryGrew();  // the baseline the next batch's faults are counted from
      }
      return absl::OkStatus();
    }
    // The engine still growing its memory is start-up, not its steady cost per sample nor a
    // steady stall: the window starts again (AutoOptions::growth_faults_per_sample).
    const double growth_limit_s = std::min(options_.measure_s, options_.measure_cap_s);
    if (MemoryGrew() && (now_ns - first_window_ns_) / 1e9 < growth_limit_s) {
      StartWindow(now_ns);
      return absl::OkStatus();
    }
    const bool stored = stored_costs_.has_value();
    const double need_s = stored ? options_.stored_measure_s : options_.measure_s;
    const int64_t need_batches =
        stored ? options_.stored_measure_batches : options_.measure_batches;
    const double measured_s = (now_ns - window_start_ns_) / 1e9;
    const int64_t measured_batches = c.batches - window_start_.batches;
    const bool enough = measured_s >= need_s && measured_batches >= need_batches;
    const bool capped =
        measured_s >= options_.measure_cap_s && measured_batches >= options_.measure_cap_batches;
    if (!enough && !capped) return absl::OkStatus();
    return PlanFirst(now_ns);
  }
  if (!options_.closed_loop || !options_.apply_plans) return absl::OkStatus();
  if ((now_ns - last_observe_ns_) / 1e9 < options_.observe_interval_s) return absl::OkStatus();
  return Observe(now_ns);
}

void AutoLoader::StartWindow(int64_t now_ns) {
  window_start_ns_ = now_ns;
  window_start_ = meter_.counters();
  window_mark_ = MarkNow();
  // A probe before this start is not in the window's CPU.
  codec_probe_cpu_ns_ = 0;
}

int64_t AutoLoader::Faults() const {
  return options_.minor_faults ? options_.minor_faults() : ProcessMinorFaults();
}

bool AutoLoader::MemoryGrew() {
  const int64_t faults = Faults() - codec_probe_faults_;
  const int64_t samples = meter_.counters().samples;
  const bool grew =
      samples > growth_samples_ &&
      faults - growth_faults_ > options_.growth_faults_per_sample * (samples - growth_samples_);
  growth_faults_ = faults;
  growth_samples_ = samples;
  return grew;
}

policy::Costs AutoLoader::MeasuredCosts() const {
  const LoaderReport r = loader_->Report();
  const policy::Costs* fallback = costs_.has_value()          ? &*costs_
                                  : stored_costs_.has_value() ? &*stored_costs_
                                                              : nullptr;
  return CostsFromReport(spec_, r.local_ops, r.workers, fallback);
}

Status AutoLoader::PlanFirst(int64_t now_ns) {
  const ConsumerWindow window =
      Window(window_start_, meter_.counters(), (now_ns - window_start_ns_) / 1e9);
  policy::Profile profile;
  if (stored_costs_.has_value()) {
    profile.costs = *stored_costs_;
  } else {
    const LoaderReport r = loader_->Report();
    // The ops' costs over the measuring window, as the engine's own cost below: the first
    // batch's start-up is in neither.
    profile.costs = CostsFromReport(
        spec_, window_mark_.has_value() ? OpStatsSince(window_mark_->ops, r.local_ops) : r.local_ops,
        r.workers, nullptr);
    if (window_mark_.has_value()) {
      ReceiveWindow w = WindowSince(*window_mark_);
      w.process_cpu_s -= codec_probe_cpu_ns_ / 1e9;
      if (std::optional<LocalFit> fit = FitLocalCost(w, profile.costs.batch_cpu_s_per_sample)) {
        profile.costs.batch_cpu_s_per_sample = fit->batch_cpu_s_per_sample;
        profile.costs.local_cpu_s_per_sample = fit->local_cpu_s_per_sample;
      }
    }
    const double recv = profile.costs.CostOf(policy::Codec::kNone)->trainer_cpu_s_per_byte;
    for (policy::CodecCost c : codec_costs_) {
      c.trainer_cpu_s_per_byte += recv - CostDefaults().recv_cpu_s_per_byte;
      profile.costs.codecs.push_back(c);
    }
  }
  // A worker's cost of sending a byte back, until measured: the trainer's cost of receiving
  // one (the same bytes through the same library on the other end).
  if (!(profile.costs.worker_send_cpu_s_per_byte > 0)) {
    profile.costs.worker_send_cpu_s_per_byte =
        profile.costs.CostOf(policy::Codec::kNone)->trainer_cpu_s_per_byte;
  }
  costs_ = profile.costs;
  profile.consumer = ConsumerFrom(window, spec_.batch.size > 0 ? spec_.batch.size : 1);
  // The accelerator's step is the shortest one seen (ConsumerMeter::TakeMinStepNs): the
  // planning steps run all-local on a trainer whose CPU is saturated, and the mean step had
  // read 45 ms for a 20 ms accelerator, then re-planned twice as it came down.
  if (const int64_t min_step_ns = meter_.TakeMinStepNs(); min_step_ns > 0) {
    profile.consumer.step_s = min_step_ns / 1e9;
  }
  for (size_t i = 0; i < probes_.size(); ++i) {
    if (probes_[i].has_value()) {
      profile.workers.push_back(WorkerFromProbe(*probes_[i], options_.base.session_weight));
    }
  }
  profile.trainer_cpu_budget = TrainerCpuBudget(loader_->Report().threads);

  policy::ControllerOptions copt = options_.controller;
  // A rank of a sharded run never batches per split (LoaderOptions::shard).
  copt.planner.allow_after_batch = spec_.batch.size > 0 && !options_.base.shard.sharded();
  controller_ = std::make_unique<policy::Controller>(profile, copt);
  controller_->Remember(stored_losses_, stored_ended_on_);
  // The window's all-local rate is the plan to come back to if offloading measures worse.
  policy::TimelineEntry entry = controller_->Start(Seconds(now_ns), window.samples_per_s());
  entry.reason = absl::StrCat(
      stored_costs_.has_value()
          ? absl::StrCat("planned from stored costs (metric store, ", store_note_, ") and ")
          : "planned from measured costs and ",
      window.batches, " batches measured all-local (", absl::StrFormat("%.2f", window.wall_s),
      " s, stall ", absl::StrFormat("%.1f%%", 100 * window.stall_fraction()),
      window_start_ns_ > first_window_ns_
          ? absl::StrFormat(", from %.2f s on: the engine's memory grew until then",
                            (window_start_ns_ - first_window_ns_) / 1e9)
          : "",
      "): ", entry.reason);
  profile_for_report_ = profile;
  if (options_.apply_plans) SLUICE_RETURN_IF_ERROR(Apply(controller_->plan()));
  // From the first batch asked for, and the probe's time before the pipeline started.
  time_to_plan_s_ = Seconds(Now()) + probe_s_;
  LogDecision(entry);
  if (options_.on_decision) options_.on_decision(entry);
  timeline_.push_back(entry);
  last_observe_ns_ = Now();
  last_observe_cpu_ns_ = ProcessCpuNanos();
  trainer_cpu_budget_ = profile.trainer_cpu_budget;
  last_observe_ = meter_.counters();
  plan_batches_ = last_observe_.batches;
  meter_.TakeMinStepNs();  // periods start here
  smoothed_step_s_ = profile.consumer.step_s;
  return absl::OkStatus();
}

Status AutoLoader::Observe(int64_t now_ns) {
  const double period = (now_ns - last_observe_ns_) / 1e9;
  const ConsumerWindow window = Window(last_observe_, meter_.counters(), period);
  const LoaderReport r = loader_->Report();
  policy::Measurement m;
  m.t_s = Seconds(now_ns);
  m.samples_per_s = window.samples_per_s();
  m.stall_fraction = window.stall_fraction();
  m.period_s = period;
  if (options_.batches_after_plan > 0 && window.batches > 0 && period > 0) {
    const int64_t taken = meter_.counters().batches - plan_batches_;
    const int64_t left = std::max<int64_t>(0, options_.batches_after_plan - taken);
    m.remaining_s = left / (window.batches / period);
  }
  // The period's shortest step (ConsumerMeter::TakeMinStepNs), smoothed over periods: the
  // mean of a sleep-sized step on a throttled trainer jitters by more than the controller's
  // threshold from one second to the next; a real change still shows within a period or two.
  const int64_t min_step_ns = meter_.TakeMinStepNs();
  const double step_s = min_step_ns > 0 ? min_step_ns / 1e9 : window.step_s;
  if (step_s > 0) {
    smoothed_step_s_ = smoothed_step_s_ > 0 ? 0.5 * smoothed_step_s_ + 0.5 * step_s : step_s;
  }
  m.step_s = smoothed_step_s_;
  const int64_t cpu_ns = ProcessCpuNanos();
  if (period > 0 && trainer_cpu_budget_ > 0) {
    m.trainer_cpu_busy = (cpu_ns - last_observe_cpu_ns_) / 1e9 / period / trainer_cpu_budget_;
  }
  last_observe_cpu_ns_ = cpu_ns;
  Rediscover(now_ns);
  for (size_t i = 0; i < options_.workers.size(); ++i) {
    policy::WorkerMeasurement wm;
    wm.address = options_.workers[i].address;
    // What it may give this trainer: as its session reports (the worker's CPU divided between
    // the trainers it serves), else as last reported (last_share_), else as its probe said.
    wm.cpu_budget = probes_[i].has_value()
                        ? EntitledCpu(probes_[i]->info, options_.base.session_weight)
                        : 0;
    if (last_share_[i] > 0) wm.cpu_budget = last_share_[i];
    const WorkerReport* in_loader = nullptr;
    for (const WorkerReport& w : r.workers) {
      if (w.address == wm.address) in_loader = &w;
    }
    if (in_loader != nullptr) {
      // Gone only when its stream broke or the worker drains (shuts down): a stream that
      // ended with the data is not a worker leaving, and a broken one stays gone until it
      // connects again. A draining worker is removed as a failed one is, without a penalty.
      const int64_t left = in_loader->failures + in_loader->drains;
      if (in_loader->draining) {
        reachable_[i] = false;
        wm.drained = true;
      } else if (in_loader->connected) {
        reachable_[i] = true;
      } else if (left > last_worker_failures_[i]) {
        reachable_[i] = false;
        wm.drained = in_loader->drains > last_worker_drains_[i];
      }
      last_worker_failures_[i] = left;
      last_worker_drains_[i] = in_loader->drains;
      wm.delivered_samples_per_s =
          period > 0 ? (in_loader->samples - last_worker_samples_[i]) / period : 0;
      last_worker_samples_[i] = in_loader->samples;
      wm.ops = OpCostsOf(in_loader->metrics);
      if (in_loader->cpu_share > 0) wm.cpu_budget = last_share_[i] = in_loader->cpu_share;
    }
    if (!listed_[i]) {
      // No longer listed under its name: it leaves the plan as a draining worker does.
      reachable_[i] = false;
      wm.drained = true;
    }
    wm.connected = reachable_[i];
    m.workers.push_back(std::move(wm));
  }
  m.local_ops = OpCostsOf(r.local_ops);
  Reprobe(now_ns);
  last_observe_ns_ = now_ns;
  last_observe_ = meter_.counters();

  policy::TimelineEntry entry;
  if (receive_mark_due_ns_ >= 0 && now_ns >= receive_mark_due_ns_) {
    receive_mark_ = MarkNow();
    receive_mark_due_ns_ = -1;
  }
  // Once a Loader: the receive cost measured on the whole process, when it is far from the
  // profile's (a plan made with the wrong one may have picked the wrong cut). Only once the
  // plan in force has a measured rate: a plan it leads to is kept only if it measures
  // better (policy::Controller's rollback), which needs this one's rate to compare with.
  const bool plan_measured =
      controller_->measured_periods() >= options_.controller.min_measured_periods;
  // What receiving has cost since the streams settled: the controller keeps it when the plan
  // measures worse than all-local and is left (the loss's explanation).
  const std::optional<ReceiveFit> reading = offloaded_ ? MeasuredReceive() : std::nullopt;
  if (reading.has_value()) {
    m.receive.cpu_s_per_element = reading->per_element;
    m.receive.cpu_s_per_byte = reading->per_byte;
  }
  std::optional<ReceiveFit> measured =
      receive_recalibrated_ || !plan_measured ? std::nullopt : reading;
  bool off = false;
  if (measured.has_value()) {
    const policy::Costs known = controller_->effective_profile().costs;
    const auto far = [](double a, double b) { return b > 0 && std::fabs(a / b - 1) > 0.25; };
    if (measured->per_element) off = far(*measured->per_element, known.recv_cpu_s_per_sample);
    if (measured->per_byte) {
      if (std::optional<policy::CodecCost> none = known.CostOf(policy::Codec::kNone)) {
        off = far(*measured->per_byte, none->trainer_cpu_s_per_byte);
      }
    }
    // Close to the model's: nothing to re-plan, but receiving is measured here now.
    if (!off) controller_->NoteReceiveMeasured();
  }
  // Once a Loader too: the workers' CPU per sample as they report it, against the model's.
  std::optional<policy::TimelineEntry> worker_cpu;
  if (!off && offloaded_ && plan_measured && !worker_cpu_recalibrated_) {
    const std::vector<policy::WorkerCpuReading> readings = MeasuredWorkerCpu();
    if (!readings.empty()) {
      worker_cpu_recalibrated_ = true;
      worker_cpu = controller_->RecalibrateWorkerCpu(m.t_s, readings);
    }
  }
  if (off) {
    receive_recalibrated_ = true;
    entry = controller_->RecalibrateReceive(m.t_s, measured->per_element, measured->per_byte);
  } else if (worker_cpu.has_value()) {
    entry = *worker_cpu;
  } else {
    entry = controller_->Observe(m);
  }
  if (entry.kind == policy::DecisionKind::kKeep) return absl::OkStatus();
  SLUICE_RETURN_IF_ERROR(Apply(controller_->plan()));
  LogDecision(entry);
  if (options_.on_decision) options_.on_decision(entry);
  timeline_.push_back(std::move(entry));
  return absl::OkStatus();
}

void AutoLoader::Reprobe(int64_t now_ns) {
  constexpr double kReprobeIntervalS = 2.0;
  if (reprober_.joinable()) {
    if (!reprobe_done_->load()) return;
    reprober_.join();
    for (size_t i = 0; i < reprobes_.size(); ++i) {
      if (!reprobes_[i].has_value() || !listed_[i]) continue;
      if (reachable_[i]) {
        // A worker in use: only its reported CPU budget and the other trainers' sessions on
        // it are refreshed (its quota may change while it runs, and trainers come and go);
        // the link figures stay those of the full probe.
        if (probes_[i].has_value()) {
          probes_[i]->info.cpu_budget = reprobes_[i]->info.cpu_budget;
          probes_[i]->info.active_session_weight = reprobes_[i]->info.active_session_weight;
        }
        last_share_[i] = EntitledCpu(reprobes_[i]->info, options_.base.session_weight);
        continue;
      }
      probes_[i] = reprobes_[i];
      last_share_[i] = 0;  // the fresh probe's figure holds
      reachable_[i] = true;
      Log(absl::StrCat("worker ", options_.workers[i].address, " answers again"));
    }
  }
  if ((now_ns - last_reprobe_ns_) / 1e9 < kReprobeIntervalS) return;
  if (reachable_.empty()) return;
  last_reprobe_ns_ = now_ns;
  reprobes_.assign(options_.workers.size(), std::nullopt);
  reprobe_done_ = std::make_shared<std::atomic<bool>>(false);
  std::vector<rpc::ConnectOptions> connects = options_.workers;
  for (rpc::ConnectOptions& c : connects) c.connect_timeout_s = std::min(c.connect_timeout_s, 0.5);
  const std::vector<bool> in_use = reachable_;
  const std::vector<bool> listed = listed_;
  reprober_ = std::thread([this, connects, in_use, listed, done = reprobe_done_] {
    for (size_t i = 0; i < connects.size(); ++i) {
      if (!listed[i]) continue;  // gone from its name's list: not probed until it is back
      // In use: GetInfo and a few small calls. Not reachable: the full probe.
      rpc::Connector& connector = rpc::ConnectorOr(options_.base.connector);
      StatusOr<rpc::LinkProbe> p = in_use[i] ? connector.Probe(connects[i], 0, 0, "", nullptr)
                                             : connector.Probe(connects[i], rpc::kLinkProbeTargetS,
                                                               rpc::kLinkProbeMaxS, "", nullptr);
      if (p.ok()) reprobes_[i] = *std::move(p);
    }
    done->store(true);
  });
}

void AutoLoader::Rediscover(int64_t now_ns) {
  if (options_.worker_names.empty()) return;
  if (discoverer_.joinable()) {
    if (!discovery_->done.load()) return;
    discoverer_.join();
    const StatusOr<rpc::ExpandedWorkers>& got = discovery_->result;
    if (got.ok()) {
      last_discover_error_.clear();
      TakeWorkerSet(got->workers);
    } else if (std::string why(got.status().message()); why != last_discover_error_) {
      // The set stays as it was (a file being rewritten, say); said once per new reason.
      Log(absl::StrCat("warning: finding workers again failed, keeping the ",
                       options_.workers.size(), " known: ", why));
      last_discover_error_ = std::move(why);
    }
  }
  if ((now_ns - last_discover_ns_) / 1e9 < options_.rediscover_s) return;
  last_discover_ns_ = now_ns;
  discovery_ = std::make_shared<Discovery>();
  discoverer_ = std::thread([names = options_.worker_names, out = discovery_] {
    out->result = rpc::ExpandWorkerNames(names);
    out->done.store(true);
  });
}

void AutoLoader::TakeWorkerSet(const std::vector<rpc::ConnectOptions>& current) {
  std::set<std::string> now;
  for (const rpc::ConnectOptions& c : current) now.insert(c.address);
  for (size_t i = 0; i < options_.workers.size(); ++i) {
    const bool listed = now.count(options_.workers[i].address) > 0;
    if (listed_[i] && !listed) {
      Log(absl::StrCat("worker ", options_.workers[i].address,
                       " is no longer listed: it leaves the plan"));
    } else if (!listed_[i] && listed) {
      Log(absl::StrCat("worker ", options_.workers[i].address, " is listed again: probing it"));
      reachable_[i] = false;  // it joins once a probe answers
    }
    listed_[i] = listed;
    now.erase(options_.workers[i].address);
  }
  for (const rpc::ConnectOptions& c : current) {
    if (now.count(c.address) == 0) continue;  // known already
    Log(absl::StrCat("worker ", c.address, " is listed: probing it"));
    options_.workers.push_back(c);
    probes_.emplace_back();
    probe_errors_.emplace_back();
    reachable_.push_back(false);
    listed_.push_back(true);
    last_worker_samples_.push_back(0);
    last_worker_failures_.push_back(0);
    last_worker_drains_.push_back(0);
    last_share_.push_back(0);
  }
}

void AutoLoader::LogDecision(const policy::TimelineEntry& entry) const {
  if (!options_.apply_plans || !options_.log_decisions) return;
  Log(absl::StrFormat("%.2f s: %s: %s (%s)", entry.t_s, policy::DecisionKindName(entry.kind),
                      entry.plan.PolicyString(), entry.reason));
}

Status AutoLoader::Apply(const policy::Plan& planned) {
  // The planner's arithmetic can land a hair outside [0, 1] (1 + 1e-16); the Loader checks.
  policy::Plan plan = planned;
  plan.ratio = std::clamp(plan.ratio, 0.0, 1.0);
  for (double& share : plan.worker_shares) share = std::clamp(share, 0.0, 1.0);
  if (!plan.offload || plan.ratio <= 0 || plan.worker_addresses.empty()) {
    if (offloaded_) {
      SLUICE_RETURN_IF_ERROR(Replace(OptionsFor(plan)));
      offloaded_ = false;
      receive_mark_.reset();
      receive_mark_due_ns_ = -1;
    }
    applied_ = plan;
    return absl::OkStatus();
  }
  const bool same_shape = offloaded_ && applied_.cut == plan.cut &&
                          applied_.read_mode == plan.read_mode && applied_.codec == plan.codec &&
                          applied_.worker_addresses == plan.worker_addresses;
  if (same_shape) {
    SLUICE_RETURN_IF_ERROR(loader_->SetShares(plan.ratio, plan.worker_shares));
    SLUICE_RETURN_IF_ERROR(loader_->SetLocalSpillOver(plan.local_spill_over));
    applied_ = plan;
    return absl::OkStatus();
  }
  receive_mark_.reset();
  receive_mark_due_ns_ = -1;
  SLUICE_RETURN_IF_ERROR(Replace(OptionsFor(plan)));
  offloaded_ = true;
  applied_ = plan;
  ScheduleReceiveMark();
  return absl::OkStatus();
}

LoaderOptions AutoLoader::OptionsFor(const policy::Plan& plan) const {
  LoaderOptions o = options_.base;
  o.workers.clear();
  if (!plan.offload || plan.ratio <= 0 || plan.worker_addresses.empty()) {
    o.ratio = 0;
    o.cut = 0;
    return o;
  }
  for (const std::string& address : plan.worker_addresses) {
    for (const rpc::ConnectOptions& c : options_.workers) {
      if (c.address == address) o.workers.push_back(c);
    }
  }
  return WithPlacement(std::move(o), plan);
}

void AutoLoader::ScheduleReceiveMark() {
  receive_mark_.reset();
  receive_mark_due_ns_ = -1;
  if (!offloaded_) return;
  receive_mark_due_ns_ = Now() + static_cast<int64_t>(options_.controller.settle_s * 1e9);
  receive_recalibrated_ = false;  // a new Loader: measure it afresh
  worker_cpu_recalibrated_ = false;
}

Status AutoLoader::NextPass(int64_t epochs,
                            std::shared_ptr<const pipeline::SourceProgress> resume) {
  spec_.epochs = epochs;
  // The plan in force as applied (ratio and shares clamped), on a Loader for the new pass.
  SLUICE_RETURN_IF_ERROR(Replace(OptionsFor(applied_), std::move(resume)));
  ScheduleReceiveMark();
  between_passes_ = true;
  return absl::OkStatus();
}

Status AutoLoader::Replace(LoaderOptions options,
                           std::shared_ptr<const pipeline::SourceProgress> resume) {
  auto progress = resume != nullptr
                      ? std::move(resume)
                      : std::make_shared<const pipeline::SourceProgress>(loader_->Progress());
  std::unique_ptr<Loader> old;
  {
    std::lock_guard<std::mutex> lock(swap_mu_);
    old = std::move(loader_);
  }
  old->Cancel();
  AddLoaderReport(retired_, old->Report());
  old.reset();
  options.resume = progress;
  StatusOr<std::unique_ptr<Loader>> created = Loader::Create(spec_, std::move(options));
  if (!created.ok()) return created.status();
  {
    std::lock_guard<std::mutex> lock(swap_mu_);
    loader_ = *std::move(created);
    if (cancelled_) loader_->Cancel();
  }
  ++loaders_created_;
  std::fill(last_worker_samples_.begin(), last_worker_samples_.end(), 0);
  std::fill(last_worker_failures_.begin(), last_worker_failures_.end(), 0);
  std::fill(last_worker_drains_.begin(), last_worker_drains_.end(), 0);
  return absl::OkStatus();
}

AutoLoader::ReceiveMark AutoLoader::MarkNow() const {
  ReceiveMark m;
  m.process_cpu_ns = ProcessCpuNanos();
  const LoaderReport r = loader_->Report();
  m.ops = r.local_ops;
  m.samples_out = r.samples_out;
  for (const WorkerReport& w : r.workers) {
    m.remote_samples += w.samples;
    m.bytes += w.bytes_received;
    if (w.cpu_ns > 0 && !w.metrics.empty()) {
      m.worker_cpu[w.address] = {w.cpu_ns, w.metrics.back().samples};
    }
  }
  return m;
}

std::vector<policy::WorkerCpuReading> AutoLoader::MeasuredWorkerCpu() const {
  std::vector<policy::WorkerCpuReading> out;
  if (!receive_mark_.has_value() || loader_ == nullptr) return out;
  const ReceiveMark now = MarkNow();
  for (const auto& [address, was] : receive_mark_->worker_cpu) {
    auto it = now.worker_cpu.find(address);
    if (it == now.worker_cpu.end()) continue;
    const int64_t cpu = it->second.first - was.first;
    const int64_t samples = it->second.second - was.second;
    // A new session counts from 0 again: its reading does not span the mark.
    if (cpu <= 0 || samples < kMinFitSamples) continue;
    out.push_back({address, cpu / 1e9 / samples, samples});
  }
  return out;
}

std::optional<ReceiveFit> AutoLoader::MeasuredReceive() const {
  if (!receive_mark_.has_value() || !costs_.has_value() || loader_ == nullptr ||
      applied_.codec != policy::Codec::kNone) {
    return std::nullopt;
  }
  const policy::Costs known =
      controller_ != nullptr ? controller_->effective_profile().costs : *costs_;
  return FitReceiveCost(WindowSince(*receive_mark_), applied_.cut, applied_.read_mode,
                        spec_.batch.size, known);
}

ReceiveWindow AutoLoader::WindowSince(const ReceiveMark& was) const {
  const ReceiveMark now = MarkNow();
  ReceiveWindow w;
  w.process_cpu_s = (now.process_cpu_ns - was.process_cpu_ns) / 1e9;
  const auto op_cpu_ns = [](const ReceiveMark& m) {
    int64_t sum = 0;
    for (const pipeline::OpStatsSnapshot& op : m.ops) sum += op.cpu_ns;
    return sum;
  };
  w.op_cpu_s = (op_cpu_ns(now) - op_cpu_ns(was)) / 1e9;
  w.samples_out = now.samples_out - was.samples_out;
  w.remote_samples = now.remote_samples - was.remote_samples;
  w.bytes = static_cast<double>(now.bytes - was.bytes);
  return w;
}

Status AutoLoader::Finish() {
  if (!store_.has_value() || loader_ == nullptr) return absl::OkStatus();
  if (!costs_.has_value()) return absl::OkStatus();  // never measured enough to plan
  // What the workers' CPU measured since the plan's streams settled, when no re-plan took it
  // yet (a short run ends before its plan has a measured rate): the next run plans with it.
  if (controller_ != nullptr && offloaded_ && !worker_cpu_recalibrated_) {
    worker_cpu_recalibrated_ = true;
    if (std::optional<std::string> fitted = controller_->FitWorkerCpu(MeasuredWorkerCpu())) {
      Log(absl::StrCat("kept for the next run: ", *fitted));
    }
  }
  policy::Costs costs = MeasuredCosts();
  // The receive costs are the controller's: a whole-process reading it took, and kept. One
  // whose plan measured worse was rolled back with it, and is not remembered either.
  if (controller_ != nullptr) {
    const policy::Costs believed = controller_->effective_profile().costs;
    costs.recv_cpu_s_per_sample = believed.recv_cpu_s_per_sample;
    costs.recv_fit_bytes_per_element = believed.recv_fit_bytes_per_element;
    costs.worker_cpu_s_per_sample = believed.worker_cpu_s_per_sample;
    costs.worker_cpu_readings = believed.worker_cpu_readings;
    costs.receive_measured = controller_->receive_measured();
    if (std::optional<policy::CodecCost> none = believed.CostOf(policy::Codec::kNone)) {
      policy::SetReceiveCost(&costs, none->trainer_cpu_s_per_byte);
    }
  }
  if (controller_ == nullptr) return store_->Save(key_, costs, stored_losses_, stored_ended_on_);
  return store_->Save(key_, costs, controller_->losses(), controller_->ended_on());
}

AutoReport AutoLoader::Report() const {
  AutoReport r;
  r.plan = controller_ != nullptr ? controller_->plan() : applied_;
  r.timeline = timeline_;
  r.profile = profile_for_report_;
  r.time_to_plan_s = time_to_plan_s_;
  r.probe_s = probe_s_;
  r.costs_from_store = stored_costs_.has_value();
  if (store_.has_value()) r.store_path = store_->PathFor(key_);
  r.store_note = store_note_;
  r.loaders_created = loaders_created_;
  r.loader = retired_;
  if (loader_ != nullptr) AddLoaderReport(r.loader, loader_->Report());
  return r;
}

}  // namespace sluice::runtime
