#include "sluice/policy/sluice_planner.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/policy/policy_test_util.h"

namespace sluice::policy {
namespace {

using ::testing::HasSubstr;
using testing::StandardProfile;
using testing::Worker;
using testing::Zstd;

PlannerOptions Exact() {
  PlannerOptions o;
  o.demand_headroom = 0;
  o.tie_tolerance = 0;
  o.full_offload_above = 1;  // the model's own ratio
  o.strict_local_share_when_trainer_bound = false;  // and the default spill-over
  return o;
}

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

TEST(SluicePlannerTest, NoStallNoOffload) {
  Profile p = StandardProfile();
  p.consumer.stall_fraction = 0.01;  // under 5%, although a worker would help a lot
  const Plan plan = PlanSluice(p, Exact());
  EXPECT_FALSE(plan.offload);
  EXPECT_EQ(plan.ratio, 0);
  EXPECT_EQ(plan.PolicyString(), "none");
  EXPECT_THAT(plan.explanation, HasSubstr("no stall measured"));
  EXPECT_NEAR(plan.predicted_samples_per_s, 1 / 1.8e-3, 1e-6);
  // The table is still there for `sluice plan`.
  EXPECT_FALSE(plan.candidates.empty());
  // Once offloading is under way the stall test is skipped.
  PlannerOptions running = Exact();
  running.require_stall = false;
  EXPECT_TRUE(PlanSluice(p, running).offload);
}

TEST(SluicePlannerTest, StallButSmallGainNoOffload) {
  Profile p = StandardProfile();
  // A 0.1-CPU worker: at best cut 4, 555.6 + 71.4 x (1 - 0.55/1.8) = 605.2 (+8.9%).
  p.workers = {Worker("tiny", 0.1, 1.25e9)};
  const Plan plan = PlanSluice(p, Exact());
  EXPECT_FALSE(plan.offload);
  EXPECT_THAT(plan.explanation, HasSubstr("under the 10.0% needed"));
  EXPECT_THAT(plan.explanation, HasSubstr("+8.9%"));
  PlannerOptions eager = Exact();
  eager.min_gain = 0.05;
  EXPECT_TRUE(PlanSluice(p, eager).offload);
}

TEST(SluicePlannerTest, NoWorkersNoOffload) {
  Profile p = StandardProfile();
  p.workers.clear();
  const Plan plan = PlanSluice(p);
  EXPECT_FALSE(plan.offload);
  EXPECT_THAT(plan.explanation, HasSubstr("no workers"));
}

TEST(SluicePlannerTest, InvalidProfileNoOffloadWithReason) {
  Profile p = StandardProfile();
  p.costs.ops[1].cpu_s_per_sample = -1;
  const Plan plan = PlanSluice(p);
  EXPECT_FALSE(plan.offload);
  EXPECT_THAT(plan.explanation, HasSubstr("costs.ops[1].cpu_s_per_sample"));
}

// Trainer-CPU-bound with a 10 Gbit link: the model_test table's best row, cut 4 (before
// normalize), X = 2 / 1.4 ms = 10000/7, x_L = (1 - 0.55 ms X) / 1.8 ms = 2500/21,
// ratio = X / (X + x_L) = 12/13.
TEST(SluicePlannerTest, CpuBoundTrainerFastLinkEarlyCut) {
  const Plan plan = PlanSluice(StandardProfile(), Exact());
  ASSERT_TRUE(plan.offload) << plan.explanation;
  EXPECT_EQ(plan.planner, "sluice");
  EXPECT_EQ(plan.cut, 4);
  EXPECT_EQ(plan.read_mode, ReadMode::kRemoteRead);
  EXPECT_EQ(plan.codec, Codec::kNone);
  EXPECT_NEAR(plan.ratio, 12.0 / 13.0, 1e-9);
  ASSERT_EQ(plan.worker_shares.size(), 1u);
  EXPECT_NEAR(plan.worker_shares[0], 12.0 / 13.0, 1e-9);
  EXPECT_NEAR(plan.predicted_samples_per_s, 32500.0 / 21.0, 1e-6);
  EXPECT_NEAR(plan.predicted_local_samples_per_s, 1 / 1.8e-3, 1e-6);
  EXPECT_EQ(plan.PolicyString(), "fixed:cut=4,ratio=0.9231,read=remote,compress=none");
  EXPECT_THAT(plan.explanation, HasSubstr("cut 4 (after random_flip)"));
  EXPECT_THAT(plan.explanation, HasSubstr("why this cut: the next best, cut 3"));
  EXPECT_THAT(plan.explanation, HasSubstr("why this ratio: the workers take all they can"));
  EXPECT_THAT(plan.explanation, HasSubstr("trainer side: bound by its CPU"));
  EXPECT_THAT(plan.explanation, HasSubstr("worker w1:7070"));
  const std::string table = FormatCandidateTable(StandardProfile(), plan);
  EXPECT_THAT(table, HasSubstr("* 4      remote_read"));
}

TEST(SluicePlannerTest, SlowLinkPicksFewerBytes) {
  Profile p = StandardProfile();
  p.workers[0].link_bytes_per_s = 12.5e6;  // 100 Mbit/s
  // Link caps: cut 2 41.7/s, cuts 3-4 83.3/s, cut 5 20.8/s. Gains over 555.6: cut 4
  // 83.3 x (1 - 0.55/1.8) = 57.9 (+10.4%), cut 3 53.2, cut 5 13.9: cut 4, before the float
  // expansion of normalize.
  const Plan plan = PlanSluice(p, Exact());
  ASSERT_TRUE(plan.offload) << plan.explanation;
  EXPECT_EQ(plan.cut, 4);
  EXPECT_EQ(plan.codec, Codec::kNone);
  EXPECT_NEAR(plan.predicted_samples_per_s, 1 / 1.8e-3 + 12.5e6 / 150e3 * (1 - 0.55 / 1.8), 1e-6);
  EXPECT_THAT(plan.explanation, HasSubstr("set by its link"));
}

TEST(SluicePlannerTest, SlowLinkCompressesWhenItPays) {
  Profile p = StandardProfile();
  p.workers[0].link_bytes_per_s = 12.5e6;
  p.costs.codecs.push_back(Zstd());
  // zstd at cut 4: 75 KB on the wire (166.7/s), the worker adds 0.3 ms (cap 1176/s), the
  // trainer receives at 1.5 ns/B: a_o = 0.625 ms. 555.6 + 166.7 x (1 - 0.625/1.8) = 664.4.
  const Plan plan = PlanSluice(p, Exact());
  ASSERT_TRUE(plan.offload);
  EXPECT_EQ(plan.cut, 4);
  EXPECT_EQ(plan.codec, Codec::kZstd);
  EXPECT_NEAR(plan.predicted_samples_per_s, 1 / 1.8e-3 + 12.5e6 / 75e3 * (1 - 0.625 / 1.8), 1e-6);
  // A ratio measured on the output holds after batching and at cut 5 only: cut 4's bytes
  // count as incompressible, so zstd there buys nothing and is not chosen at cut 4.
  Profile output_only = p;
  output_only.costs.codecs.back().measured_at_cut = kCutAfterBatch;
  const Plan at_output = PlanSluice(output_only, Exact());
  EXPECT_TRUE(at_output.codec == Codec::kNone || at_output.cut == 5 ||
              at_output.cut == kCutAfterBatch)
      << at_output.explanation;
  EXPECT_LT(at_output.predicted_samples_per_s, plan.predicted_samples_per_s);
  // On the fast link compression only costs CPU: not chosen.
  Profile fast = StandardProfile();
  fast.costs.codecs.push_back(Zstd());
  EXPECT_EQ(PlanSluice(fast, Exact()).codec, Codec::kNone);
}

// Each cut reads its own ratio (Costs::CostAt): zstd read at the output (1.05, normalized
// floats) and at cut 4 (2.0, the uint8 pixels before normalize) plans cut 4 with zstd at its
// own ratio; read at cut 3 only, it buys cut 4 nothing.
TEST(SluicePlannerTest, EachCutCompressesAtTheRatioReadThere) {
  Profile p = StandardProfile();
  p.workers[0].link_bytes_per_s = 12.5e6;
  CodecCost at_output = Zstd();
  at_output.ratio = 1.05;
  at_output.measured_at_cut = kCutAfterBatch;
  CodecCost at_4 = Zstd();
  at_4.measured_at_cut = 4;
  p.costs.codecs.push_back(at_output);
  p.costs.codecs.push_back(at_4);
  ASSERT_EQ(p.costs.CostAt(Codec::kZstd, 4, 5)->ratio, 2.0);
  ASSERT_EQ(p.costs.CostAt(Codec::kZstd, 5, 5)->ratio, 1.05);
  ASSERT_EQ(p.costs.CostAt(Codec::kZstd, kCutAfterBatch, 5)->ratio, 1.05);
  ASSERT_EQ(p.costs.CostAt(Codec::kZstd, 3, 5)->ratio, 1.0);
  const Plan plan = PlanSluice(p, Exact());
  ASSERT_TRUE(plan.offload);
  EXPECT_EQ(plan.cut, 4);
  EXPECT_EQ(plan.codec, Codec::kZstd);
  // The same figures as with one ratio for every cut (SlowLinkCompressesWhenItPays).
  EXPECT_NEAR(plan.predicted_samples_per_s, 1 / 1.8e-3 + 12.5e6 / 75e3 * (1 - 0.625 / 1.8), 1e-6);

  Profile elsewhere = StandardProfile();
  elsewhere.workers[0].link_bytes_per_s = 12.5e6;
  CodecCost at_3 = Zstd();
  at_3.measured_at_cut = 3;
  elsewhere.costs.codecs.push_back(at_output);
  elsewhere.costs.codecs.push_back(at_3);
  const Plan other = PlanSluice(elsewhere, Exact());
  EXPECT_FALSE(other.cut == 4 && other.codec == Codec::kZstd) << other.explanation;
  EXPECT_LT(other.predicted_samples_per_s, plan.predicted_samples_per_s);
}

// The standard profile's model ratio is 1428 / (1428 + 119) = 0.92, with the trainer's CPU
// the limit (1428 offloaded samples at 0.55 ms take 79% of it) and the worker at its
// capacity: the trainer keeps to its share (spill=workers), since each local sample costs it
// 1.8 ms against 0.55 ms for an offloaded one, and the share is set for a local rate 12%
// above the model's, 1428 / (1428 + 1.12 x 119) = 0.915: a share too small for the worker
// costs nothing (it takes splits past its share), one too large idles the trainer.
TEST(SluicePlannerTest, TrainerBoundPlanKeepsTheTrainerToItsShare) {
  const Plan exact = PlanSluice(StandardProfile(), Exact());
  ASSERT_TRUE(exact.offload);
  EXPECT_NEAR(exact.ratio, 1428.57 / (1428.57 + 119.05), 1e-3);
  const Plan plan = PlanSluice(StandardProfile());
  ASSERT_TRUE(plan.offload);
  EXPECT_EQ(plan.cut, exact.cut);
  const double held = 1428.57 / (1428.57 + 1.12 * 119.05);
  EXPECT_NEAR(plan.ratio, held, 1e-4);
  EXPECT_LT(plan.ratio, exact.ratio);
  EXPECT_FALSE(plan.local_spill_over);
  EXPECT_NEAR(Sum(plan.worker_shares), plan.ratio, 1e-12);
  EXPECT_THAT(plan.explanation, HasSubstr("the trainer keeps to its 8% (spill=workers)"));
  EXPECT_THAT(plan.explanation, HasSubstr("1.80 ms against 550 us"));
  EXPECT_THAT(plan.explanation,
              HasSubstr("the share is set for a local rate 12% above the model's (ratio 0.91, "
                        "not 0.92)"));
  EXPECT_NEAR(plan.predicted_samples_per_s, exact.predicted_samples_per_s, 1e-6);
  // Without the margin, the model's own ratio.
  PlannerOptions model_share;
  model_share.held_share_local_rate_error = 0;
  EXPECT_DOUBLE_EQ(PlanSluice(StandardProfile(), model_share).ratio, exact.ratio);
  EXPECT_THAT(plan.PolicyString(), ::testing::EndsWith(",spill=workers"));
  // The switch gives the rounding to full offload, with spill-over.
  PlannerOptions spill;
  spill.strict_local_share_when_trainer_bound = false;
  const Plan spilled = PlanSluice(StandardProfile(), spill);
  EXPECT_TRUE(spilled.local_spill_over);
  EXPECT_DOUBLE_EQ(spilled.ratio, 0.99);
  EXPECT_NEAR(Sum(spilled.worker_shares), 0.99, 1e-12);
  EXPECT_THAT(spilled.explanation, HasSubstr("rounded up from 0.92 to 0.99"));
  EXPECT_NEAR(spilled.predicted_samples_per_s, exact.predicted_samples_per_s, 1e-6);
  spill.full_offload_above = 1;
  EXPECT_LT(PlanSluice(StandardProfile(), spill).ratio, 0.93);
}

// At any ratio: with a 0.5-CPU worker (357 samples/s at cut 4) the model's ratio is about
// 0.44 and the trainer's CPU still binds, so the trainer keeps to its share there too. Its
// executor, idle between splits, would otherwise take a split whenever the workers are at
// their open-split cap, and a trainer busy on local samples reads the workers' streams late,
// which keeps them at that cap: on unequal-workers cut 2 at ratio 0.81 measured 2,239 and
// 2,147 samples/s with spill-over against 2,488 and 2,372 with the trainer held to its share.
TEST(SluicePlannerTest, TrainerBoundPlanKeepsTheTrainerToItsShareAtAnyRatio) {
  Profile p = StandardProfile();
  p.workers = {Worker("w1:7070", 0.5, 1.25e9)};
  const Plan plan = PlanSluice(p);
  ASSERT_TRUE(plan.offload) << plan.explanation;
  EXPECT_LT(plan.ratio, 0.5);
  EXPECT_FALSE(plan.local_spill_over);
  EXPECT_THAT(plan.PolicyString(), ::testing::EndsWith(",spill=workers"));
  EXPECT_THAT(plan.explanation, HasSubstr("(spill=workers): its CPU is the limit"));
  PlannerOptions spill;
  spill.strict_local_share_when_trainer_bound = false;
  EXPECT_TRUE(PlanSluice(p, spill).local_spill_over);
}

// Demand binds, not the trainer's CPU: a 3-CPU worker (2142 samples/s at cut 4) and demand
// 1500 samples/s. Without headroom, the smallest offload that meets demand leaves the
// trainer 140 local samples/s ((1500 - x) x 0.55 ms + x x 1.8 ms = 1 s), a ratio of 0.91. Rounded to 0.99, not 1: at 1 the worker alone
// would be the plan, and spill-over lets the trainer cover a worker slower than planned.
// The trainer has no reason to keep to its share here: it spills over.
TEST(SluicePlannerTest, DemandBoundPlanKeepsSpillOverWhenRoundedUp) {
  Profile p = StandardProfile();
  p.workers = {Worker("w1:7070", 3.0, 1.25e9)};
  p.consumer.step_s = 64 / 1500.0;
  const Plan exact = PlanSluice(p, Exact());
  ASSERT_TRUE(exact.offload);
  EXPECT_NEAR(exact.ratio, 1 - 140.0 / 1500, 1e-3);
  const Plan plan = PlanSluice(p);
  ASSERT_TRUE(plan.offload);
  EXPECT_EQ(plan.cut, 4);
  EXPECT_DOUBLE_EQ(plan.ratio, 0.99);
  EXPECT_TRUE(plan.local_spill_over);
  EXPECT_EQ(plan.PolicyString().find("spill"), std::string::npos);
  EXPECT_THAT(plan.explanation, HasSubstr("to 0.99"));
  EXPECT_THAT(plan.explanation, HasSubstr("spill-over"));
}

// A batch of the standard pipeline's output is 64 x 600 KB = 38.4 MB: under a 32 MB message
// limit the after-batch candidate cannot run, and says why.
TEST(SluicePlannerTest, CandidatesOverTheMessageLimitCannotRun) {
  PlannerOptions o = Exact();
  o.max_message_bytes = 32e6;
  const Plan plan = PlanSluice(StandardProfile(), o);
  bool seen = false;
  for (const Evaluation& e : plan.candidates) {
    if (e.candidate.cut != kCutAfterBatch) {
      EXPECT_TRUE(e.feasible) << e.reason;  // 600 KB samples fit
      continue;
    }
    seen = true;
    EXPECT_FALSE(e.feasible);
    EXPECT_THAT(e.reason, HasSubstr("a batch is 38.4 MB, over the 32.0 MB message limit"));
  }
  EXPECT_TRUE(seen);
  EXPECT_NE(plan.cut, kCutAfterBatch);
  // The default limit (64 MiB) lets it run.
  for (const Evaluation& e : PlanSluice(StandardProfile(), Exact()).candidates) {
    EXPECT_TRUE(e.feasible) << e.reason;
  }
}

TEST(SluicePlannerTest, UnequalWorkersGetSharesProportionalToCapacity) {
  Profile p = StandardProfile();
  p.workers = {Worker("small", 1.0, 1.25e9), Worker("big", 3.0, 1.25e9)};
  // Cut 4: the trainer can receive 1 / 0.55 ms = 1818 < 4 / 1.4 ms = 2857: all offloaded,
  // split 1:3.
  const Plan plan = PlanSluice(p, Exact());
  ASSERT_TRUE(plan.offload);
  EXPECT_EQ(plan.cut, 4);
  EXPECT_NEAR(plan.ratio, 1.0, 1e-9);
  ASSERT_EQ(plan.worker_shares.size(), 2u);
  EXPECT_NEAR(plan.worker_shares[0], 0.25, 1e-9);
  EXPECT_NEAR(plan.worker_shares[1], 0.75, 1e-9);
  EXPECT_EQ(plan.worker_addresses[1], "big");
  // A big worker behind a slow link gets less than a small one on a fast link.
  p.workers[1].link_bytes_per_s = 12.5e6;  // 83.3/s at cut 4
  const Plan slow = PlanSluice(p, Exact());
  ASSERT_TRUE(slow.offload);
  EXPECT_GT(slow.worker_shares[0], slow.worker_shares[1]);
  EXPECT_NEAR(Sum(slow.worker_shares), slow.ratio, 1e-12);
}

TEST(SluicePlannerTest, WorkerWithoutStorageGetsLocalRead) {
  Profile p = StandardProfile();
  p.workers[0].has_storage = false;
  const Plan plan = PlanSluice(p, Exact());
  ASSERT_TRUE(plan.offload) << plan.explanation;
  EXPECT_EQ(plan.read_mode, ReadMode::kLocalRead);
  EXPECT_GE(plan.cut, 2);
  EXPECT_THAT(plan.PolicyString(), HasSubstr("read=local"));
  // Every remote_read candidate leaves that worker idle.
  for (const Evaluation& e : plan.candidates) {
    if (e.candidate.read_mode == ReadMode::kRemoteRead && e.candidate.cut != 0) {
      EXPECT_EQ(e.offloaded_samples_per_s, 0);
    }
  }
  // A pipeline that does not start with read_file cannot stream files: no offload.
  p.costs.ops[0].name = "decode_png";
  EXPECT_FALSE(PlanSluice(p, Exact()).offload);
}

TEST(SluicePlannerTest, MixedStorageOnlyStorageWorkersInRemoteRead) {
  Profile p = StandardProfile();
  p.workers = {Worker("disk", 2.0, 1.25e9), Worker("diskless", 2.0, 1.25e9)};
  p.workers[1].has_storage = false;
  const Plan plan = PlanSluice(p, Exact());
  ASSERT_TRUE(plan.offload);
  if (plan.read_mode == ReadMode::kRemoteRead) {
    EXPECT_EQ(plan.worker_shares[1], 0);
  } else {
    EXPECT_GT(plan.worker_shares[1], 0);
  }
}

TEST(SluicePlannerTest, AcceleratorBoundRatioCappedByDemand) {
  Profile p = StandardProfile();
  p.consumer.step_s = 0.080;  // 800 samples/s; all-local 555.6: stall
  // Every cut from 2 on reaches 800; the smallest offload at each: cut 4 352/s (52.8 MB/s),
  // cut 3 382.6/s (57.4 MB/s), cut 5 366.7/s (220 MB/s): the tie goes to cut 4's fewer bytes.
  const Plan plan = PlanSluice(p, Exact());
  ASSERT_TRUE(plan.offload);
  EXPECT_EQ(plan.cut, 4);
  EXPECT_NEAR(plan.predicted_samples_per_s, 800, 1e-6);
  EXPECT_NEAR(plan.ratio, 0.44, 1e-9);
  EXPECT_THAT(plan.explanation, HasSubstr("smallest offload that meets demand"));
  EXPECT_THAT(plan.explanation, HasSubstr("ties at 800"));
  // With 5% headroom the flows aim at 840: ratio (840 - 555.6) / 0.6944 / 840.
  const Plan headroom = PlanSluice(p);
  EXPECT_NEAR(headroom.ratio, (840 - 1 / 1.8e-3) / (1 - 0.55 / 1.8) / 840, 1e-6);
  EXPECT_NEAR(headroom.predicted_samples_per_s, 800, 1e-6);
}

TEST(SluicePlannerTest, PredictedStall) {
  Profile p = StandardProfile();
  EXPECT_NEAR(PredictedStallFraction(p), 1 - (1 / 1.8e-3) / 3200, 1e-9);
  p.consumer.step_s = 0.5;  // 128 samples/s: no stall
  EXPECT_EQ(PredictedStallFraction(p), 0);
  p.consumer.step_s = 0;  // not measured
  EXPECT_EQ(PredictedStallFraction(p), 0);
}

TEST(SluicePlannerTest, PlanJson) {
  const Plan plan = PlanSluice(StandardProfile(), Exact());
  const nlohmann::json j = ToJson(plan);
  EXPECT_EQ(j["cut"], 4);
  EXPECT_EQ(j["read_mode"], "remote_read");
  EXPECT_EQ(j["compression"], "none");
  EXPECT_EQ(j["workers"][0]["address"], "w1:7070");
  EXPECT_NEAR(j["ratio"].get<double>(), 12.0 / 13.0, 1e-9);
  EXPECT_EQ(j["candidates"].size(), plan.candidates.size());
  Plan batch = plan;
  batch.cut = kCutAfterBatch;
  EXPECT_EQ(ToJson(batch)["cut"], "batch");
}

TEST(SluicePlannerTest, FixedAndNonePlans) {
  const Profile p = StandardProfile();
  const Plan fixed = PlanFixed(p, Candidate{4}, 0.5);
  EXPECT_TRUE(fixed.offload);
  EXPECT_EQ(fixed.planner, "fixed");
  EXPECT_NEAR(fixed.predicted_samples_per_s, 1 / 1.175e-3, 1e-6);
  EXPECT_EQ(fixed.PolicyString(), "fixed:cut=4,ratio=0.5,read=remote,compress=none");
  const Plan full = PlanFixed(p, Candidate{kCutAfterBatch}, 1.0);
  EXPECT_EQ(full.PolicyString(), "fixed:cut=batch,ratio=1,read=remote,compress=none");
  const Plan bad = PlanFixed(p, Candidate{0, ReadMode::kLocalRead}, 0.5);
  EXPECT_FALSE(bad.offload);
  EXPECT_THAT(bad.explanation, HasSubstr("cannot run"));
  const Plan none = PlanNone(p, "asked for none");
  EXPECT_EQ(none.PolicyString(), "none");
  EXPECT_EQ(none.worker_shares, std::vector<double>{0});
}


// The `make demo` cluster as its metric store had it (half a CPU, one worker with a whole one
// on 10 Gbit, a 20 ms step, 320x240 JPEGs; costs as measured): planned without the worker's
// cost of sending, after-batch won (predicted 1853 samples/s) and measured 1290, the worker
// spending on 0.6 MB of floats per sample as much CPU as on its ops. With that cost taken at
// the trainer's per-byte receive cost, cut 4 wins, and after-batch's worker is held to what
// it delivered.
TEST(SluicePlannerTest, TheWorkersCostOfSendingKeepsTheDemoOffAfterBatch) {
  Profile p;
  p.costs.ops = {{"read_file", 0, 19.5e-6, 23790},
                 {"decode_jpeg", 1, 256.3e-6, 100002},
                 {"random_resized_crop", 2, 87.0e-6, 150620},
                 {"random_flip", 3, 24.4e-6, 150620},
                 {"normalize", 4, 105.8e-6, 602204}};
  p.costs.source_bytes_per_sample = 100;
  p.costs.raw_bytes_per_sample = 23790;
  p.costs.batch_cpu_s_per_sample = 90.3e-6;
  p.costs.recv_cpu_s_per_sample = 54.0e-6;
  p.costs.codecs = {{Codec::kNone, 1.0, 0, 0.409e-9, kAnyCut}};
  p.consumer.step_s = 0.0201;
  p.consumer.batch_size = 64;
  p.consumer.stall_fraction = 0.63;
  p.trainer_cpu_budget = 0.5;
  p.workers = {Worker("w0:7700", 1.0, 1.25e9)};

  const Plan without = PlanSluice(p);
  EXPECT_EQ(without.cut, kCutAfterBatch);  // what the demo ran, and measured at 1290

  p.costs.worker_send_cpu_s_per_byte = 0.409e-9;
  const Plan with = PlanSluice(p);
  EXPECT_EQ(with.cut, 4) << with.explanation;
  ModelOptions model;
  const Evaluation after_batch = Evaluate(p, {kCutAfterBatch}, model);
  ASSERT_EQ(after_batch.workers.size(), 1u);
  // (583 us of ops and batching + 602 KB x 0.409 ns) per sample on one CPU.
  EXPECT_NEAR(after_batch.workers[0].capacity_samples_per_s, 1.0 / (583.3e-6 + 602204 * 0.409e-9),
              1);
  EXPECT_LT(after_batch.workers[0].capacity_samples_per_s, 1400);
}
// The unequal-workers scenario (a 0.5-CPU trainer; workers of 0.25 and 1.0 CPU on 1 Gbit
// links; a 15 ms step; 320x240 JPEGs cropped to 224x224): its first run fitted receiving at
// cut 4 on the whole process, 297 us per element, and saved it. Divided by the batch, later
// runs priced after-batch at ~5 us a sample and planned it; it measured 649 samples/s
// against ~980 for cut 4 (BENCHMARKS, "planner trust"). Read per byte at the larger
// elements, the fit keeps the plan at cut 4.
// A receive cost fitted on the whole process at cut 4 is the part left over once the bytes
// are charged at the per-byte rate: it is charged per element at every cut, once per batch
// after batching, and the bytes at the per-byte rate. The figures are the receive path's
// (bench/receive_cost.py on the image pipeline: about 55 us per element, 0.2 ns per byte).
TEST(SluicePlannerTest, AReceiveCostFittedPerElementIsPaidOncePerBatch) {
  Profile p = testing::UnequalWorkersProfile();
  p.costs.recv_cpu_s_per_sample = 55e-6;
  p.costs.recv_fit_bytes_per_element = 150528;  // fitted at cut 4
  p.costs.codecs = {{Codec::kNone, 1.0, 0, 0.2e-9, kAnyCut}};
  const ModelOptions model;
  const Evaluation cut4 = Evaluate(p, {4}, model);
  const Evaluation after_batch = Evaluate(p, {kCutAfterBatch}, model);
  const int n = static_cast<int>(p.costs.ops.size());
  const double batch_bytes = p.costs.ops[n - 1].bytes_out_per_sample;
  ASSERT_GT(batch_bytes, 150528);  // a batched sample is larger than cut 4's element
  EXPECT_NEAR(after_batch.trainer_cpu_s_per_offloaded_sample,
              55e-6 / p.consumer.batch_size + batch_bytes * 0.2e-9, 1e-7);
  EXPECT_NEAR(cut4.trainer_cpu_s_per_offloaded_sample,
              55e-6 + 150528 * 0.2e-9 + p.costs.TrainerCpuSeconds(4, n) +
                  p.costs.batch_cpu_s_per_sample,
              1e-7);
  // Where the elements were no larger (the fit's own cut, cut 0), the same per element.
  const Evaluation cut0 = Evaluate(p, {0}, model);
  EXPECT_NEAR(cut0.trainer_cpu_s_per_offloaded_sample,
              55e-6 + p.costs.source_bytes_per_sample * 0.2e-9 + p.costs.TrainerCpuSeconds(0, n) +
                  p.costs.batch_cpu_s_per_sample,
              1e-7);
}

// random-17 (docs/BENCHMARKS.md): the last ops keep the sample's size, the worker is bound by
// its link, and the last element-wise cut and after batching tie within the tolerance with
// as many bytes on the wire. The tie goes to after batching, which receives a 64th of the
// elements and so rests least on the receive cost per element, the model's least known
// (a 5 us default there; the run's own fit read 64 us, and the cut it had taken lost 6 s).
TEST(SluicePlannerTest, ATieWithAsManyBytesGoesToThePlanThatReceivesFewerElements) {
  Profile p = StandardProfile();
  p.costs.ops[4] = {"scale", 4, 0.4e-3, 150e3};  // keeps the 150 KB of the crop
  p.costs.batch_cpu_s_per_sample = 20e-6;        // after batching the worker stacks: more CPU
  p.costs.recv_cpu_s_per_sample = 5e-6;
  p.workers = {Worker("w1:7070", 2.0, 45e6)};  // 300 samples/s of 150 KB at any cut from 3
  const Evaluation cut5 = Evaluate(p, {5}, {});
  const Evaluation after_batch = Evaluate(p, {kCutAfterBatch}, {});
  ASSERT_NEAR(cut5.wire_bytes_per_s, after_batch.wire_bytes_per_s, 1e-6);
  ASSERT_GT(after_batch.remote_cpu_s_per_s, cut5.remote_cpu_s_per_s);
  ASSERT_NEAR(after_batch.predicted_samples_per_s / cut5.predicted_samples_per_s, 1, 0.01);
  EXPECT_NEAR(cut5.received_elements_per_s, 300, 1e-6);
  EXPECT_NEAR(after_batch.received_elements_per_s, 300.0 / 64, 1e-6);

  const Plan plan = PlanSluice(p);
  ASSERT_TRUE(plan.offload);
  EXPECT_EQ(plan.cut, kCutAfterBatch);
  EXPECT_THAT(plan.explanation, HasSubstr("with as many bytes on the wire but receives 300 "
                                          "elements/s against 4.7"));
  // Without after batching, cut 5 is the plan: the earlier cuts leave the trainer `scale`.
  PlannerOptions no_batch_options;
  no_batch_options.allow_after_batch = false;
  const Plan no_batch = PlanSluice(p, no_batch_options);
  EXPECT_EQ(no_batch.cut, 5);
}

// A candidate measured on this cluster (the shape a run ended on) is kept over the model's
// best unless that predicts more than the incumbent margin over it; never one that is
// excluded, or one without the gain needed to offload.
TEST(SluicePlannerTest, AnIncumbentWithinItsMarginOfTheBestIsKept) {
  const Profile p = testing::UnequalWorkersProfile();
  const PlannerOptions base;
  const Plan model = PlanSluice(p, base);
  ASSERT_TRUE(model.offload) << model.explanation;
  const Candidate chosen{model.cut, model.read_mode, model.codec};
  // The best other candidate that offloads with the gain needed, at another cut.
  const Evaluation* other = nullptr;
  double best = 0;
  for (const Evaluation& e : model.candidates) {
    if (e.feasible && e.candidate == chosen) best = e.predicted_samples_per_s;
  }
  for (const Evaluation& e : model.candidates) {
    if (!e.feasible || e.candidate.cut == model.cut || e.offloaded_samples_per_s <= 0 ||
        e.predicted_samples_per_s < model.predicted_local_samples_per_s * (1 + base.min_gain)) {
      continue;
    }
    if (other == nullptr || e.predicted_samples_per_s > other->predicted_samples_per_s) other = &e;
  }
  ASSERT_NE(other, nullptr);
  const double gap = best / other->predicted_samples_per_s - 1;
  ASSERT_GT(gap, 0.002);
  PlannerOptions o = base;
  o.incumbent = other->candidate;
  o.incumbent_margin = gap + 0.001;
  const Plan kept = PlanSluice(p, o);
  ASSERT_TRUE(kept.offload);
  EXPECT_EQ(kept.cut, other->candidate.cut);
  EXPECT_EQ(kept.read_mode, other->candidate.read_mode);
  EXPECT_DOUBLE_EQ(kept.predicted_samples_per_s, other->predicted_samples_per_s);
  EXPECT_THAT(kept.explanation, HasSubstr("measured faster than all-local on these workers"));
  EXPECT_THAT(kept.explanation, HasSubstr("the model's best"));
  // Beyond the margin, the model's best.
  o.incumbent_margin = gap - 0.001;
  EXPECT_EQ(PlanSluice(p, o).cut, model.cut);
  // Excluded (a loss), it is not kept whatever the margin.
  o.incumbent_margin = 1;
  o.excluded.push_back({other->candidate, "measured no faster than all-local"});
  EXPECT_EQ(PlanSluice(p, o).cut, model.cut);
  // Nor without the gain to offload at all: the model's best offloads, the incumbent not.
  PlannerOptions high = base;
  high.incumbent = other->candidate;
  high.incumbent_margin = 1;
  high.min_gain = other->predicted_samples_per_s / model.predicted_local_samples_per_s - 1 + 0.001;
  ASSERT_GT(best, model.predicted_local_samples_per_s * (1 + high.min_gain));
  EXPECT_EQ(PlanSluice(p, high).cut, model.cut);
}
}  // namespace
}  // namespace sluice::policy
