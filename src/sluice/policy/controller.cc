#include "sluice/policy/controller.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sluice/policy/format.h"

namespace sluice::policy {
namespace {

constexpr double kMinFactor = 0.1;
constexpr double kMaxFactor = 10;

bool Changed(double now, double before, double threshold) {
  if (!(before > 0)) return now > 0;
  return std::fabs(now - before) > threshold * before;
}

std::string Fmt(double v) { return absl::StrFormat("%.3g", v); }

// E[max(0, X)] for X normal with mean `mean` and standard deviation `sd` (max(0, mean) for
// sd = 0).
double ExpectedPositivePart(double mean, double sd) {
  if (!(sd > 0)) return std::max(0.0, mean);
  const double z = mean / sd;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
  return mean * cdf + sd * pdf;
}

}  // namespace

const char* DecisionKindName(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kInitial:
      return "initial";
    case DecisionKind::kKeep:
      return "keep";
    case DecisionKind::kAdjustRatio:
      return "adjust_ratio";
    case DecisionKind::kRecalibrate:
      return "recalibrate";
    case DecisionKind::kReplan:
      return "replan";
    case DecisionKind::kRollback:
      return "rollback";
    case DecisionKind::kTrial:
      return "trial";
  }
  return "keep";
}

nlohmann::json ToJson(const TimelineEntry& e) {
  nlohmann::json plan = ToJson(e.plan);
  plan.erase("candidates");  // the timeline keeps the decision, not every candidate
  return nlohmann::json{
      {"t_s", e.t_s}, {"kind", DecisionKindName(e.kind)}, {"reason", e.reason}, {"plan", plan}};
}

PlannerOptions ClosedLoopPlannerOptions() {
  PlannerOptions o;
  o.min_gain = kMinRateGap;
  return o;
}

Controller::Controller(Profile profile, ControllerOptions options)
    : profile_(std::move(profile)),
      options_(std::move(options)),
      receive_measured_(profile_.costs.receive_measured) {}

PlannerOptions Controller::PlannerNow() const {
  PlannerOptions po = options_.planner;
  if (!receive_measured_ && options_.unmeasured_receive_min_gain > po.min_gain) {
    po.min_gain = options_.unmeasured_receive_min_gain;
    po.min_gain_why =
        "receiving is not measured on this trainer yet, and its default may be far off: a "
        "smaller gain is tried while the stall lasts";
  }
  return po;
}

Profile Controller::effective_profile() const {
  Profile p = profile_;
  p.trainer_cpu_budget *= trainer_factor_;
  for (WorkerProfile& w : p.workers) {
    auto it = worker_factor_.find(w.address);
    if (it == worker_factor_.end()) continue;
    w.cpu_budget *= it->second;
    if (w.link_bytes_per_s > 0) w.link_bytes_per_s *= it->second;
    if (w.storage_bytes_per_s > 0) w.storage_bytes_per_s *= it->second;
  }
  return p;
}

TimelineEntry Controller::Record(double t, DecisionKind kind, std::string reason) {
  TimelineEntry e{t, kind, std::move(reason), plan_};
  if (kind != DecisionKind::kKeep) {
    timeline_.push_back(e);
    timeline_.back().plan.candidates.clear();
  }
  return e;
}

bool SamePlacement(const Plan& a, const Plan& b, double ratio_tolerance) {
  if (!a.offload || !b.offload) return a.offload == b.offload;
  return a.cut == b.cut && a.read_mode == b.read_mode && a.codec == b.codec &&
         a.worker_addresses == b.worker_addresses && a.local_spill_over == b.local_spill_over &&
         std::fabs(a.ratio - b.ratio) <= ratio_tolerance;
}

bool SameShape(const Plan& a, const Plan& b) {
  return a.offload && b.offload && a.cut == b.cut && a.read_mode == b.read_mode &&
         a.codec == b.codec && a.worker_addresses == b.worker_addresses;
}

void Controller::RateStats::Add(double rate) {
  ++n;
  sum += rate;
  sum_sq += rate * rate;
}

double Controller::RateStats::StdDev() const {
  if (n < 2) return 0;
  const double mean = Mean();
  return std::sqrt(std::max(0.0, (sum_sq - n * mean * mean) / (n - 1)));
}

double Controller::RateStats::StdErr() const { return n < 2 ? 0 : StdDev() / std::sqrt(n); }

Controller::Beliefs Controller::CurrentBeliefs() const {
  return Beliefs{profile_, trainer_factor_, worker_factor_};
}

double Controller::measured_samples_per_s() const {
  return current_ < tried_.size() ? tried_[current_].rate.Mean() : 0;
}

int Controller::measured_periods() const {
  return current_ < tried_.size() ? tried_[current_].rate.n : 0;
}

const Controller::Tried* Controller::Find(const Plan& plan) const {
  for (const Tried& t : tried_) {
    if (SamePlacement(t.plan, plan)) return &t;
  }
  return nullptr;
}

Controller::Tried* Controller::Find(const Plan& plan) {
  return const_cast<Tried*>(std::as_const(*this).Find(plan));
}

bool Controller::Differs(const RateStats& better, const RateStats& worse) const {
  if (better.n < options_.min_measured_periods || worse.n < options_.min_measured_periods) {
    return false;
  }
  // A lower bound above another rate is evidence; another rate above a lower bound is not.
  if (worse.lower_bound) return false;
  return Clears(better, worse, options_.noise_z * std::hypot(better.StdErr(), worse.StdErr()));
}

bool Controller::Clears(const RateStats& better, const RateStats& worse, double noise) const {
  const double gap = better.Mean() - worse.Mean();
  return gap > noise && gap > options_.min_rate_gap * better.Mean();
}

bool Controller::ClearlyFasterPooled(const RateStats& better, const RateStats& worse) const {
  if (better.n < options_.min_measured_periods || worse.n < 1 || worse.lower_bound) return false;
  const int dof = (better.n - 1) + (worse.n - 1);
  const double squares =
      std::pow(better.StdDev(), 2) * (better.n - 1) + std::pow(worse.StdDev(), 2) * (worse.n - 1);
  const double spread = std::sqrt(squares / dof);
  return Clears(better, worse,
                options_.noise_z * spread * std::sqrt(1.0 / better.n + 1.0 / worse.n));
}

const Controller::Tried* Controller::BetterMeasured() {
  if (current_ >= tried_.size()) return nullptr;
  const Tried* best = nullptr;
  for (size_t i = 0; i < tried_.size(); ++i) {
    if (i == current_ || !Differs(tried_[i].rate, tried_[current_].rate)) continue;
    if (best == nullptr || tried_[i].rate.Mean() > best->rate.Mean()) best = &tried_[i];
  }
  return best;
}

bool Controller::MeasuredWorse(const Plan& plan) {
  // All-local's steady rate measured since the checks, when there is one.
  double local_now = 0;
  const Tried* all_local = Find(Plan());  // every all-local plan is one placement
  if (all_local != nullptr && !all_local->rate.lower_bound &&
      all_local->rate.n >= options_.min_measured_periods) {
    local_now = all_local->rate.Mean();
  }
  if (!plan.offload && local_lost_check_) return true;
  for (const MeasuredPlan& lost : lost_to_local_) {
    if (SamePlacement(lost.plan, plan)) return true;
    // The same shape at another ratio or spill: the model's error for it, measured here,
    // holds there too. It is believed at the share of its prediction that the lost plan
    // delivered, and is worse unless that beats all-local as measured (in the check, or
    // since, whichever is higher). A re-fit that made all-local look faster had re-planned a
    // losing shape at a new ratio, and a run ended on it.
    if (SameShape(lost.plan, plan) && lost.plan.predicted_samples_per_s > 0) {
      const double delivered = lost.measured / lost.plan.predicted_samples_per_s;
      if (!(plan.predicted_samples_per_s * delivered > std::max(lost.local, local_now))) {
        return true;
      }
    }
  }
  const Tried* t = Find(plan);
  if (t == nullptr) return false;
  for (const Tried& other : tried_) {
    if (&other != t && Differs(other.rate, t->rate)) return true;
  }
  return false;
}

