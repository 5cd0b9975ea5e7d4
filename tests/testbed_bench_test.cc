// `sluice bench` as a process (needs root): a tiny scenario end to end with two policies,
// teardown after SIGTERM (while the testbed stands, and during a training run), the refusal
// without root, and scenario errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/testbed/exec.h"
#include "testbed_test_util.h"

namespace sluice::testbed {
namespace {

namespace fs = std::filesystem;

// Whether a process runs with `argument` among its arguments (from /proc/PID/cmdline).
bool ProcessWithArgument(const std::string& argument) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string arg;
    while (std::getline(in, arg, '\0')) {
      if (arg == argument) return true;
    }
  }
  return false;
}
using ::testing::HasSubstr;

#define SKIP_WITHOUT_ROOT()                                   \
  if (!CanHostTestbed()) {                                    \
    GTEST_SKIP() << "needs root and a cgroup CPU controller"; \
  }

// A fresh folder with the tiny scenario in it; removed by the fixture.
class TestbedBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sluice-bench-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    scenario_ = dir_ + "/tiny.yaml";
    WriteScenario(/*accelerator_ms=*/5);
  }
  void WriteScenario(double accelerator_ms) {
    std::ofstream(scenario_, std::ios::trunc)
        << "name: tiny\n"
        << "pipeline: " << SLUICE_SOURCE_DIR << "/examples/pipelines/imagenet_train.yaml\n"
        << "data: {kind: jpeg, count: 192, seed: 3, width: 64, height: 48}\n"
        << "trainer: {cpus: 0.5}\n"
        << "workers:\n"
        << "  - {cpus: 0.5, bandwidth: 50mbit, latency: 0.5ms}\n"
        << "accelerator_ms: " << accelerator_ms << "\n"
        << "steps: 3\n";
  }
  void TearDown() override {
    // A child still running (a test that failed before stopping it) is killed and reaped.
    for (pid_t pid : children_) {
      if (waitpid(pid, nullptr, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
      RemoveResourcesOfPid(pid);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Starts `sluice ARGS...` with its output in dir_/NAME.log.
  pid_t Start(const std::vector<std::string>& args, const std::string& name, uid_t uid = 0) {
    const std::string log = dir_ + "/" + name + ".log";
    const pid_t pid = fork();
    if (pid == 0) {
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      if (f == nullptr) _exit(120);
      dup2(fileno(stdout), 2);
      if (uid != 0 && setuid(uid) != 0) _exit(121);
      std::vector<char*> argv = {const_cast<char*>(SLUICE_BINARY)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(SLUICE_BINARY, argv.data());
      _exit(127);
    }
    children_.push_back(pid);
    return pid;
  }

  int Wait(pid_t pid) {
    int wstatus = 0;
    EXPECT_EQ(waitpid(pid, &wstatus, 0), pid);
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  }

  std::string Log(const std::string& name) {
    std::ifstream in(dir_ + "/" + name + ".log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // The bench's --work-dir: its logs and each run's train-N.json.
  std::string WorkDir() const { return dir_ + "/bench-runs"; }

  std::string dir_;
  std::string scenario_;
  std::vector<pid_t> children_;
};

TEST_F(TestbedBenchTest, TinyScenarioEndToEnd) {
  SKIP_WITHOUT_ROOT();
  const std::string out = dir_ + "/report.json";
  const pid_t pid = Start({"bench", scenario_, "--policies", "none,fixed:cut=2,ratio=0.5", "--json",
                           out, "--work-dir", WorkDir()},
                          "tiny");
  ASSERT_EQ(Wait(pid), 0) << Log("tiny");
  EXPECT_TRUE(ResourcesOfPid(pid).empty()) << ResourcesOfPid(pid).ToString();

  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["scenario"]["name"], "tiny");
  const nlohmann::json& measured = j["testbed"]["measured"];
  ASSERT_EQ(measured["links"].size(), 1u);
  EXPECT_DOUBLE_EQ(measured["links"][0]["spec_bps"].get<double>(), 50e6);
  EXPECT_GT(measured["links"][0]["measured_bps"].get<double>(), 0);
  EXPECT_GT(measured["cpus"]["trainer"]["measured_cpus"].get<double>(), 0);
  EXPECT_GT(measured["cpus"]["w0"]["measured_cpus"].get<double>(), 0);

  const nlohmann::json& policies = j["policies"];
  ASSERT_TRUE(policies.contains("none")) << policies.dump();
  ASSERT_TRUE(policies.contains("fixed:cut=2,ratio=0.5")) << policies.dump();
  for (const auto& [name, p] : policies.items()) {
    ASSERT_TRUE(p.contains("samples_per_s")) << name << ": " << p.dump();
    EXPECT_GT(p["samples_per_s"].get<double>(), 0) << name;
    EXPECT_GE(p["stall_fraction"].get<double>(), 0) << name;
    EXPECT_LE(p["stall_fraction"].get<double>(), 1) << name;
    EXPECT_TRUE(p["plan"].is_object()) << name;
    EXPECT_TRUE(p.contains("time_to_plan_s")) << name;
    const double shares = p["share"]["trainer"].get<double>() + p["share"]["w0"].get<double>();
    EXPECT_NEAR(shares, 1.0, 1e-9) << name;
    ASSERT_EQ(p["link_bytes"].size(), 1u) << name;
  }
  const nlohmann::json& none = policies["none"];
  EXPECT_DOUBLE_EQ(none["share"]["trainer"].get<double>(), 1.0);
  const nlohmann::json& half = policies["fixed:cut=2,ratio=0.5"];
  EXPECT_GT(half["share"]["w0"].get<double>(), 0);
  // Offloaded batches cross the link: more bytes towards the trainer than without offload.
  EXPECT_GT(half["link_bytes"][0]["to_trainer"].get<int64_t>(),
            none["link_bytes"][0]["to_trainer"].get<int64_t>());
}

// Two trainers on the trainer's host (`trainers:`), the second starting a second later,
// sharing one worker: each runs the job, the bench reports each one's rate, their sum and
// Jain's fairness between them, and leaves no cgroup behind.
TEST_F(TestbedBenchTest, TwoTrainersShareTheWorkerAndTheBenchReportsEach) {
  SKIP_WITHOUT_ROOT();
  std::ofstream(scenario_, std::ios::trunc)
      << "name: two-trainers\n"
      << "pipeline: " << SLUICE_SOURCE_DIR << "/examples/pipelines/imagenet_train.yaml\n"
      << "data: {kind: jpeg, count: 192, seed: 3, width: 64, height: 48}\n"
      << "trainers: [{cpus: 0.4}, {cpus: 0.3, start_s: 1}]\n"
      << "workers:\n"
      << "  - {cpus: 0.5, bandwidth: 50mbit}\n"
      << "accelerator_ms: 5\n"
      << "steps: 3\n";
  const std::string out = dir_ + "/report.json";
  const pid_t pid = Start({"bench", scenario_, "--policies", "none,fixed:cut=2,ratio=0.5",
                           "--json", out, "--work-dir", WorkDir()},
                          "two");
  ASSERT_EQ(Wait(pid), 0) << Log("two");
  EXPECT_TRUE(ResourcesOfPid(pid).empty()) << ResourcesOfPid(pid).ToString();
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["scenario"]["trainers"].size(), 2u);
  for (const auto& [name, p] : j["policies"].items()) {
    ASSERT_EQ(p["trainers"].size(), 2u) << name << ": " << p.dump();
    double sum = 0;
    for (const nlohmann::json& t : p["trainers"]) {
      EXPECT_GT(t["samples_per_s"].get<double>(), 0) << name;
      sum += t["samples_per_s"].get<double>();
    }
    EXPECT_NEAR(p["samples_per_s"].get<double>(), sum, 1e-6) << name;
    EXPECT_EQ(p["trainers"][0]["trainer"], "trainer");
    EXPECT_EQ(p["trainers"][1]["trainer"], "trainer1");
    EXPECT_DOUBLE_EQ(p["trainers"][1]["start_s"].get<double>(), 1);
    EXPECT_DOUBLE_EQ(p["trainers"][1]["cpus"].get<double>(), 0.3);
    const double jain = p["fairness_jain"].get<double>();
    EXPECT_GE(jain, 0.5) << name;  // 1/n is the least it can be
    EXPECT_LE(jain, 1.0 + 1e-9) << name;
  }
  const nlohmann::json& half = j["policies"]["fixed:cut=2,ratio=0.5"];
  EXPECT_GT(half["share"]["w0"].get<double>(), 0);
  for (const nlohmann::json& t : half["trainers"]) {
    EXPECT_EQ(t["time_to_offload_s"].get<double>(), 0) << t.dump();  // a fixed plan offloads
  }
  EXPECT_EQ(j["policies"]["none"]["trainers"][0]["time_to_offload_s"].get<double>(), -1);
  EXPECT_THAT(Log("two"), HasSubstr("fairness (Jain)"));
}

// The store (scenario `store:`): beside the trainer, a worker's remote reads come across its
// link (the JPEGs it reads go towards the worker); beside every host, they do not. The same
// remote-read plan, the same samples, in both.
TEST_F(TestbedBenchTest, AStoreBesideTheTrainerIsReadAcrossTheLinkAndOneBesideTheWorkerIsNot) {
  SKIP_WITHOUT_ROOT();
  const std::string policy = "fixed:cut=2,ratio=1.0,read=remote";
  std::map<std::string, nlohmann::json> runs;
  for (const std::string at : {"trainer", "workers"}) {
    const std::string file = dir_ + "/store-" + at + ".yaml";
    std::ofstream(file)
        << "name: store-" << at << "\n"
        << "pipeline: " << SLUICE_SOURCE_DIR
        << "/examples/pipelines/imagenet_train_shards.yaml\n"
        << "data: {kind: jpeg, count: 192, seed: 3, width: 320, height: 240, format: tar, "
           "shard_size: 48}\n"
        << "trainer: {cpus: 0.5}\n"
        << "workers:\n"
        << "  - {cpus: 0.5, bandwidth: 1gbit}\n"
        << "store: " << at << "\n"
        << "accelerator_ms: 1\n"
        << "steps: 3\n";
    const std::string out = dir_ + "/store-" + at + ".json";
    const pid_t pid = Start({"bench", file, "--no-verify", "--policies", policy, "--json", out,
                             "--work-dir", dir_ + "/work-" + at, "--data-dir", dir_ + "/data"},
                            "store-" + at);
    ASSERT_EQ(Wait(pid), 0) << Log("store-" + at);
    EXPECT_TRUE(ResourcesOfPid(pid).empty()) << ResourcesOfPid(pid).ToString();
    std::ifstream in(out);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["scenario"]["store"], at);
    ASSERT_TRUE(j["policies"].contains(policy)) << j["policies"].dump();
    runs[at] = j["policies"][policy];
    // Everything went to the worker, which read it from the store.
    EXPECT_GT(runs[at]["share"]["w0"].get<double>(), 0.9) << runs[at].dump();
  }
  // 192+ JPEGs of 320x240 (about 20 KB each) cross towards the worker only when the store is
  // the trainer's; otherwise that direction carries splits and acknowledgements.
  const int64_t across = runs["trainer"]["link_bytes"][0]["to_worker"].get<int64_t>();
  const int64_t beside = runs["workers"]["link_bytes"][0]["to_worker"].get<int64_t>();
  EXPECT_GT(across, 2 * beside) << "to the worker: " << across << " bytes with the store at the "
                                << "trainer, " << beside << " with one beside the worker";
  EXPECT_GT(across, 192 * 10000);
}

TEST_F(TestbedBenchTest, SigtermMidRunTearsEverythingDown) {
  SKIP_WITHOUT_ROOT();
  const pid_t pid = Start(
      {"bench", scenario_, "--hold", "120", "--no-verify", "--work-dir", WorkDir()}, "hold");
  // Wait (bounded) until its testbed stands.
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    const Resources r = ResourcesOfPid(pid);
    up = r.namespaces.size() == 2 && r.cgroups.size() == 2;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(up) << Log("hold");
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(Wait(pid), 128 + SIGTERM) << Log("hold");
  EXPECT_THAT(Log("hold"), HasSubstr("tearing down"));
  const Resources left = ResourcesOfPid(pid);
  EXPECT_TRUE(left.empty()) << left.ToString();
}

TEST_F(TestbedBenchTest, SigtermDuringATrainRunTearsEverythingDown) {
  SKIP_WITHOUT_ROOT();
  // A slow accelerator keeps the run going long enough to be interrupted.
  WriteScenario(/*accelerator_ms=*/60000);
  const pid_t pid =
      Start({"bench", scenario_, "--policies", "none", "--no-verify", "--work-dir", WorkDir()},
            "train");
  // Wait (bounded) until the run's trainer is a process (in the process table, not a log
  // line): a `sluice train` writing its report to the run's file.
  const std::string report = WorkDir() + "/train-0.json";
  bool training = false;
  for (int i = 0; i < 1200 && !training; ++i) {
    training = ProcessWithArgument(report);
    if (!training) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(training) << Log("train");
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  EXPECT_EQ(Wait(pid), 128 + SIGTERM) << Log("train");
  const Resources left = ResourcesOfPid(pid);
  EXPECT_TRUE(left.empty()) << left.ToString();
}

TEST_F(TestbedBenchTest, WithoutRootItSaysSoAndExits2) {
  SKIP_WITHOUT_ROOT();
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  const pid_t pid = Start({"bench", scenario_, "--work-dir", WorkDir()}, "noroot", 65534);
  EXPECT_EQ(Wait(pid), 2);
  EXPECT_THAT(Log("noroot"), HasSubstr("needs root"));
}

TEST_F(TestbedBenchTest, BadScenarioIsAUsageError) {
  std::ofstream(dir_ + "/bad.yaml") << "name: x\nsteps: 0\n";
  const pid_t pid = Start({"bench", dir_ + "/bad.yaml"}, "bad");
  EXPECT_EQ(Wait(pid), 2);
  EXPECT_THAT(Log("bad"), HasSubstr("bad.yaml:"));
}

}  // namespace
}  // namespace sluice::testbed
