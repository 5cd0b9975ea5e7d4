// The chaos run: `sluice train` offloading to two `sluice worker`s on the testbed (each in
// its own network namespace and cgroup) while a seeded schedule of faults hits the workers:
// SIGKILL and a restart, SIGSTOP and SIGCONT, and the worker's link going down and up. Every
// sample must be delivered exactly once with the content an all-local run gives it.
//
// Bounded: a fixed number of faults, placed at fixed fractions of the run's progress (read
// from the trainer's --events stream, so a fast or a slow machine sees the same schedule),
// each undone after a fixed time, and an overall deadline. The trainer's and the workers'
// resident memory at the start and the end are reported (and written as JSON to
// $SLUICE_CHAOS_REPORT when set). Needs root (the testbed); skipped otherwise.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <functional>
#include <fstream>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "offload_test_util.h"
#include "testbed_test_util.h"

namespace sluice::offload_test {
namespace {

using testbed::Testbed;

// Resident set size of `pid` in bytes (0 when it is gone).
int64_t RssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kb = 0;
      status >> kb;
      return kb * 1024;
    }
    std::getline(status, key);
  }
  return 0;
}


class ChaosTest : public ::testing::Test {
 protected:
  void TearDown() override { testbed::RemoveResourcesOfPid(getpid()); }
};

