// `sluice train` as a process: the report and its JSON, the per-sample digests of an
// offloaded run against `sluice run`, and the errors for bad policies.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "offload_test_util.h"

namespace sluice::offload_test {
namespace {

using ::testing::HasSubstr;

class OffloadTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    GenerateImages(dir_->path(), 64);
    spec_path_ = new std::string((dir_->path() / "standard.yaml").string());
    std::ofstream(*spec_path_) << StandardPipelineYaml(dir_->path(), /*deterministic=*/false);
  }
  static void TearDownTestSuite() {
    delete spec_path_;
    delete dir_;
  }
  static TempDir* dir_;
  static std::string* spec_path_;
};

TempDir* OffloadTrainTest::dir_ = nullptr;
std::string* OffloadTrainTest::spec_path_ = nullptr;

TEST_F(OffloadTrainTest, ReportsThroughputStallAndPlacesInTextAndJson) {
  auto worker = WorkerProcess::Start(dir_->path());
  ASSERT_NE(worker, nullptr);
  const std::string json_path = (dir_->path() / "train.json").string();
  Result r = RunSluice({"train", *spec_path_, "--workers", worker->address(), "--policy",
                        "fixed:cut=3,ratio=0.5,compress=lz4", "--accelerator-ms", "2", "--steps",
                        "5", "--threads", "2", "--json", json_path},
                       dir_->path());
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("train: 5 steps, 40 samples"));
  EXPECT_THAT(r.out, HasSubstr("samples/s"));
  EXPECT_THAT(r.out, HasSubstr("stall"));
  EXPECT_THAT(r.out, HasSubstr("plan: fixed:cut=3,ratio=0.5,read=remote,compress=lz4"));
  EXPECT_THAT(r.out, HasSubstr("processed: local "));
  EXPECT_THAT(r.out, HasSubstr(worker->address()));
  // A plaintext worker on this machine: the payloads came on its bulk data channel, through
  // the shared-memory ring, and both reports say so.
  EXPECT_THAT(r.out, HasSubstr("received through shared memory"));

  const nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_GT(j["samples_per_s"].get<double>(), 0);
  EXPECT_GE(j["stall_fraction"].get<double>(), 0);
  EXPECT_LE(j["stall_fraction"].get<double>(), 1);
  EXPECT_EQ(j["time_to_plan_s"].get<double>(), 0);
  EXPECT_GT(j["wall_s"].get<double>(), 0.01);  // five 2 ms steps at least
  EXPECT_EQ(j["steps"].get<int>(), 5);
  EXPECT_EQ(j["samples"].get<int>(), 40);
  const nlohmann::json& plan = j["plan"];
  EXPECT_EQ(plan["policy"], "fixed");
  EXPECT_EQ(plan["cut"].get<int>(), 3);
  EXPECT_EQ(plan["read_mode"], "remote_read");
  EXPECT_EQ(plan["ratio"].get<double>(), 0.5);
  EXPECT_EQ(plan["compression"], "lz4");
  ASSERT_EQ(plan["workers"].size(), 1u);
  EXPECT_EQ(plan["workers"][0]["address"], worker->address());
  EXPECT_DOUBLE_EQ(plan["workers"][0]["share"].get<double>(), 0.5);
  const int64_t local = j["places"]["local"].get<int64_t>();
  const int64_t remote = j["places"]["workers"][0]["samples"].get<int64_t>();
  EXPECT_TRUE(j["places"]["workers"][0]["bulk"].get<bool>());
  EXPECT_TRUE(j["places"]["workers"][0]["shared_memory"].get<bool>());
  EXPECT_GE(local + remote, 40);  // what was consumed, and maybe what was prepared ahead
  EXPECT_LE(local + remote, 64);
}

