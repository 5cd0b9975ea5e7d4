#include "sluice/runtime/train.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::runtime {
namespace {

using ::testing::HasSubstr;

TEST(ParsePolicyTest, AcceptsNoneAndFixedSpellings) {
  struct Case {
    const char* text;
    int cut;
    double ratio;
    ReadMode read;
    Codec compression;
    const char* canonical;
  };
  const std::vector<Case> cases = {
      {"fixed:cut=2,ratio=0.5", 2, 0.5, ReadMode::kRemoteRead, Codec::kNone,
       "fixed:cut=2,ratio=0.5,read=remote,compress=none"},
      {"fixed:ratio=1,cut=0", 0, 1.0, ReadMode::kRemoteRead, Codec::kNone,
       "fixed:cut=0,ratio=1,read=remote,compress=none"},
      {"fixed:cut=batch,ratio=0.25,read=local,compress=zstd", kCutAfterBatch, 0.25,
       ReadMode::kLocalRead, Codec::kZstd,
       "fixed:cut=batch,ratio=0.25,read=local,compress=zstd"},
      {"fixed:cut=5,ratio=0,read=remote_read,compress=lz4", 5, 0.0, ReadMode::kRemoteRead,
       Codec::kLz4, "fixed:cut=5,ratio=0,read=remote,compress=lz4"},
  };
  for (const Case& c : cases) {
    auto p = ParsePolicy(c.text, /*num_ops=*/5);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    EXPECT_EQ(p->name, "fixed");
    EXPECT_EQ(p->cut, c.cut) << c.text;
    EXPECT_DOUBLE_EQ(p->ratio, c.ratio) << c.text;
    EXPECT_EQ(p->read_mode, c.read) << c.text;
    EXPECT_EQ(p->codec, c.compression) << c.text;
    EXPECT_EQ(p->ToString(), c.canonical);
    auto again = ParsePolicy(p->ToString(), 5);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->ToString(), p->ToString());
  }
  // spill=workers (the trainer keeps to its share) is kept; spill=all is the default and
  // left out of the canonical spelling.
  auto strict = ParsePolicy("fixed:cut=4,ratio=0.9,spill=workers", 5);
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_FALSE(strict->local_spill_over);
  EXPECT_EQ(strict->ToString(), "fixed:cut=4,ratio=0.9,read=remote,compress=none,spill=workers");
  auto all = ParsePolicy("fixed:cut=4,ratio=0.9,spill=all", 5);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->local_spill_over);
  EXPECT_EQ(all->ToString(), "fixed:cut=4,ratio=0.9,read=remote,compress=none");
  auto none = ParsePolicy("none");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->name, "none");
  EXPECT_EQ(none->ratio, 0);
  EXPECT_EQ(none->ToString(), "none");
}

// A fixed policy is a Placement, and WithPlacement hands every one of its fields to the
// Loader's options, leaving the others as they were.
TEST(ParsePolicyTest, AFixedPolicyReachesTheLoaderWhole) {
  auto p = ParsePolicy("fixed:cut=batch,ratio=0.8,read=local,compress=zstd,spill=workers,"
                       "shares=1/3",
                       5);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ToString(),
            "fixed:cut=batch,ratio=0.8,read=local,compress=zstd,spill=workers,shares=1/3");
  LoaderOptions base;
  base.threads = 3;
  base.spill_over = false;
  base.workers.resize(2);
  const LoaderOptions o = WithPlacement(base, *p);
  EXPECT_EQ(static_cast<const Placement&>(o), static_cast<const Placement&>(*p));
  EXPECT_EQ(o.cut, kCutAfterBatch);
  EXPECT_EQ(o.codec, Codec::kZstd);
  EXPECT_EQ(o.worker_shares, (std::vector<double>{1, 3}));
  EXPECT_EQ(o.threads, 3);
  EXPECT_FALSE(o.spill_over);
  EXPECT_EQ(o.workers.size(), 2u);
}

TEST(ParsePolicyTest, RejectsBadSpellingsWithAClearMessage) {
  struct Case {
    const char* text;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"", "unknown policy"},
      {"fastest", "unknown policy"},
      {"fixed", "unknown policy"},
      {"fixed:", "not key=value"},
      {"fixed:cut=2", "ratio is missing"},
      {"fixed:ratio=0.5", "cut is missing"},
      {"fixed:cut=2,ratio=1.5", "ratio must be a number in [0, 1]"},
      {"fixed:cut=2,ratio=-0.1", "ratio must be"},
      {"fixed:cut=2,ratio=half", "ratio must be"},
      {"fixed:cut=-1,ratio=0.5", "cut must be an op count or 'batch'"},
      {"fixed:cut=two,ratio=0.5", "cut must be"},
      {"fixed:cut=6,ratio=0.5", "past the pipeline's 5 ops"},
      {"fixed:cut=2,ratio=0.5,read=nfs", "read must be local or remote"},
      {"fixed:cut=2,ratio=0.5,compress=gzip", "compress must be lz4, zstd or none"},
      {"fixed:cut=2,ratio=0.5,speed=max", "unknown key 'speed'"},
      {"fixed:cut=2,ratio=0.5,spill=trainer", "spill must be all or workers"},
      {"fixed:cut=2,cut=3,ratio=0.5", "cut given twice"},
      {"fixed:cut=2,,ratio=0.5", "not key=value"},
      {"fixed:cut=2,ratio=0.5,shares=1/x", "shares must be numbers >= 0"},
  };
  for (const Case& c : cases) {
    auto p = ParsePolicy(c.text, /*num_ops=*/5);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.error)) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("expected 'auto', 'sluice'"))
        << c.text;
  }
}

