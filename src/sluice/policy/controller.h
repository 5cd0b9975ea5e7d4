// Controller: the closed loop of docs/policy.md ("The controller"), as a pure state
// machine. The runtime feeds it a Measurement every second or so (time, measured rate and
// stall, per-worker delivered rate and CPU budget, the worker set, the accelerator step) and
// applies the plan of each decision it returns:
//   kInitial      the first plan (Start);
//   kKeep         nothing to do (the reason says why, e.g. settling after a change);
//   kAdjustRatio  a small ratio step from a measured stall (the side that lags gets less);
//   kRecalibrate  measured and predicted rates differed by more than the tolerance for a
//                 sustained period: the costs were re-fitted and the plan re-predicted (and
//                 replaced only if the new best is clearly better);
//   kReplan       the world changed — a worker joined or left, a worker's CPU budget or
//                 delivered rate dropped, the step time changed, a stall appeared while not
//                 offloading — and the planner ran again at once;
//   kRollback     the plan in force measured worse than one measured before in the same
//                 world: back to that one, with the costs it was chosen under (a reading
//                 that led to a worse plan is not kept);
//   kTrial        a stall lasts and the model's best offloading plan has not been measured
//                 yet: it runs for a few periods and stays only if it measures better; or an
//                 offloading plan measured but not clearly better than all-local, whose
//                 steady rate is not known yet: all-local runs for a few periods (a check);
//                 or a trainer held to its share measured idle while the accelerator
//                 waits: the plan runs with spill-over (rolled back if it measures worse).
// Hysteresis keeps it from flapping: mismatches and stalls must last (sustain_s,
// correction_interval_s), every plan change starts a cool-down during which only world
// changes act, a recalibrated plan must beat the current one by switch_margin, ratio steps
// are bounded, and a step in the opposite direction of the last one waits twice as long.
// Once offloading, re-plans skip the planner's stall test (a working offload removes the
// stall that justified it). No plan is final: every plan's delivered rate is measured, and
// within one world (no worker, budget or step change) the best measured plan wins over a
// model's prediction.
//
// Thread-compatible: one caller at a time. No clocks of its own: time comes in measurements.
#ifndef SLUICE_POLICY_CONTROLLER_H_
#define SLUICE_POLICY_CONTROLLER_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/policy/plan.h"
#include "sluice/policy/profile.h"
#include "sluice/policy/sluice_planner.h"