TEST_F(OffloadTrainTest, OffloadedRunDigestsMatchTheLocalRun) {
  auto worker = WorkerProcess::Start(dir_->path());
  ASSERT_NE(worker, nullptr);
  Result local = RunSluice({"run", *spec_path_, "--dump-checksum"}, dir_->path());
  ASSERT_EQ(local.exit_code, 0) << Describe(local);
  for (const std::string policy :
       {"fixed:cut=batch,ratio=0.5,read=local,compress=zstd", "fixed:cut=4,ratio=1"}) {
    Result r = RunSluice({"train", *spec_path_, "--workers", worker->address(), "--policy", policy,
                          "--dump-checksum"},
                         dir_->path());
    ASSERT_EQ(r.exit_code, 0) << policy << "\n" << Describe(r);
    EXPECT_EQ(r.out, local.out) << policy;
    EXPECT_THAT(r.err, HasSubstr("train: 8 steps, 64 samples")) << policy;
  }
}

TEST_F(OffloadTrainTest, PolicyNoneIsTheLocalPipeline) {
  const std::string json_path = (dir_->path() / "none.json").string();
  Result r = RunSluice(
      {"train", *spec_path_, "--accelerator-ms", "1", "--steps", "3", "--json", json_path},
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(j["plan"], nlohmann::json::parse(R"({"policy": "none", "cut": null,
      "read_mode": null, "ratio": 0.0, "compression": "none", "workers": []})"));
  EXPECT_EQ(j["steps"].get<int>(), 3);
  EXPECT_EQ(j["places"]["workers"].size(), 0u);
}

TEST_F(OffloadTrainTest, TokenIsSentToTheWorkers) {
  const std::string token_file = (dir_->path() / "token").string();
  std::ofstream(token_file) << "s3cret-token\n";
  auto worker = WorkerProcess::Start(dir_->path(), 0, 1, {"--token-file", token_file});
  ASSERT_NE(worker, nullptr);
  const std::string json_path = (dir_->path() / "token.json").string();
  const std::vector<std::string> common = {"train",           *spec_path_, "--workers",
                                           worker->address(), "--policy",  "fixed:cut=2,ratio=1",
                                           "--json",          json_path};

  std::vector<std::string> with_token = common;
  with_token.insert(with_token.end(), {"--token-file", token_file});
  Result r = RunSluice(with_token, dir_->path());
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_GT(j["places"]["workers"][0]["samples"].get<int64_t>(), 0);

  // Without the token the worker refuses the trainer, which warns and runs locally.
  r = RunSluice(common, dir_->path());
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("warning"));
  EXPECT_THAT(r.err, HasSubstr(worker->address()));
  j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(j["places"]["workers"][0]["samples"].get<int64_t>(), 0);
  EXPECT_EQ(j["places"]["local"].get<int64_t>(), 64);
  EXPECT_FALSE(j["warnings"].empty());
}

TEST_F(OffloadTrainTest, BadPoliciesAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    const char* error;
  };
  const std::vector<Case> cases = {
      {{"--policy", "fastest", "--workers", "127.0.0.1:1"}, "unknown policy"},
      {{"--policy", "fixed:cut=9,ratio=0.5", "--workers", "127.0.0.1:1"},
       "past the pipeline's 5 ops"},
      {{"--policy", "fixed:cut=2,ratio=2", "--workers", "127.0.0.1:1"}, "ratio must be"},
      {{"--policy", "fixed:cut=2", "--workers", "127.0.0.1:1"}, "ratio is missing"},
      {{"--policy", "fixed:cut=2,ratio=0.5,read=nfs", "--workers", "127.0.0.1:1"},
       "read must be local or remote"},
      {{"--policy", "fixed:cut=2,ratio=0.5"}, "--policy fixed needs --workers"},
      {{"--policy", "fixed:cut=0,ratio=0.5,read=local", "--workers", "127.0.0.1:1"},
       "cut of at least 1"},
      {{"--policy", "fixed:cut=2,ratio=0.5", "--workers", "127.0.0.1:1", "--tls-ca",
        "/nonexistent/ca.pem"},
       "--tls-ca: cannot read '/nonexistent/ca.pem': No such file or directory"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"train", *spec_path_, "--steps", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Result r = RunSluice(args, dir_->path());
    EXPECT_EQ(r.exit_code, 2) << c.error << "\n" << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(c.error)) << Describe(r);
  }
}

}  // namespace
}  // namespace sluice::offload_test
