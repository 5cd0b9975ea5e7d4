// The sluice planner: evaluates the throughput model (model.h) for every cut x read mode x
// codec and picks the fastest, offloading only when a stall was measured and the best plan
// beats all-local by a margin (docs/policy.md, "Decisions").
//
// Pure function; thread-safe.
#ifndef SLUICE_POLICY_SLUICE_PLANNER_H_
#define SLUICE_POLICY_SLUICE_PLANNER_H_

#include <optional>
#include <string>
#include <vector>

#include "sluice/policy/plan.h"
#include "sluice/policy/profile.h"

namespace sluice::policy {

struct PlannerOptions {
  // Offload only when the measured stall fraction is above this.
  double stall_threshold = 0.05;
  // ... and the best plan's predicted rate is at least (1 + min_gain) x all-local. This
  // default is for a plan nothing measures afterwards (`sluice plan`, a loader without the
  // closed loop): a margin for the model's error, which nothing checks there. In training
  // the controller measures every plan and uses ClosedLoopPlannerOptions() (2%).
  double min_gain = 0.10;
  // Why min_gain is what it is, where the caller raised it (said after it when the plan is
  // `none` for too little gain); empty: nothing is said.
  std::string min_gain_why;
  // false: skip the stall test (the controller re-planning while already offloading, whose
  // stall is low because the offload works; `sluice plan` with a predicted stall).
  bool require_stall = true;
  // Flows aim at demand x (1 + headroom) (ModelOptions::demand_headroom).
  double demand_headroom = 0.05;
  // Predicted rates within this fraction of the best are ties, broken by fewer bytes on the
  // wire, then fewer elements received, then fewer remote CPU seconds (docs/policy.md,
  // decision 2).
  double tie_tolerance = 0.01;
  bool allow_after_batch = true;  // false when the pipeline has no batch
  double max_message_bytes = 64 << 20;  // ModelOptions::max_message_bytes
  // A ratio at or above this becomes full_offload_ratio: spill-over still gives the trainer
  // the samples the workers cannot take, and local work mixed into a trainer that is busy
  // receiving costs more than the model sees (every oracle sweep on the testbed has 1.0
  // above 0.9). 1: off.
  double full_offload_above = 0.85;
  // Not 1: a local share of exactly 0 means "never here" to the coordinator, which would
  // leave a trainer idle behind a worker slower than planned (slow storage, say).
  double full_offload_ratio = 0.99;
  // When the trainer's CPU is what binds (Evaluation::trainer_bound), at any ratio, the plan
  // keeps the model's ratio and the trainer keeps to its share (Plan::local_spill_over false)
  // instead of the rounding above: spill-over handed such a trainer local samples whenever
  // its executor was idle (30-40% of the samples at ratio 0.99 on the testbed), each costing
  // it more than the receive it displaced, and a trainer busy on them read the workers'
  // streams late, which kept them at their split cap and fed the spill (unequal-workers, cut
  // 2 at 0.81: 2,239 samples/s with spill-over, 2,488 without; docs/policy.md, rule 4).
  bool strict_local_share_when_trainer_bound = true;
  // The relative error of the trainer's local rate that a held share (above) is set against,
  // where the workers are at their own capacity: the share is the workers' flow over that
  // flow plus the local rate raised by this much, the low end of what the measurements allow
  // (docs/policy.md, decision rule 4). Why low: the coordinator lets workers take splits past
  // their share whenever they ask (a held trainer's share is a cap, not a claim), so a share
  // too small for the workers costs nothing while one too large idles the bound trainer
  // behind them. 0.12: noise_z (2) standard deviations of the start window's all-local rate
  // as an estimate of all-local's steady rate (0.06, measured over 144 runs of the
  // randomized suite: docs/policy.md, controller rule 7); the local rate every held share
  // rests on is scaled to that window. 0: the model's share.
  double held_share_local_rate_error = 0.12;
  // Candidates not to pick, each with the reason shown for it in the candidate table
  // (the controller's: a shape an all-local check measured no faster than all-local).
  struct Excluded {
    Candidate candidate;
    std::string why;
  };
  std::vector<Excluded> excluded;
  // A candidate measured on this cluster (the shape a previous run ended on, faster than
  // all-local there: the controller's, from the metric store). It is picked over the model's
  // best unless that predicts more than (1 + incumbent_margin) times its rate, as the loop
  // switches from a measured plan only to one that is clearly better
  // (ControllerOptions::switch_margin); it still needs min_gain over all-local. A loss, an
  // exclusion, or an infeasible candidate is not picked.
  std::optional<Candidate> incumbent;
  double incumbent_margin = 0;
  // The incumbent was measured with the trainer spilling over (the controller moves a held
  // share that measures the trainer idle to spill-over: docs/policy.md, controller rule 7).
  // When the incumbent is the plan, it keeps spill-over where the trainer's CPU binding would
  // otherwise hold the trainer to its share (rule 4): a measured plan is kept as it ran.
  bool incumbent_spill_over = false;
};

// REQUIRES: nothing; an invalid profile (ValidateProfile) gives a no-offload plan whose
// explanation says what is wrong.
Plan PlanSluice(const Profile& profile, const PlannerOptions& options = {});

// The stall the model predicts for the all-local pipeline: max(0, 1 - all-local / demand).
// `sluice plan` (nothing measured yet) puts it in consumer.stall_fraction.
double PredictedStallFraction(const Profile& profile);

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_SLUICE_PLANNER_H_
