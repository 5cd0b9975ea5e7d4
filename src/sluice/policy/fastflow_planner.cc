#include "sluice/policy/fastflow_planner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sluice/policy/format.h"

namespace sluice::policy {
namespace {

std::string Num(double v) { return absl::StrFormat("%.4g", v); }

// Ocycle / Pcycle, 0 when Pcycle was not measured.
double CycleRatio(double ocycle, double pcycle) { return pcycle > 0 ? ocycle / pcycle : 0; }

Candidate CandidateFor(FastFlowCandidate c, int num_ops, Codec codec) {
  switch (c) {
    case FastFlowCandidate::kMiddle:
      return Candidate{num_ops, ReadMode::kLocalRead, codec};
    case FastFlowCandidate::kElement:
      return Candidate{num_ops, ReadMode::kRemoteRead, codec};
    case FastFlowCandidate::kBatch:
      break;
  }
  return Candidate{kCutAfterBatch, ReadMode::kRemoteRead, codec};
}

}  // namespace

const char* FastFlowCandidateName(FastFlowCandidate c) {
  switch (c) {
    case FastFlowCandidate::kMiddle:
      return "p1 (MIDDLE)";
    case FastFlowCandidate::kElement:
      return "p2 (ELEMENT)";
    case FastFlowCandidate::kBatch:
      break;
  }
  return "p3 (BATCH)";
}

const char* FastFlowRatioFormulaName(FastFlowRatioFormula f) {
  return f == FastFlowRatioFormula::kPaper ? "paper" : "released_code";
}

double FastFlowOptions::EffectiveThreshold() const {
  if (threshold) return *threshold;
  return formula == FastFlowRatioFormula::kPaper ? 1.1 : 1.3;
}

std::vector<FastFlowProfilingRun> FastFlowProfilingRuns(int num_ops, bool first_op_reads,
                                                        bool has_batch, int num_workers,
                                                        const FastFlowOptions& options) {
  std::vector<FastFlowProfilingRun> runs;
  FastFlowProfilingRun base;
  base.steps = options.profile_steps;
  base.warmup_steps = options.warmup_steps;

  FastFlowProfilingRun g = base;
  g.kind = FastFlowProfilingRun::Kind::kModelOnly;
  g.label = "Gthp";
  runs.push_back(g);
  FastFlowProfilingRun l = base;
  l.kind = FastFlowProfilingRun::Kind::kAllLocal;
  l.label = "Lthp + Pcycle";
  runs.push_back(l);
  if (num_workers <= 0) return runs;

  const int run_workers = options.formula == FastFlowRatioFormula::kPaper ? num_workers : 1;
  for (int i = 0; i < kFastFlowCandidates; ++i) {
    const auto c = static_cast<FastFlowCandidate>(i);
    if (c == FastFlowCandidate::kMiddle && !(first_op_reads && num_ops >= 2)) continue;
    if (c == FastFlowCandidate::kElement && num_ops < 1) continue;
    if (c == FastFlowCandidate::kBatch && !has_batch) continue;
    if (c != FastFlowCandidate::kMiddle && !options.workers_read) continue;
    FastFlowProfilingRun r = base;
    r.kind = FastFlowProfilingRun::Kind::kCandidate;
    r.phase = 2;
    r.candidate = c;
    const std::string p = absl::StrCat("p", i + 1);
    r.label = absl::StrCat("Rthp(", p, ") + Ocycle(", p, ")");
    const Candidate cand = CandidateFor(c, num_ops, options.codec);
    r.placement.cut = cand.cut;
    r.placement.read_mode = cand.read_mode;
    r.placement.codec = cand.codec;
    r.placement.ratio = 1.0;
    r.num_workers = run_workers;
    runs.push_back(r);
  }
  return runs;
}

bool FastFlowDetectsBottleneck(const FastFlowMetrics& m, const FastFlowOptions& options) {
  if (!(m.gthp > m.lthp)) return false;
  if (m.lthp <= 0) return true;
  return m.gthp / m.lthp >= options.EffectiveThreshold();
}

FastFlowDecision PlanFastFlow(const FastFlowMetrics& m, const FastFlowOptions& options) {
  FastFlowDecision d;
  d.scores.fill(-1);
  Plan& plan = d.plan;
  plan.planner = "fastflow";
  plan.worker_addresses = m.worker_addresses;
  plan.worker_shares.assign(m.worker_addresses.size(), 0.0);
  plan.predicted_local_samples_per_s = m.lthp;
  plan.predicted_samples_per_s = m.lthp;
  const bool paper = options.formula == FastFlowRatioFormula::kPaper;
  const double workers = static_cast<double>(m.worker_addresses.size());
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat("fastflow (", FastFlowRatioFormulaName(options.formula),
                               " formula): Gthp ", Num(m.gthp), ", Lthp ", Num(m.lthp), ", Pcycle ",
                               Num(m.pcycle), ", threshold ", Num(options.EffectiveThreshold())));
  auto finish = [&](const std::string& last) {
    lines.push_back(last);
    plan.explanation = absl::StrJoin(lines, "\n");
    return d;
  };