TEST(ParsePolicyTest, AcceptsThePlanners) {
  struct Case {
    const char* text;
    const char* name;
    bool is_auto;
    bool fastflow_code;
    const char* canonical;
  };
  const std::vector<Case> cases = {
      {"auto", "sluice", true, false, "auto"},
      {"sluice", "sluice", false, false, "sluice"},
      {"fastflow", "fastflow", false, false, "fastflow"},
      {"fastflow:paper", "fastflow", false, false, "fastflow"},
      {"fastflow:code", "fastflow", false, true, "fastflow:code"},
  };
  for (const Case& c : cases) {
    auto p = ParsePolicy(c.text, /*num_ops=*/5);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    EXPECT_EQ(p->name, c.name) << c.text;
    EXPECT_EQ(p->is_auto, c.is_auto) << c.text;
    EXPECT_EQ(p->fastflow_code, c.fastflow_code) << c.text;
    EXPECT_EQ(p->ToString(), c.canonical) << c.text;
  }
  EXPECT_FALSE(ParsePolicy("fastflow:magic").ok());
  EXPECT_FALSE(ParsePolicy("sluice:fast").ok());
}

class RunTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "sluice-train-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    for (int i = 0; i < 10; ++i) {
      std::ofstream(dir_ + "/f" + std::to_string(i) + ".bin") << std::string(10 + i, 'x');
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Loader> MakeLoader() {
    pipeline::PipelineSpec spec;
    spec.source.files = {dir_ + "/*.bin"};
    spec.ops = {{"read_file", {}}};
    spec.batch.size = 3;
    spec.batch.padded = true;
    auto loader = Loader::Create(spec, LoaderOptions{});
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? *std::move(loader) : nullptr;
  }

  std::string dir_;
};

TEST_F(RunTrainingTest, CountsStepsSamplesAndSplitsTimeIntoStallAndCompute) {
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  TrainOptions options;
  options.steps = 3;
  options.accelerator_ms = 5;
  std::vector<int64_t> progress;
  options.on_step = [&](const TrainProgress& p) { progress.push_back(p.steps); };
  std::vector<size_t> batch_sizes;
  options.on_batch = [&](const Element& b) { batch_sizes.push_back(b.members.size()); };
  auto result = RunTraining(*loader, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 3);
  EXPECT_EQ(result->samples, 9);
  EXPECT_FALSE(result->data_ended);
  EXPECT_EQ(progress, std::vector<int64_t>({1, 2, 3}));
  EXPECT_EQ(batch_sizes, std::vector<size_t>({3, 3, 3}));
  EXPECT_GE(result->compute_s, 3 * 0.005);
  EXPECT_LE(result->stall_s + result->compute_s, result->wall_s + 1e-6);
  EXPECT_GT(result->samples_per_s(), 0);
  EXPECT_GE(result->stall_fraction(), 0);
  EXPECT_LT(result->stall_fraction(), 1);
}

TEST_F(RunTrainingTest, RepeatFirstBatchTakesOneBatchAndTrainsOnItAgain) {
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  TrainOptions options;
  options.steps = 7;  // more batches than the data has (10 samples, batches of 3)
  options.repeat_first_batch = true;
  std::vector<std::vector<SampleId>> members;
  options.on_batch = [&](const Element& b) { members.push_back(b.members); };
  auto result = RunTraining(*loader, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 7);
  EXPECT_EQ(result->samples, 21);
  EXPECT_FALSE(result->data_ended);
  ASSERT_EQ(members.size(), 7u);
  for (const auto& m : members) EXPECT_EQ(m, members[0]);
  // The loader gave one batch only: the rest of the data is still there.
  EXPECT_EQ(loader->Report().samples_out, 3);
}

TEST_F(RunTrainingTest, StopsWhenTheDataEnds) {
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  TrainOptions options;
  options.steps = 100;
  auto result = RunTraining(*loader, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->steps, 4);  // 3 + 3 + 3 + 1
  EXPECT_EQ(result->samples, 10);
  EXPECT_TRUE(result->data_ended);

  std::unique_ptr<Loader> all = MakeLoader();
  options.steps = 0;
  result = RunTraining(*all, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->steps, 4);
  EXPECT_FALSE(result->data_ended);
}