MeasuredPlan Controller::Measured(const Plan& plan, double measured, double local) const {
  MeasuredPlan loss{plan, measured, local, {}};
  for (const std::string& address : plan.worker_addresses) {
    double cpus = 0;
    for (const WorkerProfile& w : profile_.workers) {
      if (w.address == address) cpus = w.cpu_budget;
    }
    loss.worker_cpus.push_back(cpus);
  }
  return loss;
}

MeasuredPlan Controller::Lost(const Plan& plan, double measured, double local) const {
  MeasuredPlan loss = Measured(plan, measured, local);
  int before = 0;
  for (const std::vector<MeasuredPlan>* list : {&lost_to_local_, &retest_}) {
    for (const MeasuredPlan& l : *list) {
      if (SameShape(l.plan, plan)) before = std::max(before, l.times_lost);
    }
  }
  loss.times_lost = std::min(before + 1, kMaxTimesLost);
  return loss;
}

int RunsALossIsSkippedFor(int times_lost) {
  return 1 << (std::clamp(times_lost, 1, kMaxTimesLost) - 1);
}

void Controller::ForgetLosses(const Plan& plan) {
  const auto same = [&plan](const MeasuredPlan& l) { return SameShape(l.plan, plan); };
  std::erase_if(lost_to_local_, same);
  std::erase_if(retest_, same);
}

bool Controller::SameWorkers(const MeasuredPlan& measured) const {
  const Plan& plan = measured.plan;
  if (!plan.offload || plan.worker_addresses.empty() ||
      measured.worker_cpus.size() != plan.worker_addresses.size()) {
    return false;
  }
  for (size_t i = 0; i < plan.worker_addresses.size(); ++i) {
    const WorkerProfile* w = nullptr;
    for (const WorkerProfile& p : profile_.workers) {
      if (p.address == plan.worker_addresses[i]) w = &p;
    }
    // Budgets are told apart to 0.01 CPU, as the metric store's host key tells the
    // trainer's apart: a worker with another quota is another cluster.
    if (w == nullptr || absl::StrFormat("%.2f", w->cpu_budget) !=
                            absl::StrFormat("%.2f", measured.worker_cpus[i])) {
      return false;
    }
  }
  return true;
}

void Controller::Remember(const std::vector<MeasuredPlan>& earlier,
                          const std::optional<MeasuredPlan>& last_run) {
  for (const MeasuredPlan& loss : earlier) {
    if (!SameWorkers(loss)) continue;
    if (loss.runs_skipped < RunsALossIsSkippedFor(loss.times_lost)) {
      MeasuredPlan skipped = loss;
      ++skipped.runs_skipped;  // this run
      lost_to_local_.push_back(std::move(skipped));
    } else {
      retest_.push_back(loss);
    }
  }
  if (last_run.has_value() && SameWorkers(*last_run)) incumbent_ = last_run;
}

std::optional<MeasuredPlan> Controller::ended_on() const {
  if (!plan_.offload || checking_against_.has_value() || current_ >= tried_.size()) {
    return std::nullopt;
  }
  // The plan in force, or, while it has too few periods (a trial of its spill or a ratio step
  // that the run ended in), the best measured plan of its shape.
  const Tried* ended = &tried_[current_];
  if (ended->rate.n < options_.min_measured_periods) {
    ended = nullptr;
    for (const Tried& t : tried_) {
      if (SameShape(t.plan, plan_) && t.rate.n >= options_.min_measured_periods &&
          (ended == nullptr || t.rate.Mean() > ended->rate.Mean())) {
        ended = &t;
      }
    }
    if (ended == nullptr) return std::nullopt;
  }
  const double local = AllLocalReference();
  if (!(ended->rate.Mean() > local)) return std::nullopt;
  return Measured(ended->plan, ended->rate.Mean(), local);
}

double Controller::AllLocalReference(double* bound, double* predicted) const {
  const Tried* all_local = Find(Plan());  // every all-local plan is one placement
  const double start = all_local != nullptr && all_local->rate.n > 0 ? all_local->rate.Mean() : 0;
  const double model =
      EvaluateFixed(effective_profile(), Candidate{0}, 0, {}).predicted_samples_per_s;
  if (bound != nullptr) *bound = start;
  if (predicted != nullptr) *predicted = model;
  if (start > 0 && !all_local->rate.lower_bound) return start;
  return std::max(start, model);
}

std::vector<MeasuredPlan> Controller::losses() const {
  std::vector<MeasuredPlan> all = retest_;  // older than any loss of this run
  all.insert(all.end(), lost_to_local_.begin(), lost_to_local_.end());
  // A check the run ended in: the plan's measured rate against the higher of the all-local
  // rate it did not clearly beat and what all-local measured in the check so far.
  const Tried* offload = checking_against_.has_value() ? Find(*checking_against_) : nullptr;
  if (offload != nullptr && offload->rate.n > 0 && current_ < tried_.size()) {
    const Tried& local = tried_[current_];
    const double so_far = !local.plan.offload && local.rate.n > 0 ? local.rate.Mean() : 0;
    all.push_back(
        Lost(*checking_against_, offload->rate.Mean(), std::max(checking_reference_, so_far)));
  }
  // The shape the run ended on measured faster than all-local after any loss of it.
  if (const std::optional<MeasuredPlan> won = ended_on()) {
    std::erase_if(all, [&won](const MeasuredPlan& l) { return SameShape(l.plan, won->plan); });
  }
  // One per shape, the newest (so at most one per cut, read mode, codec and worker set), and
  // only these workers': a run keeps what its own cluster measured.
  std::vector<MeasuredPlan> out;
  for (const MeasuredPlan& l : all) {
    std::erase_if(out, [&l](const MeasuredPlan& o) { return SameShape(o.plan, l.plan); });
    out.push_back(l);
  }
  return out;
}

void Controller::NoteDecision(const Plan& was, const Beliefs& before, const TimelineEntry& entry) {
  if (world_changed_) {
    // Offloading rates measured in another world say nothing about this one. All-local's
    // stays: it depends on the trainer and the pipeline alone, which no world change here
    // touches (workers, their budgets and links; a step change moves demand, and a stalled
    // all-local rate is what the trainer can make).
    world_changed_ = false;
    std::erase_if(tried_, [](const Tried& t) { return t.plan.offload; });
    current_ = tried_.size();
    trials_ = 0;
    spill_measured_ = false;
    checking_against_.reset();
    lost_to_local_.clear();
    retest_.clear();
    local_lost_check_ = false;
  } else if (current_ < tried_.size() && entry.kind != DecisionKind::kKeep &&
             !SamePlacement(was, plan_)) {
    tried_[current_].beliefs = before;
  }
  if (current_ < tried_.size() && SamePlacement(tried_[current_].plan, plan_)) {
    tried_[current_].plan = plan_;
    return;
  }
  for (size_t i = 0; i < tried_.size(); ++i) {
    if (SamePlacement(tried_[i].plan, plan_)) {
      current_ = i;
      tried_[i].plan = plan_;
      return;
    }
  }
  tried_.emplace_back(plan_, CurrentBeliefs());
  current_ = tried_.size() - 1;
}