  d.bottleneck = FastFlowDetectsBottleneck(m, options);
  if (!d.bottleneck) {
    return finish(absl::StrCat(
        "decision: no offload: Gthp / Lthp = ",
        m.lthp > 0 ? Num(m.gthp / m.lthp) : std::string("-"),
        m.gthp <= m.lthp ? " (the model is no faster than the input)" : " is under the threshold"));
  }
  if (m.worker_addresses.empty()) return finish("decision: no offload: no workers");

  // P' = argmax Lthp (1 - Ocycle(p)/Pcycle) + R(p); the first candidate wins a tie.
  int best = -1;
  for (int i = 0; i < kFastFlowCandidates; ++i) {
    const FastFlowCandidateMetrics& c = m.candidates[i];
    if (!c.measured) continue;
    const double r = paper ? c.rthp : c.rthp * workers;
    d.scores[i] = m.lthp * (1 - CycleRatio(c.ocycle, m.pcycle)) + r;
    lines.push_back(absl::StrCat(FastFlowCandidateName(static_cast<FastFlowCandidate>(i)),
                                 ": Rthp ", Num(c.rthp), ", Ocycle ", Num(c.ocycle), ", score ",
                                 Num(d.scores[i])));
    if (best < 0 || d.scores[i] > d.scores[best]) best = i;
  }
  if (best < 0) return finish("decision: no offload: no candidate was measured");

  const FastFlowCandidate chosen = static_cast<FastFlowCandidate>(best);
  const FastFlowCandidateMetrics& c = m.candidates[best];
  d.chosen = chosen;
  const double cycle = CycleRatio(c.ocycle, m.pcycle);
  d.remote = paper ? c.rthp : c.rthp * workers;
  d.lower = (m.gthp - m.lthp) * (1 + cycle);
  double off_ratio = 0;
  if (paper) {
    d.upper = d.remote;
    if (d.lower < d.upper) {
      off_ratio = m.gthp > 0 ? d.upper / m.gthp : 1;
      d.branch = absl::StrCat("Lower ", Num(d.lower), " < Upper ", Num(d.upper),
                              ": OffRatio = Upper / Gthp");
    } else {
      off_ratio = m.lthp + d.remote > 0 ? d.remote / (m.lthp + d.remote) : 0;
      d.branch = absl::StrCat("Lower ", Num(d.lower), " >= Upper ", Num(d.upper),
                              ": OffRatio = Rthp / (Lthp + Rthp)");
    }
    off_ratio = std::clamp(off_ratio, 0.0, 1.0);
    d.local_ratio = 1 - off_ratio;
  } else {
    d.upper = d.remote;
    if (m.lthp + d.remote < m.gthp) {
      d.local_ratio = m.lthp + d.remote > 0 ? m.lthp / (m.lthp + d.remote) : 1;
      d.branch = absl::StrCat("Lthp + R = ", Num(m.lthp + d.remote),
                              " < Gthp: local ratio = ", "Lthp / (Lthp + R)");
    } else {
      const double off = m.lthp > d.remote ? (d.remote + d.lower) / 2 : std::max(d.remote, d.lower);
      d.local_ratio = m.gthp > 0 ? (m.gthp - off) / m.gthp : 0;
      d.branch =
          absl::StrCat("Lthp + R = ", Num(m.lthp + d.remote),
                       " >= Gthp: off = ", m.lthp > d.remote ? "(R + Lower) / 2" : "max(R, Lower)",
                       " = ", Num(off), ", local ratio = (Gthp - off) / Gthp");
    }
    d.local_ratio = std::clamp(d.local_ratio, 0.0, 1.0);
    off_ratio = 1 - d.local_ratio;
  }
  const Candidate cand = CandidateFor(chosen, m.num_ops, options.codec);
  plan.offload = off_ratio > 0;
  plan.cut = cand.cut;
  plan.read_mode = cand.read_mode;
  plan.codec = cand.codec;
  plan.ratio = off_ratio;
  for (double& s : plan.worker_shares) s = off_ratio / workers;
  // FastFlow predicts no rate; its score, capped by the model's rate, is the implied one.
  plan.predicted_samples_per_s = std::min(m.gthp, std::max(m.lthp, d.scores[best]));
  lines.push_back(absl::StrCat("P' = ", FastFlowCandidateName(chosen), "; R = ", Num(d.remote),
                               ", Lower = (Gthp - Lthp)(1 + Ocycle/Pcycle) = ", Num(d.lower)));
  lines.push_back(d.branch);
  return finish(absl::StrCat("decision: offload ", FastFlowCandidateName(chosen), " (cut ",
                             CutName(cand.cut), ", ", ReadModeName(cand.read_mode), ", ",
                             CodecName(cand.codec), "), ratio ", absl::StrFormat("%.3f", off_ratio),
                             ", equal shares over ", m.worker_addresses.size(), " workers"));
}

}  // namespace sluice::policy