TEST_F(ChaosTest, TrainsThroughKillsStopsRestartsAndLinkFlapsExactlyOnce) {
  if (!testbed::CanHostTestbed()) GTEST_SKIP() << "the testbed needs root and cgroups";
  TempDir dir;
  GenerateImages(dir.path(), 160);
  constexpr int kEpochs = 24;
  constexpr int64_t kSamples = 160 * kEpochs;
  const fs::path spec = dir.path() / "chaos.yaml";
  std::ofstream(spec) << StandardPipelineYaml(dir.path(), false, 8, kEpochs);
  Result local = RunSluice({"run", spec.string(), "--dump-checksum"}, dir.path());
  ASSERT_EQ(local.exit_code, 0) << Describe(local);

  testbed::TestbedSpec tb;
  tb.trainer_cpus = 1.0;
  tb.workers = {{0.5, 1e9, 0}, {0.5, 1e9, 0}};
  auto created = Testbed::Create(tb);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Testbed> bed = *std::move(created);

  constexpr int kPort = 7400;
  std::vector<pid_t> workers(2, -1);
  std::vector<int> starts(2, 0);
  const auto start_worker = [&](int i) {
    const std::string log = (dir.path() / absl::StrCat("worker", i, ".", starts[i]++)).string();
    auto pid = bed->Spawn(bed->worker(i),
                          {SLUICE_BINARY, "worker", "--listen",
                           absl::StrCat(bed->worker(i).address, ":", kPort), "--threads", "1",
                           "--data-root", dir.path().string(), "--ready-file", log + ".ready"},
                          {log + ".out", log + ".err"});
    EXPECT_TRUE(pid.ok()) << pid.status();
    workers[i] = pid.ok() ? *pid : -1;
    // Each start has its own ready file, written whole once the worker serves.
    return WaitFor([&] { return fs::exists(log + ".ready"); }, 30);
  };
  ASSERT_TRUE(start_worker(0));
  ASSERT_TRUE(start_worker(1));

  const fs::path events = dir.path() / "train.events";
  const fs::path out = dir.path() / "train.out";
  const fs::path err = dir.path() / "train.err";
  const fs::path json = dir.path() / "train.json";
  const std::string addresses = absl::StrCat(bed->worker(0).address, ":", kPort, ",",
                                             bed->worker(1).address, ":", kPort);
  auto trainer =
      bed->Spawn(bed->trainer(),
                 {SLUICE_BINARY, "train", spec.string(), "--workers", addresses, "--policy",
                  "fixed:cut=3,ratio=0.8", "--accelerator-ms", "60", "--threads", "1",
                  "--dump-checksum", "--json", json.string(), "--events", events.string()},
                 {out.string(), err.string()});
  ASSERT_TRUE(trainer.ok()) << trainer.status();

  // The schedule: kFaults faults at about evenly spaced fractions of the run (see below),
  // each undone some seconds later. The emulated accelerator (60 ms a batch of 8) paces the
  // run at about 29 s plus what the faults cost, so the faults come about 3.6 s apart and
  // overlap some of the time.
  enum class Fault { kKill, kStop, kLinkDown };
  constexpr int kFaults = 6;
  // How long each fault lasts: a stop outlasts the trainer's 10 s hang floor, so the
  // stopped worker is declared hung and its samples re-queued; a link is down for as long as
  // TCP keeps retransmitting (the stream survives); a killed worker is back after 2 s.
  const auto hold_s = [](Fault f) {
    return f == Fault::kStop ? 12.0 : f == Fault::kLinkDown ? 3.0 : 2.0;
  };
  std::mt19937 rng;
  struct Planned {
    Fault fault;
    int worker;
    int64_t at_samples;
  };
  // Two of each kind, in an order that lets each run its course: a stopped worker is left
  // alone for the next four faults (longer than the hang floor), and one worker's faults
  // never overlap each other. Where in the run each fault falls is drawn from the seed
  // (SLUICE_CHAOS_SEED, printed) within a quarter of an interval of its even spacing.
  const uint32_t seed = std::getenv("SLUICE_CHAOS_SEED") != nullptr
                            ? static_cast<uint32_t>(std::atoi(std::getenv("SLUICE_CHAOS_SEED")))
                            : 20261124u;
  std::printf("chaos: seed %u\n", seed);
  rng.seed(seed);
  const std::vector<std::pair<Fault, int>> order = {
      {Fault::kStop, 0},     {Fault::kLinkDown, 1}, {Fault::kKill, 1},
      {Fault::kLinkDown, 1}, {Fault::kStop, 1},     {Fault::kKill, 0}};
  std::vector<Planned> schedule;
  const int64_t interval = kSamples / (kFaults + 2);
  std::uniform_int_distribution<int64_t> jitter(-interval / 4, interval / 4);
  for (int k = 0; k < kFaults; ++k) {
    schedule.push_back({order[k].first, order[k].second, interval * (k + 1) + jitter(rng)});
  }

  // Signals worker i's current process; none while it is down between a kill and its restart
  // (its old pid may already belong to another process).
  const auto signal_worker = [&](int i, int sig) {
    if (workers[i] > 0) kill(workers[i], sig);
  };
  const auto link = [&](int i, const char* state) {
    testbed::RunProgram({"ip", "-n", bed->worker(i).netns, "link", "set",
                         bed->WorkerVeth(i), state})
        .IgnoreError();
  };
  int64_t trainer_rss_start = 0, trainer_rss_end = 0;
  std::vector<int64_t> worker_rss_start = {RssBytes(workers[0]), RssBytes(workers[1])};
  std::vector<int64_t> worker_rss_end(2, 0);
  int injected = 0;
  int status = 0;
  bool exited = false;
  // What undoes a fault, and when (faults may overlap: both workers can be down at once).
  struct Recovery {
    std::chrono::steady_clock::time_point due;
    std::function<void()> undo;
  };
  std::vector<Recovery> pending;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(400);
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(*trainer, &status, WNOHANG) == *trainer) {
      exited = true;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->due <= now) {
        it->undo();
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    const int64_t progress = ProgressSamples(events);
    if (const int64_t rss = RssBytes(*trainer); rss > 0 && progress > 0) {
      if (trainer_rss_start == 0) trainer_rss_start = rss;
      trainer_rss_end = rss;
    }
    for (int i = 0; i < 2; ++i) {
      if (int64_t w = RssBytes(workers[i]); w > 0) worker_rss_end[i] = w;
    }
    if (injected < kFaults && progress >= schedule[injected].at_samples) {
      const Planned p = schedule[injected++];
      const auto due =
          now + std::chrono::milliseconds(static_cast<int>(hold_s(p.fault) * 1000));
      switch (p.fault) {
        case Fault::kKill:
          if (workers[p.worker] > 0) {
            kill(workers[p.worker], SIGKILL);
            waitpid(workers[p.worker], nullptr, 0);
            workers[p.worker] = -1;
          }
          pending.push_back({due, [&, w = p.worker] {
                               if (workers[w] <= 0) {
                                 EXPECT_TRUE(start_worker(w));
                               }
                             }});
          break;
        case Fault::kStop:
          signal_worker(p.worker, SIGSTOP);
          pending.push_back({due, [&, w = p.worker] { signal_worker(w, SIGCONT); }});
          break;
        case Fault::kLinkDown:
          link(p.worker, "down");
          pending.push_back({due, [&, w = p.worker] { link(w, "up"); }});
          break;
      }
      std::printf("chaos: fault %d at %lld samples: %s worker %d\n", injected,
                  static_cast<long long>(progress),
                  p.fault == Fault::kKill   ? "SIGKILL and restart"
                  : p.fault == Fault::kStop ? "SIGSTOP, SIGCONT"
                                            : "link down, up",
                  p.worker);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (Recovery& r : pending) r.undo();
  for (int i = 0; i < 2; ++i) {
    signal_worker(i, SIGCONT);
    link(i, "up");
  }
  if (!exited) {
    kill(*trainer, SIGKILL);
    waitpid(*trainer, &status, 0);
  }
  ASSERT_TRUE(exited) << "the trainer did not finish in 400 s: " << ReadAll(err);
  ASSERT_TRUE(WIFEXITED(status)) << ReadAll(err);
  ASSERT_EQ(WEXITSTATUS(status), 0) << ReadAll(err);
  EXPECT_EQ(injected, kFaults) << "the run ended before every fault was injected";
  // Exactly once: the per-sample digests equal the all-local run's (none lost, none
  // changed), and the trainer delivered exactly that many samples (none twice).
  EXPECT_EQ(ReadAll(out), local.out);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["samples"].get<int64_t>(), kSamples);
  int64_t failures = 0, hangs = 0;
  for (const nlohmann::json& w : j["places"]["workers"]) {
    failures += w["failures"].get<int64_t>();
    hangs += w.value("hangs", int64_t{0});
  }

  nlohmann::json report = {{"faults_injected", injected},
                           {"samples_checked", kSamples},
                           {"stream_failures", failures},
                           {"hangs_detected", hangs},
                           {"requeued_samples", j["requeued_samples"]},
                           {"late_duplicates_dropped", j["duplicates_dropped"]},
                           {"trainer_rss_start_bytes", trainer_rss_start},
                           {"trainer_rss_end_bytes", trainer_rss_end},
                           {"worker_rss_start_bytes", worker_rss_start},
                           {"worker_rss_end_bytes", worker_rss_end},
                           {"wall_s", j["wall_s"]}};
  std::printf("chaos: %s\n", report.dump().c_str());
  if (const char* path = std::getenv("SLUICE_CHAOS_REPORT"); path != nullptr) {
    std::ofstream(path) << report.dump(2) << "\n";
  }
  ASSERT_TRUE(bed->Teardown().ok());
}

}  // namespace
}  // namespace sluice::offload_test