TimelineEntry Controller::Start(double t_s, std::optional<double> local_samples_per_s) {
  started_ = true;
  const Beliefs before = CurrentBeliefs();
  tried_.clear();
  if (local_samples_per_s.has_value() && *local_samples_per_s > 0) {
    Tried local(PlanNone(effective_profile(), "all local, as measured before the first plan"),
                before);
    for (int i = 0; i < options_.min_measured_periods; ++i) local.rate.Add(*local_samples_per_s);
    local.rate.lower_bound = true;
    tried_.push_back(std::move(local));
  }
  current_ = tried_.size();
  const Plan was;
  // The model's all-local rate is not under what all-local measured: the window before the
  // first plan is a lower bound of its steady rate. Costs from the metric store were taken
  // in an earlier run, where local samples shared the trainer with receiving (each cost it
  // 18-43% more on random-17), and predicted all-local at 0.72-0.95 of the rate measured at
  // the start; planned from them, a plan that holds the trainer to its share (spill=workers)
  // gave it too small a share and left it idle waiting for the workers'. The trainer's
  // local costs (its ops, batching and the engine's stages) are scaled until the prediction
  // meets the measured rate (a floor: a start window slower than the model says nothing,
  // its start-up is in it). The costs, not the trainer's CPU: its CPU is a quota read
  // exactly, the ops' costs are what was measured elsewhere, and the workers run the same
  // ops. Scaling the CPU instead had left the workers charged the stored costs: on the
  // demo's testbed, stored op costs twice the start window's put its worker at 684 us a
  // sample where it took about 380, and the plan kept 46% of the samples on the trainer.
  std::string floored;
  if (local_samples_per_s.has_value() && *local_samples_per_s > 0) {
    const Evaluation local = EvaluateFixed(effective_profile(), Candidate{0}, 0, {});
    if (local.feasible && local.trainer_bound == Bound::kTrainerCpu &&
        local.predicted_samples_per_s > 0 && local.predicted_samples_per_s < *local_samples_per_s) {
      const double scale =
          std::max(local.predicted_samples_per_s / *local_samples_per_s, kMinFactor);
      profile_.costs.ScaleLocalCpu(scale);
      floored = absl::StrCat(
          "; the ops' costs (here and on workers without their own) and the trainer's local "
          "costs scaled by ",
          absl::StrFormat("%.2f", scale),
          " to meet the all-local rate measured (", FormatRate(local.predicted_samples_per_s),
          " samples/s predicted)");
    }
  }
  const Profile eff = effective_profile();
  PlannerOptions po = PlannerNow();
  if (incumbent_.has_value()) {
    po.incumbent =
        Candidate{incumbent_->plan.cut, incumbent_->plan.read_mode, incumbent_->plan.codec};
    po.incumbent_margin = options_.switch_margin;
    po.incumbent_spill_over = incumbent_->plan.local_spill_over;
  }
  plan_ = PlanSluice(eff, po);
  // A shape an earlier run measured no faster than all-local on these workers is not the
  // start: the next best is (each shape once; the candidates are finite).
  std::vector<std::string> skipped;
  const size_t candidates = plan_.candidates.size();
  while (plan_.offload && MeasuredWorse(plan_) && skipped.size() < candidates) {
    skipped.push_back(plan_.PolicyString());
    po.excluded.push_back({Candidate{plan_.cut, plan_.read_mode, plan_.codec},
                           "measured no faster than all-local with these workers before"});
    plan_ = PlanSluice(eff, po);
  }
  spill_measured_ = plan_.offload && plan_.local_spill_over && po.incumbent_spill_over &&
                    incumbent_.has_value() && SameShape(plan_, incumbent_->plan);
  last_change_t_ = t_s;
  std::string reason = plan_.offload ? absl::StrCat("initial plan: ", plan_.PolicyString())
                                     : "initial plan: no offload";
  if (!skipped.empty()) {
    absl::StrAppend(&reason, " (the model's ", absl::StrJoin(skipped, " and then "),
                    " measured no faster than all-local with these workers in an earlier run)");
  }
  for (const MeasuredPlan& r : retest_) {
    if (plan_.offload && SameShape(plan_, r.plan)) {
      absl::StrAppend(&reason, " (a retest: its shape measured no faster than all-local ",
                      r.times_lost == 1 ? "once" : absl::StrCat(r.times_lost, " times in a row"),
                      " in earlier runs with these workers, and ", r.runs_skipped,
                      r.runs_skipped == 1 ? " run" : " runs", " since skipped it)");
    }
  }
  absl::StrAppend(&reason, floored);
  if (incumbent_.has_value() && SameShape(plan_, incumbent_->plan)) {
    absl::StrAppend(&reason, " (the shape an earlier run ended on with these workers, ",
                    FormatRate(incumbent_->measured), " samples/s against all-local's ",
                    FormatRate(incumbent_->local), ")");
  }
  TimelineEntry e = Record(t_s, DecisionKind::kInitial, reason);
  NoteDecision(was, before, e);
  return e;
}

ModelOptions Controller::Model() const {
  ModelOptions model;
  model.allow_after_batch = options_.planner.allow_after_batch;
  model.max_message_bytes = options_.planner.max_message_bytes;
  return model;
}

Evaluation Controller::PredictCurrent(const Profile& profile) const {
  if (!plan_.offload) return EvaluateFixed(profile, Candidate{0}, 0, {});
  // A ratio rounded up to full offload leaves the trainer whatever the workers cannot take
  // (spill-over): the model's re-balanced optimum for the candidate, not a fixed split. A
  // trainer that keeps to its share, or a ratio of exactly 1, gets no spill-over.
  if (plan_.local_spill_over && plan_.ratio >= options_.planner.full_offload_above &&
      plan_.ratio < 1) {
    return Evaluate(profile, Candidate{plan_.cut, plan_.read_mode, plan_.codec}, Model());
  }
  return PredictAt(profile, plan_.ratio);
}

Evaluation Controller::PredictAt(const Profile& profile, double ratio) const {
  const Candidate candidate{plan_.cut, plan_.read_mode, plan_.codec};
  // EvaluateFixed normalizes the shares: their proportions are what carries over.
  Evaluation fixed = EvaluateFixed(profile, candidate, ratio, plan_.worker_shares, Model());
  // A trainer held to its share caps only itself: the workers take splits past their shares
  // whenever they ask (runtime/coordinator.h). At a ratio up to the candidate's re-balanced
  // optimum the trainer's cap does not bind, the workers fill their capacity and the trainer
  // its CPU, and the rate is that optimum's; above it the workers bind first and the held
  // trainer idles at its cap, as the fixed split says.
  if (!plan_.local_spill_over && ratio > 0 && ratio < 1) {
    Evaluation best = Evaluate(profile, candidate, Model());
    if (best.feasible && ratio <= best.ratio()) return best;
  }
  return fixed;
}

std::optional<std::string> Controller::AbsorbWorldChanges(const Measurement& m) {
  std::vector<std::string> reasons;
  // A stalled loop waits on its data, and a trainer short of CPU wakes late from its step
  // (a sleeping accelerator, a throttled cgroup): a longer step seen while stalled is the
  // trainer's own load, not a slower accelerator, and believing it would cut the demand
  // the plan aims at. It counts once the stall is gone; a shorter step counts at once.
  const bool longer_while_stalled = profile_.consumer.step_s > 0 &&
                                    m.step_s > profile_.consumer.step_s &&
                                    m.stall_fraction > options_.stall_high;
  if (m.step_s > 0 && !longer_while_stalled &&
      Changed(m.step_s, profile_.consumer.step_s, options_.change_threshold)) {
    reasons.push_back(profile_.consumer.step_s > 0
                          ? absl::StrCat("accelerator step ",
                                         FormatSeconds(profile_.consumer.step_s), " -> ",
                                         FormatSeconds(m.step_s))
                          : absl::StrCat("accelerator step measured: ", FormatSeconds(m.step_s)));
    profile_.consumer.step_s = m.step_s;
  }
  std::map<std::string, const WorkerMeasurement*> present;
  std::set<std::string> drained;
  for (const WorkerMeasurement& w : m.workers) {
    if (w.connected) present[w.address] = &w;
    if (!w.connected && w.drained) drained.insert(w.address);
  }
  std::vector<WorkerProfile> kept;
  for (WorkerProfile& w : profile_.workers) {
    auto it = present.find(w.address);
    if (it == present.end()) {
      reasons.push_back(absl::StrCat("worker ", w.address,
                                     drained.count(w.address) > 0 ? " left (drained)" : " left"));
      worker_factor_.erase(w.address);
      slow_since_.erase(w.address);
      fresh_worker_ops_.erase(w.address);
      continue;
    }
    const WorkerMeasurement& wm = *it->second;
    if (wm.cpu_budget > 0 && Changed(wm.cpu_budget, w.cpu_budget, options_.change_threshold)) {
      reasons.push_back(absl::StrCat("worker ", w.address, "'s CPU budget ", Fmt(w.cpu_budget),
                                     " -> ", Fmt(wm.cpu_budget)));
      w.cpu_budget = wm.cpu_budget;
      worker_factor_.erase(w.address);  // a new budget starts a new calibration
    }
    if (wm.link_bytes_per_s > 0) {
      if (w.link_bytes_per_s > 0 &&
          Changed(wm.link_bytes_per_s, w.link_bytes_per_s, options_.change_threshold)) {
        reasons.push_back(absl::StrCat("worker ", w.address, "'s link ",
                                       FormatBytes(w.link_bytes_per_s), "/s -> ",
                                       FormatBytes(wm.link_bytes_per_s), "/s"));
      }
      w.link_bytes_per_s = wm.link_bytes_per_s;
    }
    kept.push_back(std::move(w));
    present.erase(it);
  }
  for (const WorkerMeasurement& wm : m.workers) {
    if (!wm.connected || present.find(wm.address) == present.end()) continue;
    WorkerProfile w;
    w.address = wm.address;
    w.cpu_budget = wm.cpu_budget;
    w.link_bytes_per_s = wm.link_bytes_per_s;
    w.has_storage = wm.has_storage;
    w.ops = wm.ops;
    reasons.push_back(absl::StrCat("worker ", w.address, " joined (", Fmt(w.cpu_budget), " CPU)"));
    kept.push_back(std::move(w));
    present.erase(wm.address);
  }
  profile_.workers = std::move(kept);
  if (reasons.empty()) return std::nullopt;
  return absl::StrJoin(reasons, "; ");
}

