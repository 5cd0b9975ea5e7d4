// PolicyRunner with every policy — none, auto without workers, fixed (spill=workers), sluice,
// fastflow with a known step and with the consumer's measured step — against an in-process
// gRPC worker: each delivers every sample exactly once, with the all-local content, and
// reports what served it.
#include "sluice/runtime/policy_runner.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/rpc/grpc_worker_server.h"
#include "sluice/runtime/consumer_test_util.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// sample -> its tensors' bytes, failing on a sample seen twice.
using Contents = std::map<SampleId, std::string>;

void AddContents(const Element& batch, Contents* out) {
  for (size_t m = 0; m < batch.members.size(); ++m) {
    std::string bytes;
    for (const Tensor& t : batch.tensors) {
      bytes.append(t.Slice(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1).bytes());
    }
    EXPECT_TRUE(out->emplace(batch.members[m], std::move(bytes)).second)
        << "sample " << batch.members[m].epoch << "/" << batch.members[m].index << " twice";
  }
}

class PolicyRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "sluice-runner-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    // Names of one length: a batch pads its `path` field to the longest, and batches are
    // made up differently when offloaded.
    for (int i = 0; i < 32; ++i) {
      const fs::path p = fs::path(dir_) / "data" / (i % 2 ? "x" : "y") / absl::StrFormat("%02d.jpg", i);
      fs::create_directories(p.parent_path());
      std::ofstream(p, std::ios::binary)
          << ops::test::EncodeJpeg(ops::test::TexturedImage(96 + i % 4, 80 + i % 3, 3, i + 7));
    }
    rpc::ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.worker.threads = 2;
    so.worker.data_root = fs::temp_directory_path().string();
    auto server = rpc::GrpcWorkerServer::Start(so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  pipeline::PipelineSpec Spec() const {
    StatusOr<pipeline::PipelineSpec> spec = pipeline::ParseSpec(absl::StrCat(R"({
      "source": {"files": [")", dir_, R"(/data/**/*.jpg"], "label": "parent_dir",
                 "shuffle": true, "seed": 11},
      "ops": ["read_file", "decode_jpeg", {"random_resized_crop": {"size": [24, 24]}},
              "random_flip"],
      "batch": {"size": 4}, "epochs": 10, "options": {"threads": 1}})"), "runner_test");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  RunnerOptions Options(const std::string& policy, bool with_worker) {
    RunnerOptions o;
    StatusOr<TrainPolicy> parsed = ParsePolicy(policy, 4);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    o.policy = *parsed;
    if (with_worker) {
      o.workers.emplace_back();
      o.workers.back().address = server_->address();
    }
    o.base.split_size = 4;
    o.measure_s = 0.01;
    o.measure_batches = 3;
    o.fastflow_steps = 4;  // steps per FastFlow profiling run
    o.log = [this](const std::string& m) { notes_.push_back(m); };
    o.on_decision = [this](const policy::TimelineEntry& e) { decisions_.push_back(e); };
    return o;
  }

  // Opens the runner and drains it; every sample must arrive once with the local content.
  RunnerReport Run(RunnerOptions options) {
    const pipeline::PipelineSpec spec = Spec();
    auto runner = PolicyRunner::Open(spec, std::move(options));
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return {};
    // The loop only keeps each batch; its contents are read after the drain. The planner
    // measures this loop's stall, and reading contents between batches (slow under TSan, on
    // a loaded machine) had made the loop, not the pipeline, the bottleneck; its times say
    // it has no step (test::EagerConsumer), whatever the machine does between two calls.
    std::vector<Element> batches;
    test::EagerConsumer consumer;
    for (;;) {
      Element e;
      bool end = false;
      Status s = (*runner)->GetNext(&e, &end, consumer.Ask());
      consumer.Took();
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok() || end) break;
      batches.push_back(std::move(e));
    }
    Contents got;
    for (const Element& e : batches) AddContents(e, &got);
    EXPECT_TRUE(got == Expected(spec)) << got.size() << " samples";
    EXPECT_TRUE((*runner)->settled());
    EXPECT_TRUE((*runner)->Finish().ok());
    return (*runner)->Report();
  }

  static Contents Expected(const pipeline::PipelineSpec& spec) {
    auto ex = pipeline::LocalExecutor::Create(spec);
    EXPECT_TRUE(ex.ok()) << ex.status();
    Contents out;
    for (;;) {
      Element e;
      bool end = false;
      if (!(*ex)->GetNext(&e, &end).ok() || end) break;
      AddContents(e, &out);
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<rpc::GrpcWorkerServer> server_;
  std::vector<std::string> notes_;
  std::vector<policy::TimelineEntry> decisions_;
};

TEST_F(PolicyRunnerTest, NoneIsTheLocalPipeline) {
  const RunnerReport r = Run(Options("none", /*with_worker=*/false));
  EXPECT_FALSE(r.loader.offloaded);
  EXPECT_FALSE(r.plan.has_value());
  EXPECT_TRUE(r.timeline.empty());
  EXPECT_TRUE(r.profile.is_null());
  EXPECT_EQ(r.PlanJson()["policy"], "none");
  EXPECT_TRUE(r.PlanJson()["cut"].is_null());
  EXPECT_TRUE(r.local_reason.empty());
}

TEST_F(PolicyRunnerTest, AutoWithoutWorkersIsLocalAndSaysWhyOnce) {
  const RunnerReport r = Run(Options("auto", /*with_worker=*/false));
  EXPECT_EQ(r.policy, "auto");
  EXPECT_EQ(r.PlanJson()["policy"], "none");
  EXPECT_FALSE(r.loader.offloaded);
  EXPECT_THAT(r.local_reason, HasSubstr("no workers given"));
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_EQ(notes_[0], r.local_reason);
  EXPECT_TRUE(decisions_.empty());
}

TEST_F(PolicyRunnerTest, FixedAppliesTheCutRatioAndSpill) {
  const RunnerReport r =
      Run(Options("fixed:cut=2,ratio=0.5,spill=workers", /*with_worker=*/true));
  EXPECT_TRUE(r.loader.offloaded);
  EXPECT_EQ(r.loader.cut, 2);
  EXPECT_FALSE(r.loader.local_spill_over);
  ASSERT_EQ(r.loader.workers.size(), 1u);
  EXPECT_GT(r.loader.workers[0].samples, 0);
  const nlohmann::json plan = r.PlanJson();
  EXPECT_EQ(plan["policy"], "fixed");
  EXPECT_EQ(plan["spill"], "workers");
  EXPECT_EQ(plan["workers"][0]["address"], server_->address());
}

TEST_F(PolicyRunnerTest, FixedAndFastFlowNeedWorkers) {
  for (const char* policy : {"fixed:cut=2,ratio=0.5", "fastflow"}) {
    auto runner = PolicyRunner::Open(Spec(), Options(policy, /*with_worker=*/false));
    ASSERT_FALSE(runner.ok()) << policy;
    EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(runner.status().message(), HasSubstr("needs workers"));
  }
}

TEST_F(PolicyRunnerTest, SluicePlansSwitchesAndReportsItsDecisions) {
  RunnerOptions o = Options("sluice", /*with_worker=*/true);
  o.metric_store = policy::MetricStoreOptions{dir_ + "/store", 3600, nullptr};
  // No accelerator step at all: the loop always waits for data, once it has taken what the
  // pipeline prepared while the runner opened (a slow machine prepares several batches
  // then): the window holds more batches than any prefetch.
  o.measure_batches = 12;
  // The window ends on its batch count alone: a fast machine takes all 80 batches in less
  // than any span of time, and a window that also waited for one never closed there.
  o.measure_s = 0;
  const RunnerReport r = Run(std::move(o));
  ASSERT_FALSE(r.timeline.empty()) << "the runner's notes:\n" << absl::StrJoin(notes_, "\n");
  ASSERT_EQ(decisions_.size(), r.timeline.size());
  EXPECT_EQ(decisions_[0].kind, policy::DecisionKind::kInitial);
  ASSERT_TRUE(r.plan.has_value());
  EXPECT_TRUE(r.timeline[0].plan.offload) << r.timeline[0].plan.explanation;
  EXPECT_TRUE(r.time_to_plan_s.has_value());
  EXPECT_TRUE(r.measured.has_value());
  EXPECT_GE(r.profile["loaders_created"].get<int>(), 2);
  EXPECT_EQ(r.profile["metric_store"]["note"], "miss");
  EXPECT_TRUE(fs::exists(r.profile["metric_store"]["path"].get<std::string>()));
  EXPECT_EQ(r.PlanJson()["policy"], "sluice");
  EXPECT_FALSE(r.TimelineJson()[0]["plan"].contains("candidates"));
  EXPECT_THAT(DescribeDecision(decisions_[0]), HasSubstr("initial plan: cut="));
}

TEST_F(PolicyRunnerTest, FastFlowWithAKnownStepProfilesAtOpen) {
  RunnerOptions o = Options("fastflow", /*with_worker=*/true);
  o.accelerator_ms = 0;
  const RunnerReport r = Run(std::move(o));
  ASSERT_EQ(r.timeline.size(), 1u);
  ASSERT_EQ(decisions_.size(), 1u);
  EXPECT_THAT(r.timeline[0].reason, HasSubstr("FastFlow's profiling runs"));
  ASSERT_TRUE(r.plan.has_value());
  EXPECT_EQ(r.plan->planner, "fastflow");
  EXPECT_TRUE(r.profile["fastflow"]["runs"].is_array());
  EXPECT_FALSE(r.profile["fastflow"].contains("measured_step_ms"));
}

TEST_F(PolicyRunnerTest, FastFlowMeasuresTheConsumersStepAndResumesAfterProfiling) {
  RunnerOptions o = Options("fastflow:code", /*with_worker=*/true);
  o.accelerator_ms = -1;  // as from Python
  const RunnerReport r = Run(std::move(o));
  ASSERT_EQ(r.timeline.size(), 1u);
  EXPECT_THAT(r.timeline[0].reason, HasSubstr("a measured step"));
  EXPECT_TRUE(r.profile["fastflow"].contains("measured_step_ms"));
  EXPECT_EQ(r.profile["fastflow"]["formula"], "released_code");
  ASSERT_TRUE(r.time_to_plan_s.has_value());
  // The local batches before the plan count in the report with the plan's.
  EXPECT_GT(r.loader.samples_out, 0);
}

}  // namespace
}  // namespace sluice::runtime