namespace sluice::policy {

enum class DecisionKind {
  kInitial,
  kKeep,
  kAdjustRatio,
  kRecalibrate,
  kReplan,
  kRollback,
  kTrial,
};
// "initial", "keep", "adjust_ratio", "recalibrate", "replan", "rollback", "trial".
const char* DecisionKindName(DecisionKind kind);

struct TimelineEntry {
  double t_s = 0;
  DecisionKind kind = DecisionKind::kKeep;
  std::string reason;
  Plan plan;  // the plan in force after the decision
};
nlohmann::json ToJson(const TimelineEntry& entry);

struct WorkerMeasurement {
  std::string address;
  bool connected = true;               // a disconnected worker counts as gone
  bool drained = false;                // gone because it drains (shuts down), not a failure
  double cpu_budget = 0;               // as it reports it; <= 0: unknown (unchanged)
  double delivered_samples_per_s = 0;  // samples of it the merge accepted, per second
  double link_bytes_per_s = 0;         // <= 0: not measured (unchanged)
  bool has_storage = true;             // used when the worker is new
  std::vector<OpCost> ops;             // fresh per-op costs measured there (may be empty)
};

// The trainer's cost of receiving, fitted on the whole process over the settled window of the
// plan in force (runtime::FitReceiveCost): per element received, fitted at that plan's cut,
// and per payload byte; either may be absent.
struct ReceiveReading {
  std::optional<double> cpu_s_per_element;
  std::optional<double> cpu_s_per_byte;
};

// A worker's whole CPU per sample, as it reports it for its session (its transport's and
// runtime's share included), over the settled window of the plan in force.
struct WorkerCpuReading {
  std::string address;
  double cpu_s_per_sample = 0;
  int64_t samples = 0;  // what the reading spans
};

struct Measurement {
  double t_s = 0;
  double samples_per_s = 0;                // delivered to the training loop, over the last period
  double stall_fraction = 0;               // over the last period
  double step_s = 0;                       // accelerator step per batch; <= 0: not measured
  // The trainer process's CPU over the period, as a fraction of its CPU budget (1: it used
  // all it may); <= 0: not measured. A saturated trainer is itself a limit on what the
  // workers can deliver to it (it receives their samples), so their shortfall against the
  // model is not evidence against them (Controller::TrainerSaturated).
  double trainer_cpu_busy = 0;
  std::vector<WorkerMeasurement> workers;  // the current worker set
  std::vector<OpCost> local_ops;           // fresh per-op costs on the trainer (may be empty)
  // While offloading, once the plan's streams have settled: what receiving cost over that
  // window. Used when the plan is left for all-local because it measured worse
  // (Controller::KeepReceiveCostOfLoss).
  ReceiveReading receive;
  // What the rates above are over, in seconds (<= 0: not given).
  double period_s = 0;
  // How long the run has left at the current rate, where the caller knows how long it runs
  // (runtime::AutoOptions::batches_after_plan); nullopt: not known, taken as long. An
  // all-local check is weighed against it (Controller::CheckPaysBack).
  std::optional<double> remaining_s;
};

// The planner's options in a closed loop: every plan is measured (a worse one is rolled
// back, and one not clearly better than all-local is checked against it), so the first plan
// needs no margin for the model's error, only a predicted gain the loop can resolve in
// measurement (ControllerOptions::min_rate_gap).
inline constexpr double kMinRateGap = 0.02;
PlannerOptions ClosedLoopPlannerOptions();

struct ControllerOptions {
  PlannerOptions planner = ClosedLoopPlannerOptions();
  double mismatch_tolerance = 0.10;  // |measured / predicted - 1| beyond this is a mismatch
  double sustain_s = 10;             // ... that must last this long before recalibrating
  double cooldown_s = 15;            // after a plan change, only world changes act
  double switch_margin = 0.05;       // a recalibrated best must beat the current plan by this
  double stall_high = 0.05;          // a stall above this (lasting) triggers a ratio step
  double correction_interval_s = 5;  // at most one ratio step per interval
  double max_ratio_step = 0.05;
  double ratio_gain = 0.5;         // step = min(max_ratio_step, gain x stall)
  double change_threshold = 0.20;  // relative change of a budget or the step time that
                                   // counts as a changed world
  // A worker delivering under (1 - rate_drop) of its share of the measured total, or, while
  // the trainer stalls and the model has the workers as the limit, under (1 - model_drop)
  // of the flow the model predicts for it, for rate_drop_confirm_s. This acts during the
  // cool-down too, from `settle_s` after a change (the streams need that long to fill): a
  // worker the model overrates (a send path it does not see, a halved quota) is caught
  // within seconds, not after cool-down plus sustain.
  // Not while the trainer is saturated (Measurement::trainer_cpu_busy at or over
  // 1 - mismatch_tolerance): then it may be the trainer that takes the workers' samples too
  // slowly, and the mismatch re-fit calibrates the trainer instead.
  double rate_drop = 0.30;
  double model_drop = 0.20;
  double rate_drop_confirm_s = 2;
  double settle_s = 3;
  // Measured plans. A plan's rate is the mean of its periods from settle_s after it began;
  // it is compared once it has min_measured_periods of them. Two plans' rates differ when
  // the gap exceeds noise_z standard errors of the difference (the periods' own spread),
  // and at least min_rate_gap of the better one (what a second's count of batches can
  // resolve: one batch in a few dozen).
  int min_measured_periods = 3;
  double noise_z = 2;
  double min_rate_gap = kMinRateGap;
  // Offloading trials while a stall lasts (sustain_s) and the model's best plan was not
  // measured yet: at most this many per world (a changed world allows new ones).
  int max_trials = 3;
  // The gain a plan needs over all-local while receiving has not been measured on this
  // trainer (Costs::receive_measured false: no offload has run here, in this run or one the
  // metric store remembers): the planner's margin for a model error that nothing has
  // checked (PlannerOptions' default). planner.min_gain is what the loop can resolve once
  // every cost a plan rests on has been measured; the receive cost is the one only an
  // offload measures, and until then it is a default (5 us an element) where the
  // randomized suite's fits read 2-360 us. A smaller predicted gain is still tried, as a
  // bounded trial, while the stall lasts (sustain_s; MaybeTrial). docs/policy.md, rule 3.
  double unmeasured_receive_min_gain = PlannerOptions{}.min_gain;
};

// Sets the uncompressed stream's trainer CPU per byte to `cpu_s_per_byte` and moves the
// other codecs' by the same amount (their decompression stays on top).
void SetReceiveCost(Costs* costs, double cpu_s_per_byte);

class Controller {
 public:
  explicit Controller(Profile profile, ControllerOptions options = {});