void Controller::AbsorbFreshCosts(const Measurement& m) {
  if (!m.local_ops.empty()) fresh_local_ops_ = m.local_ops;
  for (const WorkerMeasurement& w : m.workers) {
    if (!w.ops.empty()) fresh_worker_ops_[w.address] = w.ops;
  }
  bool local_changed = false;
  for (const OpCost& op : fresh_local_ops_) {
    if (op.position < 0 || op.position >= profile_.num_ops()) continue;
    OpCost& known = profile_.costs.ops[op.position];
    if (op.cpu_s_per_sample > 0) known.cpu_s_per_sample = op.cpu_s_per_sample;
    if (op.bytes_out_per_sample > 0) known.bytes_out_per_sample = op.bytes_out_per_sample;
    local_changed = true;
  }
  // Fresh costs replace what the trainer's calibration factor was standing in for (and the
  // ops' costs the start floor scaled; batching and the engine's stages, which nothing
  // measures afresh, keep the floor's scale). A
  // worker's factor stays: its per-op costs leave out what it spends sending (and a slower
  // quota), which is what the factor measured; a new CPU budget resets it.
  if (local_changed) trainer_factor_ = 1;
  for (WorkerProfile& w : profile_.workers) {
    auto it = fresh_worker_ops_.find(w.address);
    if (it == fresh_worker_ops_.end()) continue;
    w.ops = it->second;
  }
  fresh_local_ops_.clear();
  fresh_worker_ops_.clear();
}

bool Controller::TrainerSaturated(const Measurement& m) const {
  // CPU time is counted exactly; what a quota lets a process use over one period moves by
  // the scheduler's granularity, so "all of it" is read within the model's own tolerance.
  return m.trainer_cpu_busy > 0 && m.trainer_cpu_busy >= 1 - options_.mismatch_tolerance;
}

void Controller::Calibrate(const Measurement& m) {
  const Profile eff = effective_profile();
  const Evaluation cur = PredictCurrent(eff);
  if (!(cur.predicted_samples_per_s > 0) || !(m.samples_per_s > 0)) return;
  // Per worker: delivered / predicted flow (only workers that were meant to take samples).
  std::map<std::string, double> worker_ratio;
  for (const WorkerFlow& f : cur.workers) {
    if (!(f.samples_per_s > 0)) continue;
    for (const WorkerMeasurement& wm : m.workers) {
      if (wm.address == f.address) {
        worker_ratio[f.address] = wm.delivered_samples_per_s / f.samples_per_s;
      }
    }
  }
  bool workers_short = false;
  for (const auto& [address, ratio] : worker_ratio) workers_short |= ratio < 0.95;
  // The remote side is blamed only if it binds and its workers did deliver less, while the
  // trainer had CPU to take more from them.
  if (plan_.offload && cur.remote_bound != Bound::kNone && workers_short &&
      !TrainerSaturated(m)) {
    for (const auto& [address, ratio] : worker_ratio) {
      if (!(ratio > 0)) continue;
      double& factor = worker_factor_.try_emplace(address, 1.0).first->second;
      factor = std::clamp(factor * ratio, kMinFactor, kMaxFactor);
    }
    return;
  }
  // Demand bound and delivering more than predicted is noise in the step time, not costs.
  if (cur.trainer_bound == Bound::kDemand && m.samples_per_s > cur.predicted_samples_per_s) {
    return;
  }
  trainer_factor_ = std::clamp(trainer_factor_ * m.samples_per_s / cur.predicted_samples_per_s,
                               kMinFactor, kMaxFactor);
}

void Controller::Replan(double t, const std::string& why, bool must_adopt, TimelineEntry* out,
                        const Beliefs* reading_before) {
  const Profile eff = effective_profile();
  PlannerOptions po = PlannerNow();
  if (plan_.offload) po.require_stall = false;
  Plan next = PlanSluice(eff, po);
  // Spill-over taken on a measurement (an idle held trainer, or the plan a run ended on) is
  // not undone by a re-plan of the same shape: a new reading moves the ratio, and the model
  // that chose the held share is what the measurement refuted.
  if (spill_measured_ && !world_changed_ && plan_.offload && plan_.local_spill_over &&
      next.offload && !next.local_spill_over && SameShape(next, plan_)) {
    next.local_spill_over = true;
  }
  mismatch_since_.reset();
  stall_since_.reset();
  slow_since_.clear();
  if (must_adopt) {
    plan_ = std::move(next);
    last_change_t_ = t;
    *out =
        Record(t, DecisionKind::kReplan, absl::StrCat(why, ": re-planned: ", plan_.PolicyString()));
    return;
  }
  const Evaluation cur = PredictCurrent(eff);
  const double cur_rate = cur.feasible ? cur.predicted_samples_per_s : 0;
  if (!SamePlacement(next, plan_) && MeasuredWorse(next)) {
    std::string dropped;
    if (reading_before != nullptr) {
      profile_ = reading_before->profile;
      trainer_factor_ = reading_before->trainer_factor;
      worker_factor_ = reading_before->worker_factor;
      dropped = "; the reading is not kept";
    }
    const Evaluation now = PredictCurrent(effective_profile());
    plan_.predicted_samples_per_s = now.feasible ? now.predicted_samples_per_s : 0;
    last_change_t_ = t;
    *out = Record(t, DecisionKind::kRecalibrate,
                  absl::StrCat(why, "; kept ", plan_.PolicyString(), ": the model's best, ",
                               next.PolicyString(), ", already measured worse here", dropped));
    return;
  }
  const bool better = next.predicted_samples_per_s > cur_rate * (1 + options_.switch_margin);
  const bool offload_pointless =
      plan_.offload && !next.offload && next.predicted_samples_per_s >= cur_rate;
  if (better || offload_pointless) {
    const std::string before = plan_.PolicyString();
    plan_ = std::move(next);
    last_change_t_ = t;
    *out = Record(t, DecisionKind::kRecalibrate,
                  absl::StrCat(why, "; new plan ", plan_.PolicyString(), " predicts ",
                               FormatRate(plan_.predicted_samples_per_s), " samples/s against ",
                               FormatRate(cur_rate), " for ", before));
    return;
  }
  plan_.predicted_samples_per_s = cur_rate;
  last_change_t_ = t;
  *out = Record(t, DecisionKind::kRecalibrate,
                absl::StrCat(why, "; kept ", plan_.PolicyString(), " (now predicts ",
                             FormatRate(cur_rate), " samples/s; the best alternative ",
                             FormatRate(next.predicted_samples_per_s), ")"));
}

