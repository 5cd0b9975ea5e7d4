#include "sluice/policy/plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/policy/format.h"

namespace sluice::policy {

using nlohmann::json;

std::string Plan::PolicyString() const {
  if (!offload || ratio <= 0) return "none";
  return PlacementString(*this);
}

json ToJson(const Evaluation& e) {
  json workers = json::array();
  for (const WorkerFlow& w : e.workers) {
    workers.push_back(json{{"address", w.address},
                           {"samples_per_s", w.samples_per_s},
                           {"capacity_samples_per_s", w.capacity_samples_per_s},
                           {"bound", BoundName(w.bound)},
                           {"cpu_s_per_sample", w.cpu_s_per_sample},
                           {"cpu_utilisation", w.cpu_utilisation},
                           {"wire_bytes_per_s", w.wire_bytes_per_s}});
  }
  json j{{"cut", e.candidate.cut == kCutAfterBatch ? json("batch") : json(e.candidate.cut)},
         {"read_mode", ReadModeName(e.candidate.read_mode)},
         {"compression", CodecName(e.candidate.codec)},
         {"feasible", e.feasible},
         {"predicted_samples_per_s", e.predicted_samples_per_s},
         {"total_samples_per_s", e.total_samples_per_s},
         {"local_samples_per_s", e.local_samples_per_s},
         {"offloaded_samples_per_s", e.offloaded_samples_per_s},
         {"ratio", e.ratio()},
         {"trainer_bound", BoundName(e.trainer_bound)},
         {"remote_bound", BoundName(e.remote_bound)},
         {"trainer_cpu_s_per_local_sample", e.trainer_cpu_s_per_local_sample},
         {"trainer_cpu_s_per_offloaded_sample", e.trainer_cpu_s_per_offloaded_sample},
         {"trainer_cpu_utilisation", e.trainer_cpu_utilisation},
         {"wire_bytes_per_sample", e.wire_bytes_per_sample},
         {"wire_bytes_per_s", e.wire_bytes_per_s},
         {"remote_cpu_s_per_s", e.remote_cpu_s_per_s},
         {"workers", workers}};
  if (!e.feasible) j["reason"] = e.reason;
  return j;
}

json ToJson(const Plan& plan) {
  json candidates = json::array();
  for (const Evaluation& e : plan.candidates) candidates.push_back(ToJson(e));
  json j = PlacementToJson(plan, plan.worker_addresses);
  j.update(json{{"planner", plan.planner},
                {"offload", plan.offload},
                {"policy", plan.PolicyString()},
                {"predicted_samples_per_s", plan.predicted_samples_per_s},
                {"predicted_local_samples_per_s", plan.predicted_local_samples_per_s},
                {"explanation", plan.explanation},
                {"candidates", candidates}});
  return j;
}

std::string FormatCandidateTable(const Profile& profile, const Plan& plan) {
  std::string out =
      absl::StrFormat("  %-6s %-12s %-5s %10s %6s %12s %12s %10s\n", "cut", "read", "codec",
                      "samples/s", "ratio", "trainer", "workers", "wire MB/s");
  for (const Evaluation& e : plan.candidates) {
    const bool chosen = plan.offload && e.candidate.cut == plan.cut &&
                        e.candidate.read_mode == plan.read_mode && e.candidate.codec == plan.codec;
    if (!e.feasible) {
      out += absl::StrFormat("  %-6s %-12s %-5s %10s   (%s)\n", CutName(e.candidate.cut),
                             ReadModeName(e.candidate.read_mode), CodecName(e.candidate.codec), "-",
                             e.reason);
      continue;
    }
    out += absl::StrFormat("%s %-6s %-12s %-5s %10s %6.2f %12s %12s %10.1f\n", chosen ? "*" : " ",
                           CutName(e.candidate.cut), ReadModeName(e.candidate.read_mode),
                           CodecName(e.candidate.codec), FormatRate(e.predicted_samples_per_s),
                           e.ratio(), BoundName(e.trainer_bound), BoundName(e.remote_bound),
                           e.wire_bytes_per_s / 1e6);
  }
  out += absl::StrFormat("  all-local: %s samples/s\n", FormatRate(AllLocalSamplesPerS(profile)));
  return out;
}

Plan PlanNone(const Profile& profile, const std::string& reason) {
  Plan plan;
  plan.planner = "none";
  for (const WorkerProfile& w : profile.workers) {
    plan.worker_addresses.push_back(w.address);
    plan.worker_shares.push_back(0);
  }
  plan.predicted_local_samples_per_s = AllLocalSamplesPerS(profile);
  plan.predicted_samples_per_s = plan.predicted_local_samples_per_s;
  plan.explanation = reason;
  return plan;
}

Plan PlanFixed(const Profile& profile, const Candidate& candidate, double ratio,
               const std::vector<double>& worker_shares) {
  Plan plan = PlanNone(profile, "");
  plan.planner = "fixed";
  const Evaluation e = EvaluateFixed(profile, candidate, ratio, worker_shares);
  plan.cut = candidate.cut;
  plan.read_mode = candidate.read_mode;
  plan.codec = candidate.codec;
  plan.offload = e.feasible && e.ratio() > 0;
  plan.ratio = plan.offload ? e.ratio() : 0;
  plan.worker_shares =
      plan.offload ? e.worker_shares() : std::vector<double>(profile.workers.size(), 0.0);
  plan.predicted_samples_per_s = e.feasible ? e.predicted_samples_per_s : 0;
  if (!e.feasible) {
    plan.explanation =
        absl::StrCat("fixed plan ", CandidateName(profile, candidate), " cannot run: ", e.reason);
  } else {
    plan.explanation = absl::StrCat("fixed plan ", CandidateName(profile, candidate), ", ratio ",
                                    absl::StrFormat("%.2f", plan.ratio), ": predicted ",
                                    FormatRate(e.predicted_samples_per_s), " samples/s (all-local ",
                                    FormatRate(plan.predicted_local_samples_per_s), ")");
  }
  return plan;
}

}  // namespace sluice::policy