  // The initial plan (PlanSluice on the profile given). Observe calls it if needed.
  // `local_samples_per_s`: the all-local rate measured before it (the plan to return to if
  // offloading measures worse), counted as min_measured_periods periods of that rate.
  TimelineEntry Start(double t_s, std::optional<double> local_samples_per_s = std::nullopt);
  // One decision per measurement; measurements must come in time order.
  TimelineEntry Observe(const Measurement& measurement);
  // The trainer's measured cost of receiving on an uncompressed stream (its whole process,
  // gRPC's own threads included): per element (a sample, or a batch after batching) and/or
  // per byte, each replacing the profile's where given (the other codecs move by the same
  // amount per byte). Re-plans, switching only to a plan that is clearly better.
  TimelineEntry RecalibrateReceive(double t_s, std::optional<double> cpu_s_per_element,
                                   std::optional<double> cpu_s_per_byte);
  // The workers' measured CPU per sample against the model's for the plan in force,
  // weighted by the samples each reading spans. The part the model does not see (never below
  // 0) is counted into Costs::worker_cpu_s_per_sample, the mean of every such reading
  // (Costs::worker_cpu_readings of them); where the reading was more than mismatch_tolerance
  // from the model and the mean moved, the planner runs again, switching only to a plan that
  // is clearly better (switch_margin). nullopt: no re-plan (a reading within the tolerance
  // still counts in the mean), not offloading, or no reading of a worker in the plan.
  std::optional<TimelineEntry> RecalibrateWorkerCpu(double t_s,
                                                    const std::vector<WorkerCpuReading>& readings);
  // RecalibrateWorkerCpu's fit alone, without planning (a run that ends keeps what its
  // workers measured for the next run's plan): the reason a re-plan would give, or nullopt
  // where RecalibrateWorkerCpu would not re-plan (the reading may still have been counted).
  std::optional<std::string> FitWorkerCpu(const std::vector<WorkerCpuReading>& readings);
  // A reading of the receive cost on the whole process that the runtime found close to the
  // model's (so it did not recalibrate): receiving counts as measured from now on.
  void NoteReceiveMeasured() { receive_measured_ = true; }
  // Whether receiving was measured on this trainer (Costs::receive_measured): given by the
  // profile (the metric store's), or by a reading in this run.
  bool receive_measured() const { return receive_measured_; }

  // Losses measured in earlier runs (the metric store's), before Start: the ones whose
  // workers are this profile's with the same CPU budgets count as if measured in this run.
  // The first plan and every later one skip a shape they rule out (MeasuredWorse's rule).
  // `last_run`: the plan an earlier run ended on, measured faster than all-local there (the
  // metric store's). With the same workers and budgets, the first plan keeps its shape
  // unless the model's best predicts more than switch_margin over it (PlannerOptions::
  // incumbent): a measured plan is left only for one clearly better, at start as in the loop.
  void Remember(const std::vector<MeasuredPlan>& earlier,
                const std::optional<MeasuredPlan>& last_run = std::nullopt);
  // A loss is skipped for RunsALossIsSkippedFor(times_lost) runs after it was measured; after
  // that its shape is retested (open to the planner, and the first plan says so).
  // The losses to keep for the next run: the remembered ones this run did not contradict and
  // this run's, the newest last; none of the shape the run ended on (ended_on), which
  // measured faster than all-local since. An all-local check still running (the run ended first)
  // counts as lost: its plan measured no clear gain over all-local, and a next run does not
  // start on a plan that has not shown one (docs/policy.md, rule 7).
  std::vector<MeasuredPlan> losses() const;
  // The plan in force, for the next run's Remember: when it offloads, has a measured rate
  // (min_measured_periods settled periods), is not under an all-local check, and measured
  // over all-local's best known rate (measured, or else predicted). A plan in force with
  // fewer periods (the run ended in its settle: a spill-over trial, a ratio step) gives way
  // to the best measured plan of its shape in this world. nullopt otherwise.
  std::optional<MeasuredPlan> ended_on() const;