void SetReceiveCost(Costs* costs, double cpu_s_per_byte) {
  double before = 0;
  for (const CodecCost& c : costs->codecs) {
    if (c.codec == Codec::kNone) before = c.trainer_cpu_s_per_byte;
  }
  for (CodecCost& c : costs->codecs) {
    c.trainer_cpu_s_per_byte = c.codec == Codec::kNone
                                   ? cpu_s_per_byte
                                   : std::max(0.0, c.trainer_cpu_s_per_byte + cpu_s_per_byte - before);
  }
}

namespace {

// Sets a receive reading (per element, fitted at `cut`; per payload byte) into `costs` and
// says what changed, for a decision's reason ("X us per element (was Y)", ...).
std::vector<std::string> SetReceiveReading(Costs* costs, std::optional<double> cpu_s_per_element,
                                           std::optional<double> cpu_s_per_byte, int cut) {
  std::vector<std::string> what;
  if (cpu_s_per_element.has_value()) {
    what.push_back(absl::StrCat(Fmt(*cpu_s_per_element * 1e6), " us per element (was ",
                                Fmt(costs->recv_cpu_s_per_sample * 1e6), ")"));
    costs->recv_cpu_s_per_sample = *cpu_s_per_element;
    // Fitted at that cut (an element-wise one: a fit per element is taken only there): what
    // the model needs to carry it to other cuts.
    costs->recv_fit_bytes_per_element = BytesAtCut(*costs, cut);
  }
  if (cpu_s_per_byte.has_value()) {
    double before = 0;
    if (std::optional<CodecCost> none = costs->CostOf(Codec::kNone)) {
      before = none->trainer_cpu_s_per_byte;
    }
    what.push_back(absl::StrCat(Fmt(*cpu_s_per_byte * 1e9), " ns per byte (was ",
                                Fmt(before * 1e9), ")"));
    SetReceiveCost(costs, *cpu_s_per_byte);
    // The bytes' part is measured now: the per-element figure is read per element only.
    if (!cpu_s_per_element.has_value()) costs->recv_fit_bytes_per_element = 0;
  }
  return what;
}

// The trainer's receive CPU per sample offloaded under `plan`, as `costs` charge it.
double ReceiveCpuPerSample(const Profile& profile, const Costs& costs, const Plan& plan) {
  Profile p = profile;
  p.costs = costs;
  return Evaluate(p, Candidate{plan.cut, plan.read_mode, plan.codec})
      .trainer_cpu_s_per_offloaded_sample;
}

}  // namespace

TimelineEntry Controller::RecalibrateReceive(double t_s, std::optional<double> cpu_s_per_element,
                                             std::optional<double> cpu_s_per_byte) {
  if (!started_) Start(t_s);
  const Plan was = plan_;
  const Beliefs before = CurrentBeliefs();
  receive_measured_ = true;
  const std::vector<std::string> what =
      SetReceiveReading(&profile_.costs, cpu_s_per_element, cpu_s_per_byte, plan_.cut);
  TimelineEntry out;
  Replan(t_s,
         absl::StrCat("receiving, measured on the whole trainer process, costs ",
                      absl::StrJoin(what, " and ")),
         /*must_adopt=*/false, &out, &before);
  NoteDecision(was, before, out);
  return out;
}

std::optional<TimelineEntry> Controller::RecalibrateWorkerCpu(
    double t_s, const std::vector<WorkerCpuReading>& readings) {
  if (!started_) Start(t_s);
  const Plan was = plan_;
  const Beliefs before = CurrentBeliefs();
  const std::optional<std::string> what = FitWorkerCpu(readings);
  if (!what.has_value()) return std::nullopt;
  TimelineEntry out;
  Replan(t_s, *what, /*must_adopt=*/false, &out, &before);
  NoteDecision(was, before, out);
  return out;
}

std::optional<std::string> Controller::FitWorkerCpu(const std::vector<WorkerCpuReading>& readings) {
  if (!started_ || !plan_.offload) return std::nullopt;
  const Profile eff = effective_profile();
  const Evaluation cur = PredictCurrent(eff);
  // Sums over the samples the readings span: measured and modeled CPU, and the gap at speed
  // factor 1 (what Costs::worker_cpu_s_per_sample is charged at).
  double samples = 0;
  double measured = 0;
  double modeled = 0;
  double gap = 0;
  for (const WorkerCpuReading& r : readings) {
    if (!(r.cpu_s_per_sample > 0) || r.samples <= 0) continue;
    for (size_t i = 0; i < cur.workers.size() && i < eff.workers.size(); ++i) {
      const WorkerFlow& f = cur.workers[i];
      if (f.address != r.address || !(f.cpu_s_per_sample > 0)) continue;
      const double speed = eff.workers[i].speed_factor > 0 ? eff.workers[i].speed_factor : 1;
      const double n = static_cast<double>(r.samples);
      samples += n;
      measured += n * r.cpu_s_per_sample;
      modeled += n * f.cpu_s_per_sample;
      gap += n * (r.cpu_s_per_sample - f.cpu_s_per_sample) * speed;
    }
  }
  if (!(samples > 0) || !(modeled > 0)) return std::nullopt;
  // What this window alone says, counted into the mean of every window read so far (here and,
  // through the metric store, in earlier runs): a worker's CPU per sample moves by ~10% from
  // run to run, and a belief replaced by each reading flipped between them.
  Costs& costs = profile_.costs;
  const double old = costs.worker_cpu_s_per_sample;
  const double reading = std::max(0.0, old + gap / samples);
  costs.worker_cpu_s_per_sample = old + (reading - old) / (costs.worker_cpu_readings + 1);
  ++costs.worker_cpu_readings;
  if (std::fabs(measured / modeled - 1) <= options_.mismatch_tolerance ||
      costs.worker_cpu_s_per_sample == old) {
    return std::nullopt;
  }
  return absl::StrCat(
      "workers, measured on their whole process, take ", Fmt(measured / samples * 1e3),
      " ms of CPU per sample against ", Fmt(modeled / samples * 1e3),
      " ms modeled: ", Fmt(costs.worker_cpu_s_per_sample * 1e6), " us a sample of their own (",
      Fmt(reading * 1e6), " in this reading, the mean of ", costs.worker_cpu_readings, "; was ",
      Fmt(old * 1e6), ")");
}

std::string Controller::KeepReceiveCostOfLoss(const Plan& lost, const ReceiveReading& reading) {
  if (!lost.offload || (!reading.cpu_s_per_element && !reading.cpu_s_per_byte)) return "";
  // Measured either way: a cheaper reading leaves the belief as an upper bound of it.
  receive_measured_ = true;
  Costs raised = profile_.costs;
  const std::vector<std::string> what =
      SetReceiveReading(&raised, reading.cpu_s_per_element, reading.cpu_s_per_byte, lost.cut);
  // Only a dearer reading explains the loss; a cheaper one is not why the plan lost, and a
  // belief is not lowered on a plan that measured worse.
  if (!(ReceiveCpuPerSample(profile_, raised, lost) >
        ReceiveCpuPerSample(profile_, profile_.costs, lost))) {
    return "";
  }
  profile_.costs = raised;
  // The all-local plan's own beliefs too: a later return to it restores them.
  if (Tried* now = Find(plan_)) now->beliefs.profile.costs = raised;
  return absl::StrCat("; receiving measured ", absl::StrJoin(what, " and "),
                      " on the whole trainer process while it ran: kept");
}

TimelineEntry Controller::Observe(const Measurement& m) {
  if (!started_) Start(m.t_s);
  const Plan was = plan_;
  const Beliefs before = CurrentBeliefs();
  TimelineEntry out = Decide(m);
  NoteDecision(was, before, out);
  return out;
}

