// The testbed on the real machine (needs root): namespaces, shaped veths and cgroups are
// created and always removed (normal end, failure mid-setup, a crashed run found by the
// next start). The link and CPU measurements are in testbed_measure_serial_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "sluice/testbed/exec.h"
#include "sluice/testbed/testbed.h"
#include "testbed_test_util.h"

namespace sluice::testbed {
namespace {

using ::testing::HasSubstr;

#define SKIP_WITHOUT_ROOT()                                   \
  if (!CanHostTestbed()) {                                    \
    GTEST_SKIP() << "needs root and a cgroup CPU controller"; \
  }

// Removes whatever this process left, whatever happened in the test.
class TestbedSetupTest : public ::testing::Test {
 protected:
  void TearDown() override { RemoveResourcesOfPid(getpid()); }
};

TestbedSpec TwoHosts(double bandwidth_bps = 50e6, double latency_s = 0.001) {
  TestbedSpec spec;
  spec.trainer_cpus = 0.5;
  spec.workers.push_back({0.5, bandwidth_bps, latency_s});
  return spec;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(TestbedSetupTest, CreatesHostsAndRemovesEverything) {
  SKIP_WITHOUT_ROOT();
  std::string run_id;
  {
    StatusOr<std::unique_ptr<Testbed>> tb = Testbed::Create(TwoHosts());
    ASSERT_TRUE(tb.ok()) << tb.status();
    run_id = (*tb)->run_id();
    EXPECT_EQ(PidOfRunId(run_id), getpid());
    StatusOr<Resources> r = ListResources(run_id);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->namespaces.size(), 2u) << r->ToString();
    EXPECT_EQ(r->cgroups.size(), 2u) << r->ToString();
    // The veths live only inside the namespaces.
    EXPECT_TRUE(r->links.empty()) << r->ToString();
    StatusOr<ProgramResult> q = RunProgram(
        {"tc", "-n", (*tb)->worker(0).netns, "qdisc", "show", "dev", (*tb)->WorkerVeth(0)});
    ASSERT_TRUE(q.ok());
    if ((*tb)->latency_emulated()) {
      EXPECT_THAT(q->output, HasSubstr("netem"));
    } else {
      EXPECT_THAT(q->output, ::testing::Not(HasSubstr("netem")));
      EXPECT_EQ((*tb)->warnings().size(), 1u);
    }
    EXPECT_THAT(q->output, HasSubstr("tbf"));

    // A process started in the worker sees the worker's address and nothing of the root's.
    char dir_template[] = "/tmp/sluice-tb-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    const std::string out = std::string(dir_template) + "/addr.txt";
    Testbed::SpawnOptions options;
    options.stdout_path = out;
    StatusOr<pid_t> pid =
        (*tb)->Spawn((*tb)->worker(0), {"ip", "-o", "-4", "addr", "show"}, options);
    ASSERT_TRUE(pid.ok()) << pid.status();
    int wstatus = 0;
    ASSERT_EQ(waitpid(*pid, &wstatus, 0), *pid);
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    const std::string addrs = ReadAll(out);
    EXPECT_THAT(addrs, HasSubstr("10.213.0.2/30"));
    EXPECT_THAT(addrs, ::testing::Not(HasSubstr("10.213.0.1/")));
    std::remove(out.c_str());
    rmdir(dir_template);

    // A long-running process is killed by the teardown.
    StatusOr<pid_t> sleeper = (*tb)->Spawn((*tb)->trainer(), {"sleep", "60"});
    ASSERT_TRUE(sleeper.ok()) << sleeper.status();
    EXPECT_TRUE((*tb)->Teardown().ok());
    ASSERT_EQ(waitpid(*sleeper, &wstatus, 0), *sleeper);
    EXPECT_TRUE(WIFSIGNALED(wstatus));
    EXPECT_TRUE((*tb)->Teardown().ok());  // idempotent
  }
  StatusOr<Resources> after = ListResources(run_id);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty()) << after->ToString();
}

TEST_F(TestbedSetupTest, FailureMidSetupLeavesNothing) {
  SKIP_WITHOUT_ROOT();
  TestbedSpec spec = TwoHosts();
  spec.workers.push_back({0.3, 20e6, 0.002});
  for (int steps : {0, 1, 2, 3, 5, 7, 9}) {
    CreateOptions options;
    options.fail_after_steps = steps;
    StatusOr<std::unique_ptr<Testbed>> tb = Testbed::Create(spec, options);
    ASSERT_FALSE(tb.ok()) << "steps " << steps;
    EXPECT_THAT(std::string(tb.status().message()), HasSubstr("injected failure"));
    const Resources left = ResourcesOfPid(getpid());
    EXPECT_TRUE(left.empty()) << "steps " << steps << ": " << left.ToString();
  }
}

TEST_F(TestbedSetupTest, SpawnReportsAMissingProgram) {
  SKIP_WITHOUT_ROOT();
  StatusOr<std::unique_ptr<Testbed>> tb = Testbed::Create(TwoHosts(0, 0));
  ASSERT_TRUE(tb.ok()) << tb.status();
  StatusOr<pid_t> pid = (*tb)->Spawn((*tb)->trainer(), {"/nonexistent/program"});
  ASSERT_FALSE(pid.ok());
  EXPECT_THAT(std::string(pid.status().message()), HasSubstr("cannot exec"));
}

TEST_F(TestbedSetupTest, LeftoversOfADeadRunAreCleaned) {
  SKIP_WITHOUT_ROOT();
  // A child makes a testbed and dies without tearing it down, as a crashed bench would.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StatusOr<std::unique_ptr<Testbed>> tb = Testbed::Create(TwoHosts());
    if (!tb.ok()) _exit(1);
    _exit(0);  // no destructor, no teardown
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  Resources left = ResourcesOfPid(child);
  EXPECT_EQ(left.namespaces.size(), 2u) << left.ToString();
  EXPECT_EQ(left.cgroups.size(), 2u) << left.ToString();

  // A live run of this process is never touched.
  StatusOr<std::unique_ptr<Testbed>> live = Testbed::Create(TwoHosts(0, 0));
  ASSERT_TRUE(live.ok()) << live.status();

  // (Tests running in parallel may clean them first; either way they must be gone.)
  StatusOr<Resources> removed = CleanLeftovers();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(ResourcesOfPid(child).empty()) << ResourcesOfPid(child).ToString();
  StatusOr<Resources> mine = ListResources((*live)->run_id());
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->namespaces.size(), 2u);
}

}  // namespace
}  // namespace sluice::testbed