  const Plan& plan() const { return plan_; }
  // The profile as the controller now sees it (reported budgets, fresh costs, the worker
  // set) with its calibration applied.
  Profile effective_profile() const;
  // Every decision other than kKeep, in order.
  const std::vector<TimelineEntry>& timeline() const { return timeline_; }
  // The measured rate of the plan in force (mean of its settled periods; 0: none yet).
  double measured_samples_per_s() const;
  // How many settled periods that rate is the mean of.
  int measured_periods() const;

 private:
  // The rates of one plan's periods.
  struct RateStats {
    int n = 0;
    double sum = 0;
    double sum_sq = 0;
    // The readings are a lower bound of the plan's steady rate, not a sample of it: the
    // all-local rate measured before the first plan, whose window includes the start-up
    // (threads spinning up, queues filling, files read for the first time). Such a rate can
    // show another plan worse, never better; the first period measured in steady state
    // replaces it.
    bool lower_bound = false;
    void Add(double rate);
    double Mean() const { return n > 0 ? sum / n : 0; }
    double StdDev() const;  // of the periods; 0 with fewer than 2
    double StdErr() const;  // of the mean; 0 with fewer than 2 periods
  };
  // What the controller believes (costs, calibration): restored when a plan is returned to.
  struct Beliefs {
    Profile profile;
    double trainer_factor = 1;
    std::map<std::string, double> worker_factor;
  };
  // A plan measured in this world, and the beliefs it was chosen under.
  struct Tried {
    Tried(Plan p, Beliefs b) : plan(std::move(p)), beliefs(std::move(b)) {}
    Plan plan;
    RateStats rate;
    Beliefs beliefs;
    // Over the same settled periods as `rate`: the accelerator's stall, and the trainer's CPU
    // as a fraction of its budget (the periods that measured it).
    RateStats stall;
    RateStats trainer_busy;
  };
  // One measurement's decision, in phases: a world change re-plans at once; then the plan's
  // rate is recorded and the measured-rate rules run (MaybeRollback, MaybeEndLocalCheck,
  // MaybeLocalCheck); then a slow worker, an idle trainer held to its share, the cool-down, a
  // sustained mismatch (MaybeRecalibrate), and the stall: while local (StallWhileLocal), or while
  // offloading a trial (MaybeTrial) or a ratio step (MaybeStepRatio).
  TimelineEntry Decide(const Measurement& m);
  std::optional<TimelineEntry> MaybeSlowWorker(const Measurement& m);
  // A trainer held to its share (spill=workers) that idles while the accelerator waits:
  // the same plan with spill-over runs as a trial (docs/policy.md, controller rule 7).
  std::optional<TimelineEntry> MaybeSpillOver(const Measurement& m);
  std::optional<TimelineEntry> MaybeRecalibrate(const Measurement& m);
  TimelineEntry StallWhileLocal(const Measurement& m);
  TimelineEntry MaybeStepRatio(const Measurement& m);
  Beliefs CurrentBeliefs() const;
  // Book-keeping after any decision: a new plan gets its own entry; the one left keeps
  // `before` (the beliefs it ran under).
  void NoteDecision(const Plan& was, const Beliefs& before, const TimelineEntry& entry);
  const Tried* Find(const Plan& plan) const;
  Tried* Find(const Plan& plan);
  bool Differs(const RateStats& better, const RateStats& worse) const;
  // Whether `better` (at least min_measured_periods periods) is faster than `worse` (at least
  // one) beyond the noise of their periods, for a `worse` with too few periods to say its own
  // spread: the two plans' periods are taken to share one spread (the machine's and the
  // measurement's, not the plan's), estimated from both together (a pooled two-sample test),
  // with Differs' noise_z and min_rate_gap.
  bool ClearlyFasterPooled(const RateStats& better, const RateStats& worse) const;
  // Both tests' last step: `better`'s mean over `worse`'s by more than `noise` and by
  // min_rate_gap of `better`'s.
  bool Clears(const RateStats& better, const RateStats& worse, double noise) const;
  // A measured plan that beats the one in force (nullptr: none).
  const Tried* BetterMeasured();
  bool MeasuredWorse(const Plan& plan);
  std::optional<TimelineEntry> MaybeRollback(const Measurement& m);
  // An offloading plan that measured worse than all-local and was left for it: where the
  // receive cost measured over its window (`reading`) makes it dearer to receive its samples
  // than believed, the reading is what explains the loss, and is kept in the beliefs now in
  // force (the next trial, the next plan and the metric store plan with it). A reading that
  // makes receiving cheaper is not why the plan lost, and is left. Returns the text for the
  // decision's reason ("" when nothing was kept).
  std::string KeepReceiveCostOfLoss(const Plan& lost, const ReceiveReading& reading);
  std::optional<TimelineEntry> MaybeTrial(const Measurement& m);
  // The planner's options now: options_.planner, with unmeasured_receive_min_gain while
  // receiving has not been measured here.
  PlannerOptions PlannerNow() const;
  // The all-local check (docs/policy.md, controller rule 7): an offloading plan whose
  // measured rate does not clearly beat both estimates of all-local's steady rate (the
  // start window's lower bound and the model's prediction) runs all-local for a few
  // periods; the higher measured mean then stays.
  std::optional<TimelineEntry> MaybeLocalCheck(const Measurement& m);
  // Whether an all-local check of the plan in force (rate `offload`) against all-local's
  // estimate `reference` is worth its cost in a run with `remaining_s` left, the check taking
  // `check_s`. The offload's true gain g over all-local is taken as normal, centred on the
  // measured gap, with the spread of a difference of the offload's mean and one period's
  // rate (the all-local estimate rests on a window of 0.5-2 s, about one period). If g > 0
  // the check costs g for as long as it runs (min(check_s, remaining_s)); if g < 0 it gains
  // |g| for the rest of the run once the switch has settled (settle_s), all-local running from
  // the check on. It runs when the expected gain is larger: E[max(0, -g)] x (remaining_s -
  // settle_s) > E[max(0, g)] x min(check_s, remaining_s). No new constant: a long run checks as
  // before (the noise test above decides), a run with less left than a check takes goes with
  // the sign of the measured gap and how clear it is, and one with less than a settle left
  // does not switch.
  bool CheckPaysBack(const RateStats& offload, double reference, double remaining_s,
                     double check_s) const;
  std::optional<TimelineEntry> MaybeEndLocalCheck(double t);