std::optional<TimelineEntry> Controller::MaybeRollback(const Measurement& m) {
  const double t = m.t_s;
  const Tried* better = BetterMeasured();
  if (better == nullptr) return std::nullopt;
  const Tried& cur = tried_[current_];
  const std::string left = plan_.PolicyString();
  const double left_rate = cur.rate.Mean();
  const int left_n = cur.rate.n;
  // Back to the better plan and to what was believed when it ran: the readings that led
  // away from it produced a worse plan, so they are not kept.
  const Beliefs restore = better->beliefs;
  const Plan back = better->plan;
  const double back_rate = better->rate.Mean();
  // An offload measured under all-local (even under the start-up's lower bound of it) lost to
  // all-local as surely as in a check: kept with the losses for this world and the next run.
  const Plan lost = plan_;
  if (plan_.offload && !back.offload) {
    lost_to_local_.push_back(Lost(plan_, left_rate, back_rate));
  }
  profile_ = restore.profile;
  trainer_factor_ = restore.trainer_factor;
  worker_factor_ = restore.worker_factor;
  plan_ = back;
  if (!plan_.local_spill_over) spill_measured_ = false;
  last_change_t_ = t;
  mismatch_since_.reset();
  stall_since_.reset();
  slow_since_.clear();
  const std::string kept = back.offload ? "" : KeepReceiveCostOfLoss(lost, m.receive);
  return Record(t, DecisionKind::kRollback,
                absl::StrCat(left, " measured ", FormatRate(left_rate), " samples/s over ", left_n,
                             " periods, under the ", FormatRate(back_rate), " of ",
                             plan_.PolicyString(), ": back to it", kept));
}

std::optional<TimelineEntry> Controller::MaybeLocalCheck(const Measurement& m) {
  const double t = m.t_s;
  if (!plan_.offload || checking_against_.has_value() || current_ >= tried_.size()) {
    return std::nullopt;
  }
  const Tried& cur = tried_[current_];
  if (cur.rate.n < options_.min_measured_periods) return std::nullopt;
  const Tried* local = Find(Plan());
  // All-local measured in steady state: the rollback rule compares the two.
  if (local != nullptr && !local->rate.lower_bound && local->rate.n > 0) return std::nullopt;
  // Two estimates of all-local's steady rate: the start window (a lower bound, its start-up
  // included; absent when nothing ran before the first plan) and the model. The offloading
  // plan needs no check when its measured rate clears both by the noise of its periods and
  // by what a period resolves (the rule `Differs` applies to two measured plans).
  double bound = 0;
  double predicted = 0;
  const double reference = AllLocalReference(&bound, &predicted);
  const double mean = cur.rate.Mean();
  const double gap = mean - reference;
  if (reference > 0 && gap > options_.min_rate_gap * mean) {
    if (gap > options_.noise_z * cur.rate.StdErr()) return std::nullopt;
    // Over both estimates by more than a period resolves, but within the noise of too few
    // periods: more of them resolve it, at no cost while the offload is the better plan, which
    // its measured rate says. It keeps running while the periods the gap needs (the noise
    // shrinks with their square root) are no more than the check would spend: as many as it
    // has, measured on all-local instead (min_measured_periods after its settle).
    const double needed = std::pow(options_.noise_z * cur.rate.StdDev() / gap, 2);
    const int most = 2 * options_.min_measured_periods;
    if (cur.rate.n < most && needed <= most) return std::nullopt;
  }
  // In a run about to end, a check may cost more than it can gain.
  if (m.remaining_s.has_value() && m.period_s > 0) {
    const double check_s = options_.settle_s + options_.min_measured_periods * m.period_s;
    if (!CheckPaysBack(cur.rate, reference, *m.remaining_s, check_s)) return std::nullopt;
  }
  checking_against_ = plan_;
  checking_receive_ = m.receive;
  checking_reference_ = reference;
  const std::string busy = cur.trainer_busy.n > 0
                               ? absl::StrCat(", the trainer using ",
                                              FormatPercent(cur.trainer_busy.Mean()), " of its CPU")
                               : "";
  const std::string left = plan_.PolicyString();
  plan_ = local != nullptr ? local->plan : PlanNone(effective_profile(), "all local (a check)");
  last_change_t_ = t;
  stall_since_.reset();
  mismatch_since_.reset();
  slow_since_.clear();
  return Record(t, DecisionKind::kTrial,
                absl::StrCat(left, " measured ", FormatRate(mean), " samples/s over ", cur.rate.n,
                             " periods", busy, ", not clearly over all-local (", FormatRate(bound),
                             " measured while starting, ", FormatRate(predicted),
                             " predicted): all-local runs ", options_.min_measured_periods,
                             " periods as a check"));
}

bool Controller::CheckPaysBack(const RateStats& offload, double reference, double remaining_s,
                               double check_s) const {
  const double gap = offload.Mean() - reference;
  const double sd = offload.StdDev() * std::sqrt(1.0 / std::max(1, offload.n) + 1.0);
  // All-local's lead counts from the switch's settle on: before that the new plan does not run
  // at its rate (the premise of settle_s), and a switch in a run's last seconds only costs.
  const double gain =
      ExpectedPositivePart(-gap, sd) * std::max(0.0, remaining_s - options_.settle_s);
  const double cost = ExpectedPositivePart(gap, sd) * std::clamp(remaining_s, 0.0, check_s);
  return gain > cost;
}

std::optional<TimelineEntry> Controller::MaybeEndLocalCheck(double t) {
  if (!checking_against_.has_value() || current_ >= tried_.size()) return std::nullopt;
  const Tried& local = tried_[current_];
  if (local.plan.offload) {  // another decision ended the check
    checking_against_.reset();
    return std::nullopt;
  }
  if (local.rate.lower_bound || local.rate.n < 1) return std::nullopt;
  const Tried* offload = Find(*checking_against_);
  // All-local runs its min_measured_periods settled periods, unless it already measures
  // clearly under the offload: while it runs the check costs what the offload would deliver
  // more, and once the evidence is decisive more periods only add to that cost (a run of the
  // randomized suite spent 5 s of its 12.5 on a check whose first all-local period was 17%
  // under the offload). The other way round there is no hurry: all-local is then the
  // better plan, and runs its periods at no cost.
  const bool decided = offload != nullptr && ClearlyFasterPooled(offload->rate, local.rate);
  if (local.rate.n < options_.min_measured_periods && !decided) return std::nullopt;
  const Plan against = *checking_against_;
  checking_against_.reset();
  if (offload == nullptr) return std::nullopt;
  const double local_rate = local.rate.Mean();
  const double offload_rate = offload->rate.Mean();
  if (!(offload_rate > local_rate)) {
    // Measured no better: all-local stays, and the plan is not adopted again in this world.
    lost_to_local_.push_back(Lost(against, offload_rate, local_rate));
    const std::string kept = KeepReceiveCostOfLoss(against, checking_receive_);
    return Record(t, DecisionKind::kRollback,
                  absl::StrCat("all-local check: all-local measured ", FormatRate(local_rate),
                               " samples/s against ", FormatRate(offload_rate), " for ",
                               against.PolicyString(), ": all-local stays", kept));
  }
  ForgetLosses(against);
  local_lost_check_ = true;
  const Beliefs restore = offload->beliefs;
  profile_ = restore.profile;
  trainer_factor_ = restore.trainer_factor;
  worker_factor_ = restore.worker_factor;
  plan_ = offload->plan;
  last_change_t_ = t;
  stall_since_.reset();
  mismatch_since_.reset();
  slow_since_.clear();
  return Record(t, DecisionKind::kRollback,
                absl::StrCat("all-local check: ", plan_.PolicyString(), " measured ",
                             FormatRate(offload_rate), " samples/s against ",
                             FormatRate(local_rate), " all-local",
                             local.rate.n < options_.min_measured_periods
                                 ? absl::StrCat(" (clearly, after ", local.rate.n, " of ",
                                                options_.min_measured_periods, " periods)")
                                 : "",
                             ": back to it"));
}

