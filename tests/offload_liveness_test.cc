// Liveness with real `sluice worker` processes: a worker stopped (SIGSTOP) in the middle of a
// run is declared hung by the trainer, its samples are re-queued and the run ends with every
// sample exactly once; once it answers again (SIGCONT) it is used again. The worker is slowed
// by a read limit so that it holds work whenever it is stopped: the tests synchronise on what
// the processes report, never on how fast the machine is.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "offload_test_util.h"

namespace sluice::offload_test {
namespace {

using ::testing::HasSubstr;

constexpr int kImages = 512;
constexpr int kCut = 3;  // the worker decodes and crops

// Kills (and reaps) a child process when the test leaves early.
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid) : pid_(pid) {}
  ~ChildGuard() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Waits up to `seconds` for the child to exit; its exit code, or -1.
  int Wait(double seconds) {
    int status = 0;
    const bool exited = WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, seconds);
    if (!exited) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_;
};

class OffloadLivenessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    GenerateImages(dir_->path(), kImages);
    spec_path_ = new std::string((dir_->path() / "standard.yaml").string());
    std::ofstream(*spec_path_) << StandardPipelineYaml(dir_->path(), /*deterministic=*/false);
  }
  static void TearDownTestSuite() {
    delete spec_path_;
    delete dir_;
  }

  // A worker that reads the data set in no less than `seconds` (a --read-limit of the data's
  // size over that time; its bucket starts with one second's worth).
  static std::unique_ptr<WorkerProcess> SlowWorker(double seconds) {
    uint64_t bytes = 0;
    for (const auto& entry : fs::recursive_directory_iterator(dir_->path() / "data")) {
      if (entry.is_regular_file()) bytes += entry.file_size();
    }
    const uint64_t limit = std::max<uint64_t>(1, static_cast<uint64_t>(bytes / seconds));
    return WorkerProcess::Start(
        dir_->path(), 0, 1,
        {"--data-root", dir_->path().string(), "--read-limit", std::to_string(limit)});
  }

  static TempDir* dir_;
  static std::string* spec_path_;
};

TempDir* OffloadLivenessTest::dir_ = nullptr;
std::string* OffloadLivenessTest::spec_path_ = nullptr;

TEST_F(OffloadLivenessTest, AStoppedWorkerIsDeclaredHungAndEverySampleArrivesOnce) {
  Result local = RunSluice({"run", *spec_path_, "--dump-checksum"}, dir_->path());
  ASSERT_EQ(local.exit_code, 0) << Describe(local);
  // 40 samples/s: 12.8 s of reading for the whole data set, so the run cannot end before the
  // worker is stopped (with spill=workers the trainer leaves every sample to the connected
  // worker); and fast enough that the 96 samples it may hold (3 splits of 32) take it 2.4 s,
  // so its hang deadline is the 10 s floor, well before the keepalive's 20 s timeout.
  auto worker = SlowWorker(kImages / 40.0);
  ASSERT_NE(worker, nullptr);
  const fs::path out = dir_->path() / "hung.out";
  const fs::path err = dir_->path() / "hung.err";
  const fs::path events = dir_->path() / "hung.events";
  const std::string json = (dir_->path() / "hung.json").string();
  ChildGuard train(SpawnSluice({"train", *spec_path_, "--workers", worker->address(), "--policy",
                                absl::StrCat("fixed:cut=", kCut, ",ratio=1,spill=workers"),
                                "--dump-checksum", "--json", json, "--events", events.string()},
                               out, err, dir_->path()));
  // Stop the worker once training is under way: a progress event counts samples, so the
  // worker has delivered some (its rate is measured) and holds more.
  ASSERT_TRUE(WaitFor([&] { return ProgressSamples(events) > 0; }, 120))
      << ReadAll(err) << "\nworker:\n"
      << worker->Stderr();
  worker->Kill(SIGSTOP);
  const int code = train.Wait(180);
  worker->Kill(SIGCONT);
  const std::string trainer_err = ReadAll(err);
  ASSERT_EQ(code, 0) << trainer_err;

  // Exactly once, with the same contents as the local run.
  EXPECT_EQ(ReadAll(out), local.out);
  // Reported: a warning naming the worker and its silence, and in the JSON.
  EXPECT_THAT(trainer_err, HasSubstr(absl::StrCat("sluice: warning: worker ", worker->address(),
                                                  " hung: nothing delivered for ")));
  EXPECT_THAT(trainer_err, HasSubstr("samples re-queued"));
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  const nlohmann::json& w = j["places"]["workers"][0];
  EXPECT_GE(w["hangs"].get<int64_t>(), 1) << w.dump();
  EXPECT_GE(w["failures"].get<int64_t>(), 1);
  EXPECT_GE(w["last_hang_silence_s"].get<double>(), 10.0) << "the 10 s floor";
  EXPECT_GT(j["requeued_samples"].get<int64_t>(), 0);
  bool warned = false;
  for (const auto& text : j["warnings"]) {
    warned = warned || text.get<std::string>().find(" hung: ") != std::string::npos;
  }
  EXPECT_TRUE(warned) << j["warnings"].dump();
}