TEST_F(RunTrainingTest, SteadyStateFiguresLeaveOutTheWarmUpSteps) {
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  TrainOptions options;
  options.steps = 3;
  options.warmup_steps = 1;
  options.accelerator_ms = 5;
  auto result = RunTraining(*loader, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->warmup_steps, 1);
  EXPECT_EQ(result->steady_samples, 6);  // steps 2 and 3
  EXPECT_LT(result->steady_wall_s, result->wall_s);
  EXPECT_GE(result->steady_wall_s, 2 * 0.005);
  EXPECT_LE(result->steady_stall_s, result->stall_s);

  // The default leaves out nothing from a run under 10 steps, and a run that ends within
  // its warm-up counts whole.
  std::unique_ptr<Loader> short_run = MakeLoader();
  options.warmup_steps = -1;
  result = RunTraining(*short_run, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->warmup_steps, 0);
  EXPECT_EQ(result->steady_samples, result->samples);
  EXPECT_DOUBLE_EQ(result->steady_wall_s, result->wall_s);

  std::unique_ptr<Loader> ends_early = MakeLoader();
  options.steps = 100;  // warm-up 10, but the data ends after 4 steps
  result = RunTraining(*ends_early, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->warmup_steps, 0);
  EXPECT_EQ(result->steady_samples, 10);
}

TEST_F(RunTrainingTest, RecordsEveryStepEndForWindowRates) {
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  TrainOptions options;
  options.steps = 3;
  options.accelerator_ms = 5;
  auto result = RunTraining(*loader, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->step_end_s.size(), 3u);
  EXPECT_EQ(result->step_samples, (std::vector<int64_t>{3, 6, 9}));
  EXPECT_GE(result->step_end_s[0], 0.005);
  EXPECT_GE(result->step_end_s[2] - result->step_end_s[1], 0.005);  // each step sleeps 5 ms
  EXPECT_LE(result->step_end_s[2], result->wall_s);
  EXPECT_GT(result->start_unix_s, 1.7e9);  // after 2023: a wall clock, not a steady one
}

TEST(WindowSamplesPerSTest, DividesTheSamplesBetweenStepEndsByTheirTime) {
  // 10 samples a step; steps end at 1, 2, 3, then slower at 5 and 7 s.
  const std::vector<double> ends = {1, 2, 3, 5, 7};
  const std::vector<int64_t> samples = {10, 20, 30, 40, 50};
  EXPECT_DOUBLE_EQ(WindowSamplesPerS(ends, samples, 0, 3), 10);   // from the start
  EXPECT_DOUBLE_EQ(WindowSamplesPerS(ends, samples, 3, 7), 5);    // after the slow-down
  EXPECT_DOUBLE_EQ(WindowSamplesPerS(ends, samples, 2.5, 7), 6);  // 30 in 5 s from 2 s
  EXPECT_DOUBLE_EQ(WindowSamplesPerS(ends, samples, 0, 100), 50.0 / 7);
  EXPECT_DOUBLE_EQ(WindowSamplesPerS(ends, samples, 5, 6), 0);    // no step ended in it
  EXPECT_DOUBLE_EQ(WindowSamplesPerS({}, {}, 0, 10), 0);
}

// A loader that plans while running: the steps before it settles are extra, and the steady
// figures start after them plus the warm-up.
TEST_F(RunTrainingTest, PlanningStepsComeOnTopOfStepsAndBeforeTheSteadyFigures) {
  std::unique_ptr<Loader> loader = MakeLoader();
  ASSERT_NE(loader, nullptr);
  TrainOptions options;
  options.steps = 2;
  options.warmup_steps = 0;
  options.repeat_first_batch = true;
  int calls = 0;
  options.settled = [&] { return ++calls >= 3; };  // settles after the third step
  auto result = RunTraining(*loader, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->planning_steps, 2);
  EXPECT_EQ(result->steps, 4);  // 2 planning + 2 asked (counted from the settling step on)
  EXPECT_EQ(calls, 3);          // not asked again once settled
  EXPECT_EQ(result->samples, 12);
  EXPECT_EQ(result->steady_samples, 3);  // the fourth step: after the one that settled

  // With a warm-up, it starts counting after the settling step.
  std::unique_ptr<Loader> warm = MakeLoader();
  options.steps = 4;
  options.warmup_steps = 1;
  calls = 0;
  result = RunTraining(*warm, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->planning_steps, 2);
  EXPECT_EQ(result->steps, 6);
  EXPECT_EQ(result->steady_samples, 3 * 3);  // steps 4..6

  // A loader that never settles is cut off at max_planning_steps.
  std::unique_ptr<Loader> never = MakeLoader();
  options.steps = 1;
  options.warmup_steps = 0;
  options.max_planning_steps = 3;
  options.settled = [] { return false; };
  result = RunTraining(*never, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->planning_steps, 2);
  EXPECT_EQ(result->steps, 3);
}

}  // namespace
}  // namespace sluice::runtime