std::optional<TimelineEntry> Controller::MaybeTrial(const Measurement& m) {
  if (trials_ >= options_.max_trials || profile_.workers.empty()) return std::nullopt;
  if (!stall_since_ || m.t_s - *stall_since_ < options_.sustain_s) return std::nullopt;
  PlannerOptions po = options_.planner;
  po.require_stall = false;
  po.min_gain = 0;
  Plan next = PlanSluice(effective_profile(), po);
  // While offloading, the ratio is the ratio steps' to tune: a trial tries another cut,
  // read mode, codec or worker set.
  if (!next.offload || SamePlacement(next, plan_, plan_.offload ? 1.0 : 0.025)) {
    return std::nullopt;
  }
  const Tried* known = Find(next);
  if (known != nullptr && known->rate.n >= options_.min_measured_periods) return std::nullopt;
  // Nor one that a check measured under all-local, or its shape at a ratio where the share of
  // its prediction it delivered does not beat all-local.
  if (MeasuredWorse(next)) return std::nullopt;
  // Worth a trial only where the model expects more than this plan measures.
  const double measured = measured_samples_per_s();
  if (!(next.predicted_samples_per_s > measured * (1 + options_.min_rate_gap))) {
    return std::nullopt;
  }
  ++trials_;
  const std::string before = plan_.PolicyString();
  plan_ = std::move(next);
  last_change_t_ = m.t_s;
  stall_since_.reset();
  mismatch_since_.reset();
  return Record(m.t_s, DecisionKind::kTrial,
                absl::StrCat("stall ", FormatPercent(m.stall_fraction), " under ", before,
                             " (measured ", FormatRate(measured), " samples/s): trying ",
                             plan_.PolicyString(), " (predicts ",
                             FormatRate(plan_.predicted_samples_per_s), "), trial ", trials_,
                             " of ", options_.max_trials));
}

TimelineEntry Controller::Decide(const Measurement& m) {
  const double t = m.t_s;
  profile_.consumer.stall_fraction = std::clamp(m.stall_fraction, 0.0, 1.0);

  // A changed world: re-plan at once, whatever the cool-down.
  if (std::optional<std::string> world = AbsorbWorldChanges(m)) {
    world_changed_ = true;
    AbsorbFreshCosts(m);
    TimelineEntry out;
    Replan(t, *world, /*must_adopt=*/true, &out);
    return out;
  }
  // The plan's own rate, once the streams have settled after the change.
  if (t - last_change_t_ >= options_.settle_s && m.samples_per_s > 0 &&
      current_ < tried_.size()) {
    Tried& cur = tried_[current_];
    if (cur.rate.lower_bound) cur.rate = RateStats{};  // a steady-state reading replaces it
    cur.rate.Add(m.samples_per_s);
    cur.stall.Add(std::clamp(m.stall_fraction, 0.0, 1.0));
    if (m.trainer_cpu_busy > 0) cur.trainer_busy.Add(m.trainer_cpu_busy);
  }
  if (std::optional<TimelineEntry> back = MaybeRollback(m)) return *back;
  if (std::optional<TimelineEntry> end = MaybeEndLocalCheck(t)) return *end;
  if (!m.local_ops.empty()) fresh_local_ops_ = m.local_ops;
  for (const WorkerMeasurement& w : m.workers) {
    if (!w.ops.empty()) fresh_worker_ops_[w.address] = w.ops;
  }
  // A held share whose trainer measured idle while the accelerator waited ran under a
  // refuted premise (rule 4's: that the trainer's CPU is the limit), so its rate is not what
  // its placement can do: the same placement with spill-over runs first, and a check against
  // all-local, if one is due, checks that plan.
  if (std::optional<TimelineEntry> spill = MaybeSpillOver(m)) return *spill;
  if (std::optional<TimelineEntry> check = MaybeLocalCheck(m)) return *check;
  if (std::optional<TimelineEntry> slow = MaybeSlowWorker(m)) return *slow;
  if (t - last_change_t_ < options_.cooldown_s) {
    mismatch_since_.reset();
    stall_since_.reset();
    return Record(t, DecisionKind::kKeep, "settling after the last change");
  }
  if (std::optional<TimelineEntry> refit = MaybeRecalibrate(m)) return *refit;
  const double stall_line = plan_.offload ? options_.stall_high : options_.planner.stall_threshold;
  if (m.stall_fraction > stall_line) {
    stall_since_ = stall_since_.value_or(t);
    if (stall_rates_.since != *stall_since_) stall_rates_ = StallRates{*stall_since_};
    stall_rates_.total += m.samples_per_s;
    for (const WorkerMeasurement& w : m.workers) {
      stall_rates_.remote += w.delivered_samples_per_s;
    }
    ++stall_rates_.periods;
  } else {
    stall_since_.reset();
  }
  if (!plan_.offload) return StallWhileLocal(m);
  if (std::optional<TimelineEntry> trial = MaybeTrial(m)) return *trial;
  return MaybeStepRatio(m);
}

std::optional<TimelineEntry> Controller::MaybeSlowWorker(const Measurement& m) {
  const double t = m.t_s;
  if (!plan_.offload || t - last_change_t_ < options_.settle_s || !(m.samples_per_s > 0)) {
    return std::nullopt;
  }
  // A worker delivering well under its share, or under the model's flow for it while the
  // workers bind and the trainer stalls (it got slower, its link did, or the model overrates
  // it).
  const Evaluation cur = PredictCurrent(effective_profile());
  const bool remote_limits = cur.remote_bound != Bound::kNone &&
                             m.stall_fraction > options_.stall_high && !TrainerSaturated(m);
  for (size_t i = 0; i < plan_.worker_addresses.size(); ++i) {
    const std::string& address = plan_.worker_addresses[i];
    const double share = i < plan_.worker_shares.size() ? plan_.worker_shares[i] : 0;
    // The bar it must clear: 70% of its share of the total, or 80% of the model's flow.
    double expected = share * m.samples_per_s;
    double bar = (1 - options_.rate_drop) * expected;
    std::string of = "its share's";
    if (remote_limits) {
      for (const WorkerFlow& f : cur.workers) {
        if (f.address == address && (1 - options_.model_drop) * f.samples_per_s > bar) {
          expected = f.samples_per_s;
          bar = (1 - options_.model_drop) * expected;
          of = "the model's";
        }
      }
    }
    if (!(expected > 0)) continue;
    double delivered = 0;
    for (const WorkerMeasurement& wm : m.workers) {
      if (wm.address == address) delivered = wm.delivered_samples_per_s;
    }
    if (delivered >= bar) {
      slow_since_.erase(address);
      continue;
    }
    const double since = slow_since_.try_emplace(address, t).first->second;
    if (t - since < options_.rate_drop_confirm_s) continue;
    double& factor = worker_factor_.try_emplace(address, 1.0).first->second;
    factor = std::clamp(factor * std::max(delivered, 1e-9) / expected, kMinFactor, kMaxFactor);
    AbsorbFreshCosts(m);
    TimelineEntry out;
    Replan(t,
           absl::StrCat("worker ", address, " delivers ", FormatRate(delivered),
                        " samples/s, under ", of, " ", FormatRate(expected)),
           /*must_adopt=*/true, &out);
    return out;
  }
  return std::nullopt;
}

