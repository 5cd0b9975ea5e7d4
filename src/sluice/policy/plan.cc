#include "sluice/policy/plan.h"

#include <algorithm>
#include <cmath>
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

json ToJson(const MeasuredPlan& loss) {
  return json{{"placement", PlacementToJson(loss.plan, loss.plan.worker_addresses)},
              {"predicted", loss.plan.predicted_samples_per_s},
              {"measured", loss.measured},
              {"local", loss.local},
              {"worker_cpus", loss.worker_cpus},
              {"times_lost", loss.times_lost},
              {"runs_skipped", loss.runs_skipped}};
}

StatusOr<MeasuredPlan> MeasuredPlanFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("a measured plan is not an object");
  auto placement = j.find("placement");
  if (placement == j.end() || !placement->is_object()) {
    return absl::InvalidArgumentError("a measured plan has no placement");
  }
  SLUICE_ASSIGN_OR_RETURN(Placement p, PlacementFromJson(*placement));
  MeasuredPlan loss;
  static_cast<Placement&>(loss.plan) = p;
  loss.plan.offload = true;
  auto workers = placement->find("workers");
  if (workers != placement->end() && workers->is_array()) {
    for (const json& w : *workers) {
      auto address = w.is_object() ? w.find("address") : w.end();
      if (address == w.end() || !address->is_string()) {
        return absl::InvalidArgumentError("a measured plan names a worker without an address");
      }
      loss.plan.worker_addresses.push_back(address->get<std::string>());
    }
  }
  auto number = [&j](const char* key, double* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) ||
        it->get<double>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a measured plan's ", key, " is not a number >= 0"));
    }
    *out = it->get<double>();
    return absl::OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(number("predicted", &loss.plan.predicted_samples_per_s));
  SLUICE_RETURN_IF_ERROR(number("measured", &loss.measured));
  SLUICE_RETURN_IF_ERROR(number("local", &loss.local));
  auto cpus = j.find("worker_cpus");
  if (cpus == j.end() || !cpus->is_array() ||
      cpus->size() != loss.plan.worker_addresses.size()) {
    return absl::InvalidArgumentError("a measured plan needs one worker_cpus entry per worker");
  }
  for (const json& c : *cpus) {
    if (!c.is_number() || !std::isfinite(c.get<double>())) {
      return absl::InvalidArgumentError("a measured plan's worker_cpus are not numbers");
    }
    loss.worker_cpus.push_back(c.get<double>());
  }
  auto count = [&j](const char* key, int low, int high, int* out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return absl::OkStatus();  // written before the counts: the default
    if (!it->is_number_integer() || it->get<int64_t>() < low || it->get<int64_t>() > high) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a measured plan's ", key, " is not a whole number in [", low, ", ", high, "]"));
    }
    *out = static_cast<int>(it->get<int64_t>());
    return absl::OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(count("times_lost", 1, kMaxTimesLost, &loss.times_lost));
  SLUICE_RETURN_IF_ERROR(count("runs_skipped", 0, 1 << kMaxTimesLost, &loss.runs_skipped));
  return loss;
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
