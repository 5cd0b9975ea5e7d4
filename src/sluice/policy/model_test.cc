#include "sluice/policy/model.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/policy/policy_test_util.h"

namespace sluice::policy {
namespace {

using testing::StandardProfile;
using testing::Worker;

constexpr double kTol = 1e-6;

TEST(ModelTest, BytesAtCut) {
  const Profile p = StandardProfile();
  EXPECT_EQ(BytesAtCut(p.costs, 0), 100);
  EXPECT_EQ(BytesAtCut(p.costs, 1), 100e3);
  EXPECT_EQ(BytesAtCut(p.costs, 2), 300e3);
  EXPECT_EQ(BytesAtCut(p.costs, 5), 600e3);
  EXPECT_EQ(BytesAtCut(p.costs, kCutAfterBatch), 600e3);
  EXPECT_NEAR(LocalCpuSecondsPerSample(p.costs), 1.8e-3, 1e-12);
  EXPECT_NEAR(AllLocalSamplesPerS(p), 1 / 1.8e-3, kTol);
}

// Per cut, by hand (remote_read, no compression; a_L = 1.8 ms, C_L = 1, C_w = 2):
//   cut  prefix  a_o = suffix + bytes x 1 ns   worker cap  X = min(cap, 1/a_o)  x_L         total
//   2    1.1 ms  0.7 + 0.3  = 1.0 ms           1818.2      1000                 0           1000
//   3    1.3 ms  0.5 + 0.15 = 0.65 ms          1538.5      1538.5               0           1538.5
//   4    1.4 ms  0.4 + 0.15 = 0.55 ms          1428.6      1428.6               119.05      1547.6
//   5    1.8 ms  0   + 0.6  = 0.6 ms           1111.1      1111.1               185.19      1296.3
struct CutCase {
  int cut;
  double offloaded;
  double local;
  Bound trainer;
  Bound remote;
};

void PrintTo(const CutCase& c, std::ostream* os) {
  *os << "cut " << c.cut << ": offloaded " << c.offloaded << ", local " << c.local;
}

class ModelCutTest : public ::testing::TestWithParam<CutCase> {};

TEST_P(ModelCutTest, MatchesHandComputedLp) {
  const CutCase& c = GetParam();
  const Evaluation e = Evaluate(StandardProfile(), Candidate{c.cut, ReadMode::kRemoteRead});
  ASSERT_TRUE(e.feasible) << e.reason;
  EXPECT_NEAR(e.offloaded_samples_per_s, c.offloaded, 0.05);
  EXPECT_NEAR(e.local_samples_per_s, c.local, 0.05);
  EXPECT_NEAR(e.total_samples_per_s, c.offloaded + c.local, 0.05);
  EXPECT_EQ(e.trainer_bound, c.trainer);
  EXPECT_EQ(e.remote_bound, c.remote);
  EXPECT_LE(e.trainer_cpu_utilisation, 1 + kTol);
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, ModelCutTest,
    ::testing::Values(CutCase{/*cut=*/2, /*offloaded=*/1000, /*local=*/0, Bound::kTrainerCpu,
                              Bound::kNone},
                      CutCase{/*cut=*/3, /*offloaded=*/1538.46, /*local=*/0, Bound::kTrainerCpu,
                              Bound::kWorkerCpu},
                      CutCase{/*cut=*/4, /*offloaded=*/1428.57, /*local=*/119.05,
                              Bound::kTrainerCpu, Bound::kWorkerCpu},
                      CutCase{/*cut=*/5, /*offloaded=*/1111.11, /*local=*/185.19,
                              Bound::kTrainerCpu, Bound::kWorkerCpu},
                      CutCase{/*cut=*/kCutAfterBatch, /*offloaded=*/1111.11, /*local=*/185.19,
                              Bound::kTrainerCpu, Bound::kWorkerCpu}),
    [](const ::testing::TestParamInfo<CutCase>& info) {
      return "cut_" + CutName(info.param.cut);
    });

TEST(ModelTest, CutsThatSaveTheTrainerNothingOffloadNothing) {
  // Cut 0: the worker does nothing and the trainer pays to receive; cut 1: the worker only
  // reads, and receiving the file costs what reading it does.
  for (int cut : {0, 1}) {
    const Evaluation e = Evaluate(StandardProfile(), Candidate{cut});
    EXPECT_EQ(e.offloaded_samples_per_s, 0) << cut;
    EXPECT_EQ(e.remote_bound, Bound::kNotUseful) << cut;
    EXPECT_NEAR(e.total_samples_per_s, 1 / 1.8e-3, kTol) << cut;
  }
}

TEST(ModelTest, InfeasibleCandidatesSayWhy) {
  Profile p = StandardProfile();
  EXPECT_FALSE(Evaluate(p, Candidate{6}).feasible);
  EXPECT_FALSE(Evaluate(p, Candidate{0, ReadMode::kLocalRead}).feasible);
  EXPECT_FALSE(Evaluate(p, Candidate{3, ReadMode::kRemoteRead, Codec::kZstd}).feasible);
  ModelOptions no_batch;
  no_batch.allow_after_batch = false;
  EXPECT_FALSE(Evaluate(p, Candidate{kCutAfterBatch}, no_batch).feasible);
  p.costs.ops[0].name = "decode_jpeg";
  const Evaluation e = Evaluate(p, Candidate{3, ReadMode::kLocalRead});
  EXPECT_FALSE(e.feasible);
  EXPECT_NE(e.reason.find("read_file"), std::string::npos);
}

// The engine's own 0.5 ms per local sample (queues, hand-offs) is 0.1 ms per op stage: a
// local sample pays all of it, one offloaded at cut 3 the 2 stages after the cut, one
// offloaded after batching none. The all-local rate falls from 555.6 to 1 / 2.3 ms.
TEST(ModelTest, TheEngineCostPerLocalSampleIsChargedPerStageRunHere) {
  Profile p = StandardProfile();
  p.costs.local_cpu_s_per_sample = 0.5e-3;
  EXPECT_NEAR(LocalCpuSecondsPerSample(p.costs), 2.3e-3, 1e-12);
  EXPECT_NEAR(AllLocalSamplesPerS(p), 1 / 2.3e-3, kTol);
  const Evaluation cut3 = Evaluate(p, Candidate{3});
  EXPECT_NEAR(cut3.trainer_cpu_s_per_offloaded_sample, 0.65e-3 + 0.2e-3, 1e-12);
  const Evaluation batch = Evaluate(p, Candidate{kCutAfterBatch});
  EXPECT_NEAR(batch.trainer_cpu_s_per_offloaded_sample, 0.6e-3, 1e-12);
  // Local read: the trainer also runs read_file's stage (0.1 ms of its own, 0.1 ms engine).
  const Evaluation read = Evaluate(p, Candidate{4, ReadMode::kLocalRead});
  EXPECT_NEAR(read.trainer_cpu_s_per_offloaded_sample, 0.65e-3 + 0.1e-3 + 0.1e-3, 1e-12);
  // Cut 3 is still bound by the trainer (the worker could take 1538.5 a second).
  EXPECT_NEAR(cut3.total_samples_per_s, 1 / 0.85e-3, 0.05);
  EXPECT_EQ(cut3.trainer_bound, Bound::kTrainerCpu);
}

TEST(ModelTest, LocalReadAddsReadAndUplink) {
  Profile p = StandardProfile();
  p.workers[0].link_bytes_per_s = 12.5e6;  // 100 Mbit/s
  const Evaluation e = Evaluate(p, Candidate{4, ReadMode::kLocalRead});
  ASSERT_TRUE(e.feasible);
  // a_o = 0.55 ms + read 0.1 ms; the worker runs ops [1, 4) = 1.3 ms; files go up at
  // 100 KB each (125/s) and results come back at 150 KB (83.3/s): the downlink binds.
  EXPECT_NEAR(e.trainer_cpu_s_per_offloaded_sample, 0.65e-3, 1e-12);
  EXPECT_NEAR(e.workers[0].cpu_s_per_sample, 1.3e-3, 1e-12);
  EXPECT_NEAR(e.workers[0].capacity_samples_per_s, 12.5e6 / 150e3, kTol);
  EXPECT_EQ(e.workers[0].bound, Bound::kLink);
  p.costs.ops[4].bytes_out_per_sample = 10e3;  // now the upload binds
  const Evaluation up = Evaluate(p, Candidate{5, ReadMode::kLocalRead});
  EXPECT_NEAR(up.workers[0].capacity_samples_per_s, 125, kTol);
  EXPECT_EQ(up.workers[0].bound, Bound::kUplink);
  EXPECT_NEAR(up.wire_bytes_per_s, up.offloaded_samples_per_s * 110e3, 1);
}

TEST(ModelTest, WorkerCostsMeasuredThereOrScaledBySpeed) {
  Profile p = StandardProfile();
  p.workers[0].speed_factor = 2;  // twice as fast: prefix of cut 4 costs 0.7 ms
  EXPECT_NEAR(Evaluate(p, Candidate{4}).workers[0].cpu_s_per_sample, 0.7e-3, 1e-12);
  p.workers[0].ops = {{"decode_jpeg", 1, 3.0e-3, 300e3}};  // measured there: slow decoder
  EXPECT_NEAR(Evaluate(p, Candidate{4}).workers[0].cpu_s_per_sample,
              0.05e-3 + 3.0e-3 + 0.1e-3 + 0.05e-3, 1e-12);
}

TEST(ModelTest, StorageLimitsRemoteReadOnly) {
  Profile p = StandardProfile();
  p.workers[0].storage_bytes_per_s = 20e6;  // 200 files/s
  const Evaluation remote = Evaluate(p, Candidate{4});
  EXPECT_NEAR(remote.workers[0].capacity_samples_per_s, 200, kTol);
  EXPECT_EQ(remote.workers[0].bound, Bound::kStorage);
  const Evaluation local = Evaluate(p, Candidate{4, ReadMode::kLocalRead});
  EXPECT_EQ(local.workers[0].bound, Bound::kWorkerCpu);
  p.workers[0].has_storage = false;
  const Evaluation none = Evaluate(p, Candidate{4});
  EXPECT_EQ(none.workers[0].capacity_samples_per_s, 0);
  EXPECT_EQ(none.workers[0].bound, Bound::kNoStorage);
  EXPECT_EQ(none.offloaded_samples_per_s, 0);
}

TEST(ModelTest, DemandBoundTakesTheSmallestOffload) {
  Profile p = StandardProfile();
  p.consumer.step_s = 0.080;  // 800 samples/s
  const Evaluation e = Evaluate(p, Candidate{4});
  // (800 - 555.56) / (1 - 0.55 / 1.8) = 352 offloaded, 448 local.
  EXPECT_NEAR(e.offloaded_samples_per_s, 352, 0.01);
  EXPECT_NEAR(e.local_samples_per_s, 448, 0.01);
  EXPECT_NEAR(e.predicted_samples_per_s, 800, kTol);
  EXPECT_EQ(e.trainer_bound, Bound::kDemand);
  EXPECT_NEAR(e.trainer_cpu_utilisation, 1, 1e-9);
  ModelOptions headroom;
  headroom.demand_headroom = 0.05;
  const Evaluation h = Evaluate(p, Candidate{4}, headroom);
  EXPECT_NEAR(h.total_samples_per_s, 840, 1e-6);
  EXPECT_NEAR(h.predicted_samples_per_s, 800, 1e-6);  // never above demand
  EXPECT_NEAR(h.offloaded_samples_per_s, (840 - 1 / 1.8e-3) / (1 - 0.55 / 1.8), 1e-6);
}

TEST(ModelTest, FlowsSplitInProportionToCapacity) {
  Profile p = StandardProfile();
  p.workers = {Worker("a", 1.0, 1.25e9), Worker("b", 3.0, 1.25e9), Worker("c", 3.0, 12.5e6)};
  const Evaluation e = Evaluate(p, Candidate{4});
  ASSERT_EQ(e.workers.size(), 3u);
  // Caps: a 1/1.4 ms = 714.3 (CPU), b 2142.9 (CPU), c 12.5 MB/s / 150 KB = 83.3 (link).
  EXPECT_EQ(e.workers[2].bound, Bound::kLink);
  EXPECT_NEAR(e.workers[1].samples_per_s / e.workers[0].samples_per_s, 3, 1e-9);
  EXPECT_NEAR(e.workers[0].samples_per_s / e.workers[2].samples_per_s, 714.2857 / 83.3333, 1e-4);
  // The trainer binds (1 / 0.55 ms = 1818 < 2940 of capacity): every worker equally loaded.
  EXPECT_NEAR(e.offloaded_samples_per_s, 1 / 0.55e-3, 1e-6);
  for (const WorkerFlow& w : e.workers) {
    EXPECT_NEAR(w.samples_per_s / w.capacity_samples_per_s,
                e.offloaded_samples_per_s / (714.2857 + 2142.857 + 83.3333), 1e-5);
  }
  double shares = 0;
  for (double s : e.worker_shares()) shares += s;
  EXPECT_NEAR(shares, e.ratio(), 1e-12);
}

// The greedy answer is feasible and no point of a fine grid over the flows beats it.
TEST(ModelTest, GreedyIsTheLpOptimum) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 60; ++trial) {
    Profile p = StandardProfile();
    for (OpCost& op : p.costs.ops) op.cpu_s_per_sample *= 0.3 + 1.4 * u(rng);
    p.costs.recv_cpu_s_per_sample = 0.2e-3 * u(rng);
    p.trainer_cpu_budget = 0.25 + 2 * u(rng);
    p.consumer.step_s = 0.01 + 0.1 * u(rng);
    p.workers = {Worker("a", 0.2 + 3 * u(rng), 5e6 + 2e8 * u(rng)),
                 Worker("b", 0.2 + 3 * u(rng), 5e6 + 2e8 * u(rng))};
    for (int cut : {2, 3, 4, 5}) {
      const Candidate c{cut};
      const Evaluation e = Evaluate(p, c);
      const double a_l = e.trainer_cpu_s_per_local_sample;
      const double a_o = e.trainer_cpu_s_per_offloaded_sample;
      const double demand = p.consumer.DemandSamplesPerS();
      // Feasible.
      EXPECT_LE(e.local_samples_per_s * a_l + e.offloaded_samples_per_s * a_o,
                p.trainer_cpu_budget * (1 + 1e-9));
      EXPECT_LE(e.total_samples_per_s, demand * (1 + 1e-9));
      for (const WorkerFlow& w : e.workers) {
        EXPECT_LE(w.samples_per_s, w.capacity_samples_per_s * (1 + 1e-9));
      }
      // Optimal against a grid.
      const double cap_a = e.workers[0].capacity_samples_per_s;
      const double cap_b = e.workers[1].capacity_samples_per_s;
      double grid_best = 0;
      constexpr int kSteps = 60;
      for (int i = 0; i <= kSteps; ++i) {
        for (int j = 0; j <= kSteps; ++j) {
          const double xa = cap_a * i / kSteps;
          const double xb = cap_b * j / kSteps;
          const double left = p.trainer_cpu_budget - a_o * (xa + xb);
          if (left < 0) continue;
          const double total = std::min(demand, xa + xb + left / a_l);
          grid_best = std::max(grid_best, total);
        }
      }
      EXPECT_GE(e.predicted_samples_per_s, grid_best * (1 - 1e-9))
          << "trial " << trial << " cut " << cut;
    }
  }
}

