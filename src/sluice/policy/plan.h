// Plan: what a planner decides — where to cut, how much to offload, to which worker, how to
// read and compress — with the predicted rates and a human-readable explanation. A Plan is
// a Placement (sluice/core/placement.h: what runtime::WithPlacement gives a Loader) with the
// planner's fields around it.
//
// Plain struct and pure functions; thread-safe.
#ifndef SLUICE_POLICY_PLAN_H_
#define SLUICE_POLICY_PLAN_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/core/status.h"
#include "sluice/policy/model.h"
#include "sluice/policy/profile.h"

namespace sluice::policy {

// The Placement's fields: cut (0..num_ops, or kCutAfterBatch), ratio (the fraction of the
// samples processed by workers), read_mode, codec, local_spill_over, and worker_shares: per
// worker in worker_addresses, its fraction of all samples (sums to ratio; as relative shares
// they mean the same).
struct Plan : Placement {
  std::string planner = "none";  // "sluice", "fastflow", "fixed", "none"
  bool offload = false;          // false: the plain local pipeline (ratio 0)
  std::vector<std::string> worker_addresses;  // the profile's workers, in order
  double predicted_samples_per_s = 0;
  double predicted_local_samples_per_s = 0;  // the all-local rate, for comparison
  // Several lines: what was measured, the bottleneck of each side, why this cut, why this
  // ratio (or why no offload).
  std::string explanation;
  // Every candidate's prediction (sluice planner; empty for the others), enumeration order.
  std::vector<Evaluation> candidates;

  // The `sluice train --policy` spelling: "none" when it does not offload, else the
  // placement's (PlacementString: "fixed:cut=3,ratio=0.62,read=remote,compress=none", with
  // ",spill=workers" when the trainer keeps to its share and ",shares=..." for unequal
  // workers).
  std::string PolicyString() const;
};

// An offloading plan measured on a cluster, with what was measured: one that an all-local
// check (or the rollback rule) measured no faster than all-local (a loss, the controller's
// rule 7, docs/policy.md), or the plan a run ended on, measured over all-local. Kept in the
// metric store with the workers' CPU budgets, so that a later run with the same workers does
// not start on a plan this cluster already measured worse, and does not leave the one it
// measured better for a prediction within the model's error (Controller::Remember).
struct MeasuredPlan {
  Plan plan;  // placement, worker_addresses and predicted_samples_per_s are what count
  double measured = 0;  // the plan's rate, samples/s
  double local = 0;     // all-local's (in the same check, or the best known in that run)
  std::vector<double> worker_cpus;  // per worker_addresses, their CPU budgets then
  // A loss's weight across runs (Controller::Remember): how many times in a row its shape
  // measured no faster than all-local with no win between, and how many later runs have
  // skipped the shape for it since it last lost. Unused for the plan a run ended on.
  int times_lost = 1;
  int runs_skipped = 0;
};
// The most a loss's times_lost counts (RunsALossIsSkippedFor doubles per loss up to it).
inline constexpr int kMaxTimesLost = 8;
// {"placement": PlacementToJson (with the workers' addresses), "predicted", "measured",
//  "local", "worker_cpus", "times_lost", "runs_skipped"} (the last two absent in entries
// written before them: 1 and 0); the inverse returns InvalidArgument naming what is wrong.
nlohmann::json ToJson(const MeasuredPlan& measured);
StatusOr<MeasuredPlan> MeasuredPlanFromJson(const nlohmann::json& j);

// JSON in the CLI's spelling: the placement's fields (PlacementToJson: "cut" (int or
// "batch"), "ratio", "spill", "read_mode", "compression", "workers": [{"address", "share"}])
// and {"planner", "offload", "policy", "predicted_samples_per_s",
// "predicted_local_samples_per_s", "explanation", "candidates": [...]}.
nlohmann::json ToJson(const Plan& plan);
nlohmann::json ToJson(const Evaluation& evaluation);

// The table of every candidate (`sluice plan`): cut, read mode, codec, predicted samples/s,
// ratio, the bound of each side and the bytes on the wire; the chosen row is marked '*'.
std::string FormatCandidateTable(const Profile& profile, const Plan& plan);

// A plan that offloads nothing; `reason` becomes its explanation.
Plan PlanNone(const Profile& profile, const std::string& reason);

// A plan with a given cut and ratio (`fixed`, the oracle's sweep, `full` = cut after batch
// at ratio 1), with the model's prediction for it (EvaluateFixed).
// `worker_shares` relative (empty: equal).
Plan PlanFixed(const Profile& profile, const Candidate& candidate, double ratio,
               const std::vector<double>& worker_shares = {});

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_PLAN_H_