// In-process, over an endless run: the hung worker is used again once it answers.
TEST_F(OffloadLivenessTest, AHungWorkerRejoinsWhenItAnswersAgain) {
  auto worker = SlowWorker(kImages / 40.0);
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec =
      StandardSpec(dir_->path(), /*deterministic=*/false, /*batch=*/8, /*epochs=*/-1);
  Warnings warnings;
  runtime::LoaderOptions plan = Plan({worker->address()}, kCut, /*ratio=*/1.0, &warnings);
  plan.local_spill_over = false;  // the worker takes everything while it is connected
  plan.hang.floor_s = 2;          // a shorter floor keeps the test short
  auto loader = runtime::Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();

  // The training loop: takes batches until told to stop, checking that no sample repeats.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> repeats{0};
  Status consumed;
  std::thread consumer([&] {
    std::set<SampleId> seen;
    while (!stop.load()) {
      Element e;
      bool end = false;
      consumed = (*loader)->GetNext(&e, &end);
      if (!consumed.ok() || end) return;
      for (const SampleId& id : e.members) {
        if (!seen.insert(id).second) ++repeats;
      }
    }
  });
  const auto report = [&] { return (*loader)->Report().workers[0]; };

  EXPECT_TRUE(WaitFor([&] { return report().samples > 0; }, 120)) << warnings.Joined();
  worker->Kill(SIGSTOP);
  EXPECT_TRUE(WaitFor([&] { return report().hangs >= 1; }, 120)) << warnings.Joined();
  const int64_t before = report().samples;
  const int64_t connects = report().connects;
  worker->Kill(SIGCONT);
  EXPECT_TRUE(
      WaitFor([&] { return report().connects > connects && report().samples > before; }, 120))
      << "not used again: " << warnings.Joined();
  stop = true;
  (*loader)->Cancel();
  consumer.join();
  EXPECT_EQ(repeats.load(), 0);
  EXPECT_THAT(warnings.Joined(), HasSubstr(absl::StrCat("worker ", worker->address(), " hung: ")));
  EXPECT_THAT(warnings.Joined(), HasSubstr("is back; using it again"));
}

// `sluice worker` checks its TLS files before listening: a key that is not the
// certificate's is named, instead of failing to listen ("address in use").
TEST_F(OffloadLivenessTest, WorkerWithAMismatchedTlsKeyNamesTheFiles) {
  const fs::path d = dir_->path() / "tls";
  const std::string script = absl::StrCat(
      "set -e; mkdir -p ", d.string(), "; cd ", d.string(),
      "; for n in a b; do openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1",
      " -nodes -keyout $n.key -out $n.pem -days 1 -subj /CN=$n; done >/dev/null 2>&1");
  ASSERT_EQ(std::system(script.c_str()), 0) << "openssl failed";
  const std::string cert = (d / "a.pem").string();
  const std::string key = (d / "b.key").string();
  Result r = RunSluice({"worker", "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key},
                       dir_->path());
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err,
              HasSubstr(absl::StrCat("--tls-key ", key,
                                     " does not match the certificate in --tls-cert ", cert)));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("address in use")));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("listening on")));

  r = RunSluice({"worker", "--listen", "127.0.0.1:0", "--tls-cert", key, "--tls-key", key},
                dir_->path());
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("--tls-cert ", key, ": no PEM certificate in it")));

  // The trainer checks its client certificate the same way (gRPC would retry it for ever).
  r = RunSluice(
      {"train", *spec_path_, "--workers", "127.0.0.1:1", "--policy", "fixed:cut=2,ratio=0.5",
       "--steps", "1", "--tls-ca", cert, "--tls-cert", cert, "--tls-key", key},
      dir_->path());
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err,
              HasSubstr(absl::StrCat("sluice train: --tls-key ", key,
                                     " does not match the certificate in --tls-cert ", cert)));
}

// --bulk-port on a port another process holds: the worker says which and does not serve.
TEST_F(OffloadLivenessTest, WorkerWithABulkPortInUseSaysWhich) {
  const int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  socklen_t len = sizeof a;
  getsockname(holder, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  Result r = RunSluice({"worker", "--listen", "127.0.0.1:0", "--bulk-port", port}, dir_->path());
  close(holder);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("cannot listen for bulk data on 127.0.0.1:" + port));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("listening on")));
}

// --ready-file: the worker writes the address it bound (the port chosen under port 0) once it
// serves; one that cannot be written stops the worker with the file named.
TEST_F(OffloadLivenessTest, TheReadyFileNamesTheBoundAddressOrStopsTheWorker) {
  auto worker = WorkerProcess::Start(dir_->path(), /*port=*/0);
  ASSERT_NE(worker, nullptr);  // Start waits for the ready file and reads its port
  EXPECT_GT(worker->port(), 0);
  const std::string missing = (dir_->path() / "no-such-folder" / "ready.json").string();
  Result r = RunSluice({"worker", "--listen", "127.0.0.1:0", "--ready-file", missing},
                       dir_->path());
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("--ready-file"));
  EXPECT_THAT(r.err, HasSubstr((dir_->path() / "no-such-folder").string()));
  EXPECT_FALSE(fs::exists(missing));
}

}  // namespace
}  // namespace sluice::offload_test