  TimelineEntry Record(double t, DecisionKind kind, std::string reason);
  std::optional<std::string> AbsorbWorldChanges(const Measurement& m);
  void AbsorbFreshCosts(const Measurement& m);
  // `reading_before` (optional): the beliefs before the reading that led to this re-plan. If
  // the model's best plan under the reading was already measured worse here, the reading is
  // contradicted by the rates and is not kept: the beliefs go back to these (as a rollback
  // drops the reading that led to a worse plan), so it is neither planned with nor saved.
  void Replan(double t, const std::string& why, bool must_adopt, TimelineEntry* out,
              const Beliefs* reading_before = nullptr);
  Evaluation PredictCurrent(const Profile& profile) const;
  // The current plan's shape at another ratio, its worker shares scaled with it, no
  // spill-over (EvaluateFixed); for a trainer held to its share, at a ratio up to the shape's
  // re-balanced optimum, that optimum (the workers take what the trainer's cap leaves).
  Evaluation PredictAt(const Profile& profile, double ratio) const;
  ModelOptions Model() const;  // the planner's options the model takes
  void Calibrate(const Measurement& m);
  // Whether the trainer used (about) all of its CPU budget over the measured period.
  bool TrainerSaturated(const Measurement& m) const;

  Profile profile_;  // reported values; calibration lives in the factors below
  ControllerOptions options_;
  // Outside Beliefs: a rollback restores what was believed, not what was never measured.
  bool receive_measured_ = false;
  Plan plan_;
  bool started_ = false;
  std::vector<TimelineEntry> timeline_;

