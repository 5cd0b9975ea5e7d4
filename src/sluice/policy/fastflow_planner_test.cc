#include "sluice/policy/fastflow_planner.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::policy {
namespace {

using ::testing::HasSubstr;

FastFlowCandidateMetrics Measured(double rthp, double ocycle) {
  return FastFlowCandidateMetrics{/*measured=*/true, rthp, ocycle};
}

FastFlowMetrics Metrics(double gthp, double lthp, double pcycle,
                        std::array<FastFlowCandidateMetrics, 3> candidates, int workers) {
  FastFlowMetrics m;
  m.gthp = gthp;
  m.lthp = lthp;
  m.pcycle = pcycle;
  m.candidates = candidates;
  m.num_ops = 5;
  for (int i = 0; i < workers; ++i) m.worker_addresses.push_back(absl::StrCat("w", i));
  return m;
}

FastFlowOptions With(FastFlowRatioFormula formula) {
  FastFlowOptions o;
  o.formula = formula;
  return o;
}

struct FastFlowCase {
  std::string name;
  FastFlowRatioFormula formula;
  FastFlowMetrics metrics;
  bool offload;
  FastFlowCandidate chosen;
  double ratio;
  std::string branch;  // a substring of the branch taken
};

void PrintTo(const FastFlowCase& c, std::ostream* os) { *os << c.name; }

class FastFlowAlgorithmTest : public ::testing::TestWithParam<FastFlowCase> {};

TEST_P(FastFlowAlgorithmTest, ReproducesHandComputedDecision) {
  const FastFlowCase& c = GetParam();
  const FastFlowDecision d = PlanFastFlow(c.metrics, With(c.formula));
  EXPECT_EQ(d.plan.offload, c.offload) << d.plan.explanation;
  EXPECT_EQ(d.plan.planner, "fastflow");
  if (!c.offload) {
    EXPECT_EQ(d.plan.ratio, 0);
    return;
  }
  ASSERT_TRUE(d.chosen.has_value());
  EXPECT_EQ(*d.chosen, c.chosen);
  EXPECT_NEAR(d.plan.ratio, c.ratio, 1e-9);
  EXPECT_THAT(d.branch, HasSubstr(c.branch));
  // Equal shares.
  const double n = static_cast<double>(c.metrics.worker_addresses.size());
  for (double s : d.plan.worker_shares) EXPECT_NEAR(s, c.ratio / n, 1e-12);
}

// Case A: Gthp 300, Lthp 100, Pcycle 10; p1 (150, 4), p2 (250, 2), p3 (260, 5); 2 workers.
//   paper: scores 100(1-.4)+150 = 210, 100(.8)+250 = 330, 100(.5)+260 = 310 -> p2;
//          Upper 250, Lower (300-100)(1.2) = 240 < 250 -> ratio 250/300.
//   code:  R = 2 x Rthp: scores 360, 580, 570 -> p2; Lthp + R = 600 >= 300; Lthp 100 <= R 500:
//          off = max(500, 240) = 500, local (300-500)/300 < 0 -> 0: ratio 1.
// Case B: Gthp 400, Lthp 100, Pcycle 10; p2 (120, 3), p3 (90, 1); 1 worker; no p1.
//   paper: scores 190, 180 -> p2; Upper 120, Lower 300 x 1.3 = 390 >= 120 -> 120/220.
//   code:  R = 120; Lthp + R = 220 < 400 -> local 100/220: the same 120/220.
// Case C: Gthp 150, Lthp 100, Pcycle 10; p2 (60, 2); 1 worker.
//   paper: Upper 60, Lower 50 x 1.2 = 60, not < 60 -> 60/160 = 0.375.
//   code:  Lthp + R = 160 >= 150; Lthp 100 > R 60: off = (60 + 60)/2 = 60; local 90/150: 0.4.
// Case D: Gthp 115, Lthp 100 (1.15): over the paper's 1.1, under the code's 1.3.
//   paper: p2 (60, 2): Upper 60, Lower 15 x 1.2 = 18 < 60 -> 60/115.
const FastFlowCandidateMetrics kNone{};

INSTANTIATE_TEST_SUITE_P(
    Cases, FastFlowAlgorithmTest,
    ::testing::Values(
        FastFlowCase{
            "A_paper", FastFlowRatioFormula::kPaper,
            Metrics(300, 100, 10, {Measured(150, 4), Measured(250, 2), Measured(260, 5)}, 2), true,
            FastFlowCandidate::kElement, 250.0 / 300.0, "Upper / Gthp"},
        FastFlowCase{
            "A_code", FastFlowRatioFormula::kReleasedCode,
            Metrics(300, 100, 10, {Measured(150, 4), Measured(250, 2), Measured(260, 5)}, 2), true,
            FastFlowCandidate::kElement, 1.0, "max(R, Lower)"},
        FastFlowCase{"B_paper", FastFlowRatioFormula::kPaper,
                     Metrics(400, 100, 10, {kNone, Measured(120, 3), Measured(90, 1)}, 1), true,
                     FastFlowCandidate::kElement, 120.0 / 220.0, "Rthp / (Lthp + Rthp)"},
        FastFlowCase{"B_code", FastFlowRatioFormula::kReleasedCode,
                     Metrics(400, 100, 10, {kNone, Measured(120, 3), Measured(90, 1)}, 1), true,
                     FastFlowCandidate::kElement, 120.0 / 220.0, "Lthp / (Lthp + R)"},
        FastFlowCase{"C_paper", FastFlowRatioFormula::kPaper,
                     Metrics(150, 100, 10, {kNone, Measured(60, 2), kNone}, 1), true,
                     FastFlowCandidate::kElement, 0.375, "Rthp / (Lthp + Rthp)"},
        FastFlowCase{"C_code", FastFlowRatioFormula::kReleasedCode,
                     Metrics(150, 100, 10, {kNone, Measured(60, 2), kNone}, 1), true,
                     FastFlowCandidate::kElement, 0.4, "(R + Lower) / 2"},
        FastFlowCase{"D_paper", FastFlowRatioFormula::kPaper,
                     Metrics(115, 100, 10, {kNone, Measured(60, 2), kNone}, 1), true,
                     FastFlowCandidate::kElement, 60.0 / 115.0, "Upper / Gthp"},
        FastFlowCase{"D_code", FastFlowRatioFormula::kReleasedCode,
                     Metrics(115, 100, 10, {kNone, Measured(60, 2), kNone}, 1), false,
                     FastFlowCandidate::kElement, 0, ""},
        FastFlowCase{"NoStall_paper", FastFlowRatioFormula::kPaper,
                     Metrics(90, 100, 10, {kNone, Measured(60, 2), kNone}, 1), false,
                     FastFlowCandidate::kElement, 0, ""},
        FastFlowCase{
            "P1Wins_paper", FastFlowRatioFormula::kPaper,
            Metrics(500, 100, 10, {Measured(300, 1), Measured(200, 1), Measured(100, 1)}, 3), true,
            FastFlowCandidate::kMiddle, 300.0 / 400.0, "Rthp / (Lthp + Rthp)"}),
    [](const ::testing::TestParamInfo<FastFlowCase>& info) { return info.param.name; });

TEST(FastFlowPlannerTest, PlanMapsCandidatesToCuts) {
  FastFlowMetrics m = Metrics(500, 100, 10, {Measured(300, 1), kNone, kNone}, 2);
  FastFlowDecision d = PlanFastFlow(m, {});
  EXPECT_EQ(d.plan.cut, 5);
  EXPECT_EQ(d.plan.read_mode, ReadMode::kLocalRead);
  EXPECT_EQ(d.plan.codec, Codec::kLz4);  // snappy's stand-in
  m.candidates = {kNone, Measured(300, 1), kNone};
  d = PlanFastFlow(m, {});
  EXPECT_EQ(d.plan.cut, 5);
  EXPECT_EQ(d.plan.read_mode, ReadMode::kRemoteRead);
  m.candidates = {kNone, kNone, Measured(300, 1)};
  d = PlanFastFlow(m, {});
  EXPECT_EQ(d.plan.cut, kCutAfterBatch);
  EXPECT_EQ(d.plan.PolicyString(), "fixed:cut=batch,ratio=0.75,read=remote,compress=lz4");
  EXPECT_THAT(d.plan.explanation, HasSubstr("P' = p3 (BATCH)"));
}

TEST(FastFlowPlannerTest, ScoresAndBounds) {
  const FastFlowDecision d = PlanFastFlow(
      Metrics(300, 100, 10, {Measured(150, 4), Measured(250, 2), Measured(260, 5)}, 2), {});
  EXPECT_NEAR(d.scores[0], 210, 1e-9);
  EXPECT_NEAR(d.scores[1], 330, 1e-9);
  EXPECT_NEAR(d.scores[2], 310, 1e-9);
  EXPECT_NEAR(d.upper, 250, 1e-9);
  EXPECT_NEAR(d.lower, 240, 1e-9);
  EXPECT_TRUE(d.bottleneck);
  EXPECT_NEAR(d.plan.predicted_samples_per_s, 300, 1e-9);  // min(Gthp, score)
}

TEST(FastFlowPlannerTest, NoWorkersOrNoCandidatesNoOffload) {
  FastFlowDecision d = PlanFastFlow(Metrics(300, 100, 10, {Measured(150, 4), kNone, kNone}, 0));
  EXPECT_FALSE(d.plan.offload);
  EXPECT_THAT(d.plan.explanation, HasSubstr("no workers"));
  d = PlanFastFlow(Metrics(300, 100, 10, {kNone, kNone, kNone}, 2));
  EXPECT_FALSE(d.plan.offload);
  EXPECT_THAT(d.plan.explanation, HasSubstr("no candidate was measured"));
}

TEST(FastFlowPlannerTest, ThresholdOverride) {
  FastFlowOptions o = With(FastFlowRatioFormula::kReleasedCode);
  EXPECT_EQ(o.EffectiveThreshold(), 1.3);
  EXPECT_EQ(With(FastFlowRatioFormula::kPaper).EffectiveThreshold(), 1.1);
  const FastFlowMetrics m = Metrics(115, 100, 10, {kNone, Measured(60, 2), kNone}, 1);
  EXPECT_FALSE(FastFlowDetectsBottleneck(m, o));
  o.threshold = 1.1;
  EXPECT_TRUE(FastFlowDetectsBottleneck(m, o));
  EXPECT_TRUE(PlanFastFlow(m, o).plan.offload);
}

TEST(FastFlowPlannerTest, ProfilingRuns) {
  const std::vector<FastFlowProfilingRun> paper =
      FastFlowProfilingRuns(/*num_ops=*/5, /*first_op_reads=*/true, /*has_batch=*/true,
                            /*num_workers=*/3, With(FastFlowRatioFormula::kPaper));
  ASSERT_EQ(paper.size(), 5u);
  EXPECT_EQ(paper[0].kind, FastFlowProfilingRun::Kind::kModelOnly);
  EXPECT_EQ(paper[0].label, "Gthp");
  EXPECT_EQ(paper[1].kind, FastFlowProfilingRun::Kind::kAllLocal);
  EXPECT_EQ(paper[1].phase, 1);
  EXPECT_EQ(paper[1].placement.ratio, 0);
  EXPECT_EQ(paper[2].candidate, FastFlowCandidate::kMiddle);
  EXPECT_EQ(paper[2].placement.cut, 5);
  EXPECT_EQ(paper[2].placement.read_mode, ReadMode::kLocalRead);
  EXPECT_EQ(paper[2].phase, 2);
  EXPECT_EQ(paper[2].placement.ratio, 1.0);
  EXPECT_EQ(paper[2].num_workers, 3);
  EXPECT_EQ(paper[2].placement.codec, Codec::kLz4);
  EXPECT_EQ(paper[3].placement.cut, 5);
  EXPECT_EQ(paper[3].placement.read_mode, ReadMode::kRemoteRead);
  EXPECT_EQ(paper[4].placement.cut, kCutAfterBatch);
  EXPECT_EQ(paper[4].label, "Rthp(p3) + Ocycle(p3)");
  for (const FastFlowProfilingRun& r : paper) {
    EXPECT_EQ(r.steps, 100);
    EXPECT_EQ(r.warmup_steps, 10);
  }
  const std::vector<FastFlowProfilingRun> code =
      FastFlowProfilingRuns(5, true, true, 3, With(FastFlowRatioFormula::kReleasedCode));
  EXPECT_EQ(code[2].num_workers, 1);
  // No read_file first: no p1; no batch: no p3; no workers: phase 1 only.
  EXPECT_EQ(FastFlowProfilingRuns(5, false, true, 3).size(), 4u);
  EXPECT_EQ(FastFlowProfilingRuns(5, true, false, 3).size(), 4u);
  EXPECT_EQ(FastFlowProfilingRuns(5, true, true, 0).size(), 2u);
  // Workers without the data: only p1 (the trainer reads) is profiled.
  FastFlowOptions no_storage;
  no_storage.workers_read = false;
  const std::vector<FastFlowProfilingRun> local_only = FastFlowProfilingRuns(5, true, true, 3, no_storage);
  ASSERT_EQ(local_only.size(), 3u);
  EXPECT_EQ(local_only[2].candidate, FastFlowCandidate::kMiddle);
  EXPECT_EQ(local_only[2].placement.read_mode, ReadMode::kLocalRead);
}

}  // namespace
}  // namespace sluice::policy
