#include "sluice/policy/sluice_planner.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sluice/policy/format.h"

namespace sluice::policy {
namespace {

// Index of the best candidate: the highest predicted rate, rates within `tolerance` of the
// best being ties broken by fewer wire bytes/s, then fewer elements received a second (the
// receive cost per element is the least known of the model's costs: a default until a run
// fits it, and fits have ranged 2-200 us; among plans the model cannot tell apart, the one
// that depends least on it), then fewer remote CPU seconds/s, then the higher rate, then
// enumeration order. -1 when none is feasible.
int PickBest(const std::vector<Evaluation>& evals, double tolerance) {
  double best_rate = -1;
  for (const Evaluation& e : evals) {
    if (e.feasible) best_rate = std::max(best_rate, e.predicted_samples_per_s);
  }
  int best = -1;
  for (int i = 0; i < static_cast<int>(evals.size()); ++i) {
    const Evaluation& e = evals[i];
    if (!e.feasible || e.predicted_samples_per_s < best_rate * (1 - tolerance)) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const Evaluation& b = evals[best];
    auto less = [](double x, double y) { return x < y * (1 - 1e-9) - 1e-12; };
    if (less(e.wire_bytes_per_s, b.wire_bytes_per_s)) {
      best = i;
    } else if (less(b.wire_bytes_per_s, e.wire_bytes_per_s)) {
      continue;
    } else if (less(e.received_elements_per_s, b.received_elements_per_s)) {
      best = i;
    } else if (less(b.received_elements_per_s, e.received_elements_per_s)) {
      continue;
    } else if (less(e.remote_cpu_s_per_s, b.remote_cpu_s_per_s)) {
      best = i;
    } else if (less(b.remote_cpu_s_per_s, e.remote_cpu_s_per_s)) {
      continue;
    } else if (e.predicted_samples_per_s > b.predicted_samples_per_s * (1 + 1e-9)) {
      best = i;
    }
  }
  return best;
}

// The best candidate (by PickBest's order) at another cut than `chosen`, else with another
// read mode or codec, for "why this cut". -1 if there is none.
int PickRunnerUp(std::vector<Evaluation> evals, int chosen, double tolerance) {
  const int cut = evals[chosen].candidate.cut;
  std::vector<Evaluation> others = evals;
  for (Evaluation& e : others) {
    if (e.candidate.cut == cut) e.feasible = false;
  }
  const int other_cut = PickBest(others, tolerance);
  if (other_cut >= 0) return other_cut;
  evals[chosen].feasible = false;
  return PickBest(evals, tolerance);
}

std::string DemandLine(const Profile& p) {
  const ConsumerProfile& c = p.consumer;
  std::string demand = c.step_s > 0
                           ? absl::StrCat(FormatRate(c.DemandSamplesPerS()), " samples/s (batch ",
                                          c.batch_size, " every ", FormatSeconds(c.step_s), ")")
                           : std::string("not measured (unbounded)");
  return absl::StrCat("demand: ", demand, "; stall measured ", FormatPercent(c.stall_fraction),
                      "; trainer ", absl::StrFormat("%.2g", p.trainer_cpu_budget), " CPU, ",
                      p.workers.size(), p.workers.size() == 1 ? " worker" : " workers");
}

std::string AllLocalLine(const Profile& p) {
  const double a_local = LocalCpuSecondsPerSample(p.costs);
  const double rate = AllLocalSamplesPerS(p);
  const bool cpu_bound = rate < p.consumer.DemandSamplesPerS() * (1 - 1e-9);
  return absl::StrCat("all-local: ", FormatRate(rate), " samples/s, bound by ",
                      cpu_bound ? "the trainer's CPU (" : "demand (", FormatSeconds(a_local),
                      " of CPU per sample, ", absl::StrFormat("%.2g", p.trainer_cpu_budget),
                      " CPU)");
}

std::string TrainerSideLine(const Evaluation& e) {
  std::string why =
      e.trainer_bound == Bound::kDemand ? "demand (the accelerator is fed)" : "its CPU";
  return absl::StrCat("trainer side: bound by ", why, "; ", FormatRate(e.local_samples_per_s),
                      " samples/s end to end at ", FormatSeconds(e.trainer_cpu_s_per_local_sample),
                      " + ", FormatRate(e.offloaded_samples_per_s), " offloaded at ",
                      FormatSeconds(e.trainer_cpu_s_per_offloaded_sample), " (receive + suffix); ",
                      FormatPercent(e.trainer_cpu_utilisation), " of its CPU");
}

std::string WorkerLine(const Profile& p, const WorkerFlow& w, size_t i) {
  std::string bound;
  switch (w.bound) {
    case Bound::kWorkerCpu:
      bound = absl::StrCat("its CPU (", FormatSeconds(w.cpu_s_per_sample), " per sample, ",
                           absl::StrFormat("%.2g", p.workers[i].cpu_budget), " CPU)");
      break;
    case Bound::kLink:
      bound = absl::StrCat("its link (", FormatBytes(p.workers[i].link_bytes_per_s), "/s)");
      break;
    case Bound::kUplink:
      bound = absl::StrCat("its link up, streaming files (",
                           FormatBytes(p.workers[i].link_bytes_per_s), "/s)");
      break;
    case Bound::kStorage:
      bound = absl::StrCat("its storage (", FormatBytes(p.workers[i].storage_bytes_per_s), "/s)");
      break;
    case Bound::kNoStorage:
      bound = "no access to the data (remote_read impossible)";
      break;
    default:
      bound = BoundName(w.bound);
  }
  const double used = w.capacity_samples_per_s > 0 ? w.samples_per_s / w.capacity_samples_per_s : 0;
  return absl::StrCat("worker ", w.address, ": ", FormatRate(w.samples_per_s), " samples/s, ",
                      FormatPercent(used), " of its capacity of ",
                      FormatRate(w.capacity_samples_per_s), " set by ", bound, "; ",
                      FormatBytes(w.wire_bytes_per_s), "/s on the wire");
}

std::string RatioLine(const Evaluation& e, const PlannerOptions& options) {
  if (e.trainer_bound == Bound::kDemand) {
    return absl::StrCat(
        "why this ratio: it is the smallest offload that meets demand",
        options.demand_headroom > 0
            ? absl::StrCat(" plus ", FormatPercent(options.demand_headroom), " headroom")
            : std::string(),
        ": the trainer's CPU covers the rest locally; more would only add "
        "bytes on the wire");
  }
  if (e.remote_bound != Bound::kNone) {
    return absl::StrCat("why this ratio: the workers take all they can (bound by ",
                        BoundName(e.remote_bound),
                        "); the trainer spends the CPU left after receiving on local samples");
  }
  return "why this ratio: the trainer's CPU is spent receiving and finishing offloaded "
         "samples (cheaper than processing them), and the workers still have slack";
}

// The ratio a held trainer keeps to (decision rule 4): where the workers are at their own
// capacity (link, CPU, storage) and the trainer also takes local samples, their flow over
// that flow plus the local rate raised by `local_rate_error`; otherwise the model's ratio.
double HeldShare(const Evaluation& e, double local_rate_error) {
  // The workers bind (RatioLine's "the workers take all they can") when remote_bound is set.
  const double x = e.offloaded_samples_per_s;
  const double local = e.local_samples_per_s;
  if (e.remote_bound == Bound::kNone || !(local_rate_error > 0) || !(x > 0) || !(local > 0)) {
    return e.ratio();
  }
  return x / (x + local * (1 + local_rate_error));
}

}  // namespace

double PredictedStallFraction(const Profile& profile) {
  const double demand = profile.consumer.DemandSamplesPerS();
  if (!(demand > 0) || demand >= kUnboundedRate) return 0;
  return std::max(0.0, 1 - AllLocalSamplesPerS(profile) / demand);
}

Plan PlanSluice(const Profile& profile, const PlannerOptions& options) {
  Status valid = ValidateProfile(profile);
  if (!valid.ok()) {
    Plan plan = PlanNone(profile, absl::StrCat("no offload: invalid profile: ", valid.message()));
    plan.planner = "sluice";
    return plan;
  }
  ModelOptions model;
  model.demand_headroom = options.demand_headroom;
  model.allow_after_batch = options.allow_after_batch;
  model.max_message_bytes = options.max_message_bytes;

  Plan plan = PlanNone(profile, "");
  plan.planner = "sluice";
  for (const Candidate& c : EnumerateCandidates(profile, model)) {
    Evaluation e = Evaluate(profile, c, model);
    for (const PlannerOptions::Excluded& x : options.excluded) {
      if (e.feasible && x.candidate == c) {
        e.feasible = false;
        e.reason = x.why;
      }
    }
    plan.candidates.push_back(std::move(e));
  }
  const double local = plan.predicted_local_samples_per_s;
  std::vector<std::string> lines = {DemandLine(profile), AllLocalLine(profile)};

  int best = profile.workers.empty() ? -1 : PickBest(plan.candidates, options.tie_tolerance);
  // The incumbent, measured here, where the model's best is within its margin of it.
  int model_best = -1;
  if (best >= 0 && options.incumbent.has_value()) {
    for (int i = 0; i < static_cast<int>(plan.candidates.size()); ++i) {
      const Evaluation& c = plan.candidates[i];
      if (i == best || !c.feasible || !(c.candidate == *options.incumbent)) continue;
      if (c.offloaded_samples_per_s > 0 &&
          c.predicted_samples_per_s >= local * (1 + options.min_gain) &&
          c.predicted_samples_per_s * (1 + options.incumbent_margin) >=
              plan.candidates[best].predicted_samples_per_s) {
        model_best = best;
        best = i;
      }
    }
  }
  const Evaluation* e = best >= 0 ? &plan.candidates[best] : nullptr;
  std::string no_offload;
  if (profile.workers.empty()) {
    no_offload = "no workers";
  } else if (e == nullptr) {
    no_offload = "no candidate can run";
  } else if (options.require_stall &&
             !(profile.consumer.stall_fraction > options.stall_threshold)) {
    no_offload = absl::StrCat("no stall measured (", FormatPercent(profile.consumer.stall_fraction),
                              ", threshold ", FormatPercent(options.stall_threshold),
                              "); the best plan would give ",
                              FormatRate(e->predicted_samples_per_s), " samples/s");
  } else if (!(e->predicted_samples_per_s >= local * (1 + options.min_gain)) ||
             e->offloaded_samples_per_s <= 0) {
    no_offload = absl::StrCat(
        "the best plan (", CandidateName(profile, e->candidate), ") predicts ",
        FormatRate(e->predicted_samples_per_s), " samples/s, ",
        local > 0 ? absl::StrFormat("%+.1f%%", (e->predicted_samples_per_s / local - 1) * 100)
                  : std::string("?"),
        " over all-local, under the ", FormatPercent(options.min_gain), " needed to offload",
        options.min_gain_why.empty() ? "" : absl::StrCat(" (", options.min_gain_why, ")"));
  }
  if (!no_offload.empty()) {
    lines.push_back(absl::StrCat("decision: no offload: ", no_offload));
    plan.explanation = absl::StrJoin(lines, "\n");
    return plan;
  }

  plan.offload = true;
  plan.cut = e->candidate.cut;
  plan.read_mode = e->candidate.read_mode;
  plan.codec = e->candidate.codec;
  plan.ratio = e->ratio();
  plan.worker_shares = e->worker_shares();
  plan.predicted_samples_per_s = e->predicted_samples_per_s;
  std::string rounded;
  // The incumbent was measured with spill-over (Controller, rule 7).
  const bool measured_spill_over = options.incumbent_spill_over && options.incumbent.has_value() &&
                                   e->candidate == *options.incumbent;
  if (e->trainer_bound == Bound::kTrainerCpu && measured_spill_over) {
    rounded =
        "the trainer spills over (spill=all) although its CPU is the limit: a run ended on this "
        "shape with spill-over, measured faster than all-local there";
  } else if (e->trainer_bound == Bound::kTrainerCpu &&
             options.strict_local_share_when_trainer_bound) {
    // Spill-over would hand the trainer local samples whenever its executor is idle, and each
    // costs it more CPU than the receive it displaces: it keeps to the model's share, at any
    // ratio (PlannerOptions::strict_local_share_when_trainer_bound).
    plan.local_spill_over = false;
    rounded = absl::StrFormat(
        "the trainer keeps to its %.0f%% (spill=workers): its CPU is the limit, and a local "
        "sample costs it %s against %s for an offloaded one",
        (1 - plan.ratio) * 100, FormatSeconds(e->trainer_cpu_s_per_local_sample),
        FormatSeconds(e->trainer_cpu_s_per_offloaded_sample));
    const double hedged = HeldShare(*e, options.held_share_local_rate_error);
    if (hedged < plan.ratio) {
      for (double& share : plan.worker_shares) share *= hedged / plan.ratio;
      absl::StrAppend(
          &rounded,
          absl::StrFormat("; the share is set for a local rate %.0f%% above the model's (ratio "
                          "%.2f, not %.2f): the workers are at their capacity and take splits "
                          "past their share, so a share too small for them costs nothing, and "
                          "one too large idles the trainer",
                          options.held_share_local_rate_error * 100, hedged, plan.ratio));
      plan.ratio = hedged;  // the prediction stays the model's: the workers take what they can
    }
  } else if (plan.ratio >= options.full_offload_above && plan.ratio < options.full_offload_ratio) {
    const double to = options.full_offload_ratio;
    for (double& share : plan.worker_shares) share *= to / plan.ratio;
    rounded = absl::StrFormat(
        "ratio rounded up from %.2f to %.2g (at least %.2f): the trainer still takes what the "
        "workers cannot (spill-over), so the prediction stands",
        plan.ratio, to, options.full_offload_above);
    plan.ratio = to;  // the prediction stays the model's: spill-over fills the trainer
  }
  lines.push_back(
      absl::StrCat("decision: offload ", CandidateName(profile, e->candidate), ", ratio ",
                   absl::StrFormat("%.2f", plan.ratio), " -> ",
                   FormatRate(e->predicted_samples_per_s), " samples/s predicted (",
                   absl::StrFormat("%+.0f%%", (e->predicted_samples_per_s / local - 1) * 100),
                   " over all-local)"));
  lines.push_back(TrainerSideLine(*e));
  for (size_t i = 0; i < e->workers.size(); ++i) {
    lines.push_back(WorkerLine(profile, e->workers[i], i));
  }
  const int runner_up = PickRunnerUp(plan.candidates, best, options.tie_tolerance);
  if (model_best >= 0) {
    const Evaluation& m = plan.candidates[model_best];
    lines.push_back(absl::StrCat(
        "why this cut: measured faster than all-local on these workers when a run ended on it; "
        "the model's best, ",
        CandidateName(profile, m.candidate), ", predicts ", FormatRate(m.predicted_samples_per_s),
        " samples/s (",
        absl::StrFormat("%+.1f%%",
                        (m.predicted_samples_per_s / e->predicted_samples_per_s - 1) * 100),
        "), within the ", FormatPercent(options.incumbent_margin),
        " a predicted plan must gain over a measured one"));
  } else if (runner_up >= 0) {
    const Evaluation& r = plan.candidates[runner_up];
    std::string why;
    if (r.predicted_samples_per_s < e->predicted_samples_per_s * (1 - options.tie_tolerance)) {
      why = absl::StrCat(
          "predicts ", FormatRate(r.predicted_samples_per_s), " samples/s (",
          absl::StrFormat("%+.1f%%",
                          (r.predicted_samples_per_s / e->predicted_samples_per_s - 1) * 100),
          "; bound by ", BoundName(r.trainer_bound), " / ", BoundName(r.remote_bound), ")");
    } else {
      const auto same = [](double a, double b) { return std::fabs(a - b) <= 1e-6 * b; };
      const std::string ties = absl::StrCat("ties at ", FormatRate(r.predicted_samples_per_s));
      if (!same(r.wire_bytes_per_s, e->wire_bytes_per_s)) {
        why = absl::StrCat(ties, " samples/s but needs ", FormatBytes(r.wire_bytes_per_s),
                           "/s on the wire against ", FormatBytes(e->wire_bytes_per_s), "/s");
      } else if (!same(r.received_elements_per_s, e->received_elements_per_s)) {
        why = absl::StrCat(ties, " samples/s with as many bytes on the wire but receives ",
                           FormatRate(r.received_elements_per_s), " elements/s against ",
                           FormatRate(e->received_elements_per_s),
                           " (each pays the receive cost per element, the model's least known)");
      } else {
        why = absl::StrCat(ties,
                           " samples/s with as many bytes and elements on the wire but "
                           "needs ",
                           absl::StrFormat("%.3g", r.remote_cpu_s_per_s), " remote CPUs against ",
                           absl::StrFormat("%.3g", e->remote_cpu_s_per_s));
      }
    }
    lines.push_back(absl::StrCat("why this cut: the next best, ",
                                 CandidateName(profile, r.candidate), ", ", why));
  }
  lines.push_back(RatioLine(*e, options));
  if (!rounded.empty()) lines.push_back(rounded);
  plan.explanation = absl::StrJoin(lines, "\n");
  return plan;
}

}  // namespace sluice::policy
