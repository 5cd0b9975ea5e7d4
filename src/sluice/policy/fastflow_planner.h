// The FastFlow baseline: Algorithm 1 of Um et al. (PVLDB 16(5), 2023), as restated in
// docs/policy.md ("The FastFlow baseline"). It decides from what FastFlow's profiling phase
// measures — short training runs, not a cost model:
//   Gthp        the model's own rate (training on one cached batch, repeated);
//   Lthp, Pcycle  the rate and the trainer's CPU time with the all-local pipeline;
//   Rthp(p), Ocycle(p)  the rate and the trainer's CPU time with candidate p run 100%
//               remotely, for p1 (MIDDLE: the trainer reads and streams the files, the
//               workers run every other element-wise op), p2 (ELEMENT: the workers read and
//               run every element-wise op) and p3 (BATCH: the workers also batch).
// Throughputs may be in any one unit (FastFlow uses MB/s of output; samples/s is the same
// up to a constant factor, and every formula is a ratio or a difference of them).
//
// Whoever runs the profiling runs (FastFlowProfilingRuns lists them, in order) fills a
// FastFlowMetrics and calls PlanFastFlow. Workers get equal shares (FastFlow assumes
// identical workers). Two formulas for the ratio: the paper's and the released code's.
//
// Pure functions; thread-safe.
#ifndef SLUICE_POLICY_FASTFLOW_PLANNER_H_
#define SLUICE_POLICY_FASTFLOW_PLANNER_H_

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "sluice/policy/plan.h"
#include "sluice/policy/profile.h"

namespace sluice::policy {

enum class FastFlowCandidate { kMiddle = 0, kElement = 1, kBatch = 2 };  // p1, p2, p3
inline constexpr int kFastFlowCandidates = 3;
// "p1 (MIDDLE)", "p2 (ELEMENT)", "p3 (BATCH)".
const char* FastFlowCandidateName(FastFlowCandidate candidate);

enum class FastFlowRatioFormula {
  // The paper: Upper = Rthp(P'), Lower = (Gthp - Lthp)(1 + Ocycle/Pcycle); offload ratio
  // Upper/Gthp if Lower < Upper, else Rthp / (Lthp + Rthp). Rthp is measured with every
  // worker; threshold 1.1.
  kPaper,
  // The released code: R = Rthp x number of workers (Rthp measured with one worker); if
  // Lthp + R < Gthp the local ratio is Lthp / (Lthp + R), else (Gthp - off) / Gthp with off =
  // (R + Lower) / 2 when Lthp > R, otherwise max(R, Lower). Threshold 1.3.
  kReleasedCode,
};
const char* FastFlowRatioFormulaName(FastFlowRatioFormula formula);

struct FastFlowOptions {
  FastFlowRatioFormula formula = FastFlowRatioFormula::kPaper;
  // Offload only if Gthp / Lthp >= threshold; unset: 1.1 (paper) or 1.3 (released code).
  std::optional<double> threshold;
  // FastFlow compresses the wire with snappy by default; lz4 is the closest codec here.
  Codec codec = Codec::kLz4;
  int profile_steps = 100;  // steps per profiling run (the paper's examples: 100 ...
  int warmup_steps = 10;    // ... after 10 warm-up steps)
  // false: the workers cannot read the data themselves (no shared storage), so the
  // candidates that read there (p2 ELEMENT, p3 BATCH) are left out and p1 (the trainer
  // reads and sends the bytes) is the one FastFlow can use.
  bool workers_read = true;

  double EffectiveThreshold() const;
};

struct FastFlowCandidateMetrics {
  bool measured = false;  // false: the candidate could not run (e.g. p1 without read_file)
  double rthp = 0;        // training rate with the candidate 100% remote
  double ocycle = 0;      // trainer CPU seconds during that run
};

struct FastFlowMetrics {
  double gthp = 0;    // the model's own rate
  double lthp = 0;    // the all-local rate
  double pcycle = 0;  // trainer CPU seconds during the all-local run
  // Indexed by FastFlowCandidate. Ocycle and Pcycle must come from runs of equal length
  // (same steps): their ratio is what counts.
  std::array<FastFlowCandidateMetrics, kFastFlowCandidates> candidates;
  // Where the candidates cut the pipeline (for the Plan), and the workers to share among.
  int num_ops = 0;
  std::vector<std::string> worker_addresses;
};

// One profiling run FastFlow needs, in the order it runs them. Phase 1 (Gthp, Lthp) always;
// phase 2 (the candidates) only if FastFlowDetectsBottleneck says so.
struct FastFlowProfilingRun {
  enum class Kind { kModelOnly, kAllLocal, kCandidate };
  Kind kind = Kind::kAllLocal;
  int phase = 1;
  std::string label;  // "Gthp", "Lthp + Pcycle", "Rthp(p2) + Ocycle(p2)"
  FastFlowCandidate candidate = FastFlowCandidate::kElement;  // kCandidate only
  // The Loader plan of the run: kModelOnly trains on one cached batch repeated
  // (FastFlow's take(1).cache().repeat()); kAllLocal is ratio 0; the candidates run at
  // ratio 1.0 (100% remote), equal shares.
  Placement placement;
  int num_workers = 0;  // workers the run uses (paper: all; released code: one)
  int steps = 0;
  int warmup_steps = 0;
};

// The runs, given the pipeline's shape: p1 needs ops[0] = read_file (and a later op), p3 a
// batch; a candidate that cannot run is left out (and is left unmeasured in the metrics).
std::vector<FastFlowProfilingRun> FastFlowProfilingRuns(int num_ops, bool first_op_reads,
                                                        bool has_batch, int num_workers,
                                                        const FastFlowOptions& options = {});

// Phase 1's verdict: true if Gthp > Lthp and Gthp / Lthp >= threshold (a prep stall worth
// offloading), so phase 2 must run.
bool FastFlowDetectsBottleneck(const FastFlowMetrics& metrics, const FastFlowOptions& options);

struct FastFlowDecision {
  Plan plan;                                         // planner "fastflow"
  bool bottleneck = false;                           // phase 1's verdict
  std::optional<FastFlowCandidate> chosen;           // P'
  std::array<double, kFastFlowCandidates> scores{};  // Lthp (1 - Ocycle/Pcycle) + R (or -1)
  double remote = 0;  // R: Rthp(P') (paper), Rthp(P') x workers (released code)
  double upper = 0;
  double lower = 0;
  double local_ratio = 1;
  std::string branch;  // which branch set the ratio, in the formula's words
};

// Algorithm 1. The plan's cut: p1 = num_ops in local_read, p2 = num_ops in remote_read,
// p3 = after batch; ratio = 1 - local_ratio clamped to [0, 1]; equal worker shares.
FastFlowDecision PlanFastFlow(const FastFlowMetrics& metrics, const FastFlowOptions& options = {});

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_FASTFLOW_PLANNER_H_