  double trainer_factor_ = 1;                    // effective / reported trainer CPU
  std::map<std::string, double> worker_factor_;  // effective / reported worker capacity
  std::vector<OpCost> fresh_local_ops_;
  std::map<std::string, std::vector<OpCost>> fresh_worker_ops_;

  double last_change_t_ = 0;
  std::optional<double> mismatch_since_;
  std::optional<double> stall_since_;
  // The rates over the lasting stall that began at `since` (== *stall_since_), which the
  // ratio steps compare the two sides by (MaybeStepRatio): one period counts whole elements,
  // so after batching its count of a worker's batches is off by up to one of the 4-5 a
  // second a link-bound worker sends.
  struct StallRates {
    double since = -1;
    double total = 0;   // sum over the periods of samples_per_s
    double remote = 0;  // ... of the workers' delivered samples per second
    int periods = 0;
  };
  StallRates stall_rates_;
  std::map<std::string, double> slow_since_;  // per worker
  std::optional<double> last_step_t_;
  int last_step_sign_ = 0;

  std::vector<Tried> tried_;  // this world's measured plans (a world change clears them)
  size_t current_ = 0;        // tried_'s entry for plan_
  bool world_changed_ = false;
  int trials_ = 0;
  // The plan in force spills over because a measurement said so (MaybeSpillOver's trial, or
  // the first plan kept the spill-over of the plan an earlier run ended on): a re-plan of the
  // same shape keeps it. Cleared when a rollback lands on a held share, and by a world change.
  bool spill_measured_ = false;
  std::optional<Plan> checking_against_;  // the offloading plan an all-local check tests
  ReceiveReading checking_receive_;       // what receiving cost while that plan ran
  double checking_reference_ = 0;         // the all-local rate it did not clearly beat
  // Offloading plans an all-local check measured under all-local, with what the check
  // measured: the plan's rate and all-local's. In this run, and in earlier runs with the same
  // workers and budgets (Remember), oldest first.
  std::vector<MeasuredPlan> lost_to_local_;
  // Earlier runs' losses with these workers whose skips are spent (RunsALossIsSkippedFor):
  // their shapes are open to the planner again, and the records are kept so that a new loss
  // of the shape counts as one more in a row.
  std::vector<MeasuredPlan> retest_;
  // The other way round: an all-local check measured an offloading plan faster than
  // all-local. Until the world changes, a re-plan to all-local
  // (a recalibration that makes offloading look worthless, say) is a move to a plan measured
  // worse here: a reading of the model does not outvote a measurement of the rates.
  bool local_lost_check_ = false;
  // The shape an earlier run ended on with these workers (Remember), for the first plan.
  std::optional<MeasuredPlan> incumbent_;
  // All-local's best known rate: measured in steady state, or else the larger of its
  // start-up window (a lower bound; 0 when nothing ran before the first plan) and the
  // model's prediction, which `*bound` and `*predicted` get when given.
  double AllLocalReference(double* bound = nullptr, double* predicted = nullptr) const;
  // Whether `measured` was taken on this profile's workers at the same CPU budgets.
  bool SameWorkers(const MeasuredPlan& measured) const;
  MeasuredPlan Measured(const Plan& plan, double measured, double local) const;
  // A loss measured in this run: Measured, one more in a row than the shape's last loss.
  MeasuredPlan Lost(const Plan& plan, double measured, double local) const;
  // Drops the losses of `plan`'s shape: an all-local check measured it faster than all-local.
  void ForgetLosses(const Plan& plan);
};

// How many later runs skip a shape that measured no faster than all-local `times_lost` times
// in a row: 1, 2, 4, ... (times_lost capped at kMaxTimesLost). A loss is one measurement with
// its noise: a shape lost by chance is retried in the run after next, one that keeps losing
// costs a retest ever more rarely (docs/policy.md, rule 7).
int RunsALossIsSkippedFor(int times_lost);

// Whether two plans run the same way: both local, or the same cut, read mode, codec, worker
// set and spill, with ratios within half a ratio step (ControllerOptions::max_ratio_step).
bool SamePlacement(const Plan& a, const Plan& b, double ratio_tolerance = 0.025);
// Whether two offloading plans put the same ops on the same workers the same way: the same
// cut, read mode, codec and worker set, whatever their ratios, shares and spill.
bool SameShape(const Plan& a, const Plan& b);

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_CONTROLLER_H_