TEST(ModelTest, FixedRatioPrediction) {
  const Profile p = StandardProfile();
  // Ratio 0.5 at cut 4: per sample the trainer spends 0.5 x 1.8 + 0.5 x 0.55 = 1.175 ms,
  // so T = 851.06; the worker takes T/2 = 425.5 < 1428.6.
  const Evaluation e = EvaluateFixed(p, Candidate{4}, 0.5, {});
  EXPECT_NEAR(e.total_samples_per_s, 1 / 1.175e-3, 1e-6);
  EXPECT_EQ(e.trainer_bound, Bound::kTrainerCpu);
  // Ratio 1: the worker binds at 1428.6 (the trainer could receive 1818).
  const Evaluation all = EvaluateFixed(p, Candidate{4}, 1.0, {});
  EXPECT_NEAR(all.total_samples_per_s, 2 / 1.4e-3, 1e-6);
  EXPECT_EQ(all.remote_bound, Bound::kWorkerCpu);
  // Unequal shares: the worker with the larger share binds first.
  Profile two = p;
  two.workers = {Worker("a", 1.0, 1.25e9), Worker("b", 1.0, 1.25e9)};
  const Evaluation skew = EvaluateFixed(two, Candidate{4}, 1.0, {1, 3});
  EXPECT_NEAR(skew.total_samples_per_s, (1 / 1.4e-3) / 0.75, 1e-6);
  EXPECT_NEAR(skew.workers[1].samples_per_s, 1 / 1.4e-3, 1e-6);
}

TEST(ModelTest, EnumeratesEveryCutModeAndCodec) {
  Profile p = StandardProfile();
  p.costs.codecs.push_back(testing::Zstd());
  const std::vector<Candidate> all = EnumerateCandidates(p, {});
  // remote_read: cuts 0..5 + batch = 7; local_read: cuts 1..5 + batch = 6; x 2 codecs.
  EXPECT_EQ(all.size(), 26u);
  EXPECT_NE(std::find(all.begin(), all.end(),
                      Candidate{kCutAfterBatch, ReadMode::kLocalRead, Codec::kZstd}),
            all.end());
  p.costs.ops[0].name = "decode_jpeg";
  EXPECT_EQ(EnumerateCandidates(p, {}).size(), 14u);
}

}  // namespace
}  // namespace sluice::policy