std::optional<TimelineEntry> Controller::MaybeSpillOver(const Measurement& m) {
  // A plan holds the trainer to its share (spill=workers) because the model has the trainer's
  // CPU as the limit, where each local sample it takes beyond its share costs it more than
  // the receive it displaces (docs/policy.md, decision rule 4). Measured over the plan's
  // settled periods, a trainer that used less of its CPU than the model's tolerance of full
  // while the accelerator waited refutes that premise: its share is done and it waits for the
  // workers' samples. The same plan with spill-over lets it take what they leave. A trial: it
  // is measured like any plan and rolled back if the held share measures better (rule 7), and
  // it runs at most once per placement in a world (the held one's periods stay measured).
  // Idle means the CPU the trainer left unused is beyond the noise of its periods' readings
  // (noise_z standard errors) and at least min_rate_gap of its budget: at best that much more
  // of the trainer's part of the rate, and a smaller gain is one the trial's own measurement
  // could not resolve. A trainer at its quota reads 99.3-99.8% (docs/policy.md).
  if (!plan_.offload || plan_.local_spill_over || !(plan_.ratio < 1) ||
      checking_against_.has_value() || current_ >= tried_.size()) {
    return std::nullopt;
  }
  const Tried& cur = tried_[current_];
  const int n = options_.min_measured_periods;
  if (cur.rate.n < n || cur.trainer_busy.n < n) return std::nullopt;
  const double busy = cur.trainer_busy.Mean();
  const double stall = cur.stall.Mean();
  const double idle_needed =
      std::max(options_.min_rate_gap, options_.noise_z * cur.trainer_busy.StdErr());
  if (!(stall > options_.stall_high) || !(1 - busy > idle_needed)) return std::nullopt;
  Plan next = plan_;
  next.local_spill_over = true;
  const Tried* known = Find(next);
  if ((known != nullptr && known->rate.n > 0) || MeasuredWorse(next)) return std::nullopt;
  const std::string before = plan_.PolicyString();
  plan_ = std::move(next);
  spill_measured_ = true;
  last_change_t_ = m.t_s;
  stall_since_.reset();
  mismatch_since_.reset();
  slow_since_.clear();
  return Record(
      m.t_s, DecisionKind::kTrial,
      absl::StrCat(before, " held the trainer to its share and it used ", FormatPercent(busy),
                   " of its CPU while the accelerator waited ", FormatPercent(stall),
                   " of the time (", cur.rate.n,
                   " periods): it waits for the workers' samples, so it spills over (",
                   plan_.PolicyString(), "), kept unless the held share measures better"));
}

std::optional<TimelineEntry> Controller::MaybeRecalibrate(const Measurement& m) {
  // Measured against predicted, sustained: re-fit the costs and re-plan.
  const double t = m.t_s;
  const double predicted = PredictCurrent(effective_profile()).predicted_samples_per_s;
  if (!(m.samples_per_s > 0) || !(predicted > 0) ||
      std::fabs(m.samples_per_s / predicted - 1) <= options_.mismatch_tolerance) {
    mismatch_since_.reset();
    return std::nullopt;
  }
  const double since = mismatch_since_.value_or(t);
  mismatch_since_ = since;
  if (t - since < options_.sustain_s) return std::nullopt;
  const std::string why =
      absl::StrCat("measured ", FormatRate(m.samples_per_s), " samples/s against ",
                   FormatRate(predicted), " predicted for ", Fmt(t - since), " s");
  AbsorbFreshCosts(m);
  Calibrate(m);
  TimelineEntry out;
  Replan(t, why, /*must_adopt=*/false, &out);
  return out;
}

TimelineEntry Controller::StallWhileLocal(const Measurement& m) {
  const double t = m.t_s;
  if (!stall_since_ || t - *stall_since_ < options_.sustain_s || profile_.workers.empty()) {
    return Record(t, DecisionKind::kKeep, "");
  }
  const std::string why = absl::StrCat("stall ", FormatPercent(m.stall_fraction), " for ",
                                       Fmt(t - *stall_since_), " s while not offloading");
  Plan next = PlanSluice(effective_profile(), PlannerNow());
  if (next.offload && !MeasuredWorse(next)) {
    stall_since_.reset();
    plan_ = std::move(next);
    last_change_t_ = t;
    return Record(t, DecisionKind::kReplan,
                  absl::StrCat(why, ": re-planned: ", plan_.PolicyString()));
  }
  // The planner's margin not met: a trial may still test a smaller predicted gain.
  if (std::optional<TimelineEntry> trial = MaybeTrial(m)) return *trial;
  stall_since_.reset();
  return Record(t, DecisionKind::kKeep, absl::StrCat(why, "; offloading would not help"));
}

TimelineEntry Controller::MaybeStepRatio(const Measurement& m) {
  // A lasting stall while offloading: a small ratio step towards the side that keeps up.
  const double t = m.t_s;
  if (!stall_since_ || t - *stall_since_ < options_.correction_interval_s) {
    return Record(t, DecisionKind::kKeep, "");
  }
  // The two sides compared over the whole lasting stall, not one period: a period counts
  // whole elements (a batch, after batching), and on random-17's 55 s runs one period's count
  // of the worker's 4-5 batches a second had flipped the side that lags every 10 s.
  double total = m.samples_per_s;
  double remote = 0;
  for (const WorkerMeasurement& wm : m.workers) remote += wm.delivered_samples_per_s;
  if (stall_rates_.since == *stall_since_ && stall_rates_.periods > 0) {
    total = stall_rates_.total / stall_rates_.periods;
    remote = stall_rates_.remote / stall_rates_.periods;
  }
  const double local = std::max(0.0, total - remote);
  const double want_remote = plan_.ratio * total;
  const double want_local = (1 - plan_.ratio) * total;
  const double remote_frac = want_remote > 0 ? remote / want_remote : 1;
  const double local_frac = want_local > 0 ? local / want_local : 1;
  const double step = std::min(options_.max_ratio_step, options_.ratio_gain * m.stall_fraction);
  // Room on the workers for a step towards them: the model predicts no loss at the larger
  // ratio (the workers' capacity still carries their larger flow; a tie within rounding is
  // no loss). Where it has them at capacity they already take what the trainer leaves (they
  // spill over), and a larger ratio only lowers a held trainer's cap under what it was doing
  // (random-17, 55 s runs: such steps measured 6-12% under the plan they left, and were
  // rolled back).
  const Profile eff = effective_profile();
  const bool room = PredictAt(eff, std::min(1.0, plan_.ratio + step)).predicted_samples_per_s >=
                    PredictAt(eff, plan_.ratio).predicted_samples_per_s * (1 - 1e-9);
  int sign = 0;
  std::string side;
  if (remote_frac < local_frac * 0.95) {
    sign = -1;
    side = "the workers lag";
  } else if (!room) {
    return Record(t, DecisionKind::kKeep,
                  local_frac < remote_frac * 0.95
                      ? "stall with the trainer lagging and the workers at capacity"
                      : "stall with both sides at capacity");
  } else if (local_frac < remote_frac * 0.95) {
    sign = 1;
    side = "the trainer lags";
  } else {
    sign = 1;
    side = "both sides keep their shares and the workers have room";
  }
  if (last_step_t_) {
    const double wait = sign == last_step_sign_ ? options_.correction_interval_s
                                                : 2 * options_.correction_interval_s;
    if (t - *last_step_t_ < wait) return Record(t, DecisionKind::kKeep, "");
  }
  const double ratio = std::clamp(plan_.ratio + sign * step, 0.0, 1.0);
  if (std::fabs(ratio - plan_.ratio) < 1e-9) return Record(t, DecisionKind::kKeep, "");
  const double old_ratio = plan_.ratio;
  double sum = 0;
  for (double s : plan_.worker_shares) sum += s;
  for (double& s : plan_.worker_shares) {
    s = sum > 0 ? s * ratio / sum : ratio / plan_.worker_shares.size();
  }
  plan_.ratio = ratio;
  plan_.offload = ratio > 0;
  plan_.predicted_samples_per_s = PredictCurrent(effective_profile()).predicted_samples_per_s;
  last_step_t_ = t;
  last_step_sign_ = sign;
  stall_since_.reset();
  return Record(t, DecisionKind::kAdjustRatio,
                absl::StrCat("stall ", FormatPercent(m.stall_fraction), " and ", side, " (workers ",
                             FormatRate(remote), ", local ", FormatRate(local),
                             " samples/s): ratio ", Fmt(old_ratio), " -> ", Fmt(ratio)));
}

}  // namespace sluice::policy
