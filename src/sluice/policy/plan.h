// Plan: what a planner decides — where to cut, how much to offload, to which worker, how to
// read and compress — with the predicted rates and a human-readable explanation. What
// runtime::LoaderOptions needs is here: cut, ratio, worker_shares, read_mode, codec.
//
// Plain struct and pure functions; thread-safe.
#ifndef SLUICE_POLICY_PLAN_H_
#define SLUICE_POLICY_PLAN_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/policy/model.h"
#include "sluice/policy/profile.h"

namespace sluice::policy {

struct Plan {
  std::string planner = "none";  // "sluice", "fastflow", "fixed", "none"
  bool offload = false;          // false: the plain local pipeline (ratio 0)
  int cut = 0;                   // 0..num_ops, or kCutAfterBatch
  double ratio = 0;              // fraction of the samples processed by workers
  ReadMode read_mode = ReadMode::kRemoteRead;
  Codec codec = Codec::kNone;
  std::vector<std::string> worker_addresses;  // the profile's workers, in order
  // Per worker, its fraction of all samples (sums to ratio); LoaderOptions::worker_shares
  // takes them as they are (relative shares).
  std::vector<double> worker_shares;
  // false: the trainer keeps to its share (1 - ratio) and only the workers spill over, for a
  // trainer whose CPU is the limit (LoaderOptions::local_spill_over).
  bool local_spill_over = true;
  double predicted_samples_per_s = 0;
  double predicted_local_samples_per_s = 0;  // the all-local rate, for comparison
  // Several lines: what was measured, the bottleneck of each side, why this cut, why this
  // ratio (or why no offload).
  std::string explanation;
  // Every candidate's prediction (sluice planner; empty for the others), enumeration order.
  std::vector<Evaluation> candidates;

  // The `sluice train --policy` spelling: "none" or
  // "fixed:cut=3,ratio=0.62,read=remote,compress=none", with ",spill=workers" when the
  // trainer keeps to its share.
  std::string PolicyString() const;
};

// JSON in the CLI's spelling: {"planner", "offload", "cut" (int or "batch"), "ratio",
// "read_mode", "compression", "workers": [{"address", "share"}], "predicted_samples_per_s",
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
