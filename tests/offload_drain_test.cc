// Graceful drain with real `sluice worker` processes (docs/offload.md, "Drain"): SIGTERM on a
// worker while it serves a `sluice train` run, a worker whose drain deadline hands back what
// it holds to a Loader, and a second signal that ends a drain at once. In every case the
// worker exits 0 within its --drain-s plus a bound, and a trainer's epoch yields each sample
// exactly once, with the contents of the all-local run. The tests wait on the trainer's
// --events lines, on stream events and on process exits, never on log wording.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "offload_test_util.h"
#include "sluice/pipeline/source.h"
#include "sluice/rpc/remote_stream.h"

// Its own namespace: test files are compiled together (SLUICE_UNITY_TESTS).
namespace sluice::offload_test::offload_drain_test {
namespace {

constexpr int kImages = 256;
constexpr int kBatch = 8;
// Cut after random_resized_crop: decoding and cropping happen on the worker.
constexpr int kCut = 3;
// Beyond a worker's --drain-s: the hand-back and the close (5 s at most), and a slow,
// loaded machine.
constexpr double kExitBoundS = 20;

// The kinds of the "worker" events about `address`, in order.
std::vector<std::string> WorkerEventKinds(const std::vector<nlohmann::json>& events,
                                          const std::string& address) {
  std::vector<std::string> kinds;
  for (const nlohmann::json& e : events) {
    if (e.value("event", "") == "worker" && e.value("address", "") == address) {
      kinds.push_back(e.value("kind", ""));
    }
  }
  return kinds;
}

// A child process killed and reaped when the test leaves early.
struct Reaper {
  ~Reaper() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  pid_t pid = -1;
};

class OffloadDrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    GenerateImages(dir_->path(), kImages);
    spec_path_ = new std::string((dir_->path() / "standard.yaml").string());
    std::ofstream(*spec_path_) << StandardPipelineYaml(dir_->path(), /*deterministic=*/false,
                                                       kBatch);
    spec_ = new pipeline::PipelineSpec(StandardSpec(dir_->path(), /*deterministic=*/false, kBatch));
    expected_ = new std::map<SampleId, std::string>(SamplesById(DrainLocal(*spec_)));
    Result local = RunSluice({"run", *spec_path_, "--dump-checksum"}, dir_->path());
    ASSERT_EQ(local.exit_code, 0) << Describe(local);
    local_digests_ = new std::string(local.out);
  }
  static void TearDownTestSuite() {
    delete local_digests_;
    delete expected_;
    delete spec_;
    delete spec_path_;
    delete dir_;
  }

  static TempDir* dir_;
  static std::string* spec_path_;
  static pipeline::PipelineSpec* spec_;
  static std::map<SampleId, std::string>* expected_;
  static std::string* local_digests_;  // `sluice run --dump-checksum`: one line per sample
};

TempDir* OffloadDrainTest::dir_ = nullptr;
std::string* OffloadDrainTest::spec_path_ = nullptr;
pipeline::PipelineSpec* OffloadDrainTest::spec_ = nullptr;
std::map<SampleId, std::string>* OffloadDrainTest::expected_ = nullptr;
std::string* OffloadDrainTest::local_digests_ = nullptr;

TEST_F(OffloadDrainTest, SigtermMidTrainingDrainsExitsZeroAndEverySampleArrivesOnce) {
  constexpr double kDrainS = 30;
  auto worker = WorkerProcess::Start(dir_->path(), /*port=*/0, /*threads=*/1,
                                     {"--drain-s", absl::StrCat(kDrainS)});
  ASSERT_NE(worker, nullptr);
  const fs::path events = dir_->path() / "drain.events";
  const fs::path json = dir_->path() / "drain.json";
  const fs::path out = dir_->path() / "drain.out";
  const fs::path err = dir_->path() / "drain.err";
  // 32 steps of at least 50 ms each: the run lasts well past the first progress line.
  const pid_t trainer = SpawnSluice(
      {"train", *spec_path_, "--workers", worker->address(), "--policy",
       absl::StrCat("fixed:cut=", kCut, ",ratio=0.8"), "--accelerator-ms", "50", "--threads", "2",
       "--events", events.string(), "--json", json.string(), "--dump-checksum"},
      out, err, dir_->path());
  ASSERT_GT(trainer, 0);
  Reaper reaper{trainer};
  ASSERT_TRUE(WaitFor([&] { return ProgressSamples(ReadEvents(events)) >= kBatch; }, 120))
      << "the trainer took no step: " << ReadAll(err);

  worker->Signal(SIGTERM);
  const std::optional<int> worker_code = worker->WaitExit(kDrainS + kExitBoundS);
  ASSERT_TRUE(worker_code.has_value()) << "the worker did not exit: " << worker->Stderr();
  EXPECT_EQ(*worker_code, 0) << worker->Stderr();

  const std::optional<int> trainer_code = WaitExit(trainer, 300);
  ASSERT_TRUE(trainer_code.has_value()) << "the trainer did not finish: " << ReadAll(err);
  reaper.pid = -1;
  ASSERT_EQ(*trainer_code, 0) << ReadAll(err);
  // Every sample exactly once, with the local run's contents.
  EXPECT_EQ(ReadAll(out), *local_digests_);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["samples"].get<int64_t>(), kImages);
  EXPECT_EQ(j["duplicates_dropped"].get<int64_t>(), 0);
  const nlohmann::json& w = j["places"]["workers"][0];
  EXPECT_EQ(w["address"], worker->address());
  EXPECT_EQ(w["drains"].get<int64_t>(), 1);
  EXPECT_EQ(w["failures"].get<int64_t>(), 0);  // drained, not failed
  EXPECT_EQ(j["places"]["local"].get<int64_t>() + w["samples"].get<int64_t>(), kImages);
  EXPECT_THAT(WorkerEventKinds(ReadEvents(events), worker->address()),
              ::testing::ElementsAre("draining", "drained"));
}

TEST_F(OffloadDrainTest, TheDrainDeadlineHandsBackWhatTheWorkerHoldsAndTheLoaderRequeuesIt) {
  // --drain-s 0: whatever the worker holds at SIGTERM is handed back at once.
  auto worker = WorkerProcess::Start(dir_->path(), /*port=*/0, /*threads=*/1, {"--drain-s", "0"});
  ASSERT_NE(worker, nullptr);
  Warnings warnings;
  runtime::LoaderOptions options = Plan({worker->address()}, kCut, /*ratio=*/0.7, &warnings);
  // One sample per credit: while the consumer waits, the worker holds splits it cannot finish.
  options.max_inflight_bytes = 1;
  std::mutex mu;
  std::vector<runtime::WorkerEvent> events;
  options.on_worker_event = [&](const runtime::WorkerEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  };
  auto loader = runtime::Loader::Create(*spec_, options);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  // Batches until the worker has delivered a sample, at most half the epoch, so that it still
  // holds splits when it is told to stop: with one sample per credit its samples come as the
  // consumer asks, and on a loaded machine the first two batches had been all local and
  // nothing of the worker's came in the 60 s waited after them.
  bool delivered = false;
  for (int taken = 0; taken < kImages / kBatch / 2 && !delivered; ++taken) {
    Take(**loader, 1, &got);
    delivered = WaitFor([&] { return (*loader)->Report().workers[0].samples > 0; }, 5);
  }
  ASSERT_TRUE(delivered) << warnings.Joined();

  worker->Signal(SIGTERM);
  const std::optional<int> code = worker->WaitExit(kExitBoundS);
  ASSERT_TRUE(code.has_value()) << "the worker did not exit: " << worker->Stderr();
  EXPECT_EQ(*code, 0) << worker->Stderr();

  ASSERT_TRUE(Drain(**loader, &got).ok());
  EXPECT_TRUE(SamplesById(got) == *expected_);
  const runtime::LoaderReport report = (*loader)->Report();
  EXPECT_EQ(report.workers[0].drains, 1);
  EXPECT_EQ(report.workers[0].failures, 0);
  EXPECT_EQ(report.duplicates_dropped, 0);
  EXPECT_GT(report.requeued_samples, 0);  // what it held went back to the queue
  EXPECT_EQ(report.samples_local + report.workers[0].samples, kImages);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(events.size(), 2u) << warnings.Joined();
  EXPECT_EQ(events[0].kind, runtime::WorkerEvent::Kind::kDraining);
  EXPECT_EQ(events[0].deadline_s, 0);
  EXPECT_EQ(events[1].kind, runtime::WorkerEvent::Kind::kDrained);
  EXPECT_GT(events[1].requeued_samples, 0);
}

TEST_F(OffloadDrainTest, ASecondSignalDuringTheDrainStopsTheWorkerAtOnce) {
  // A drain that could last ten minutes: the trainer below stops reading.
  auto worker = WorkerProcess::Start(dir_->path(), /*port=*/0, /*threads=*/1, {"--drain-s", "600"});
  ASSERT_NE(worker, nullptr);
  rpc::ConnectOptions connect;
  connect.address = worker->address();
  rpc::SessionConfig session;
  session.spec = *spec_;
  session.cut = kCut;
  session.max_inflight_bytes = 1;  // one sample per chunk read
  auto stream = rpc::RemoteStream::Open(connect, session);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto files = pipeline::ResolveSource(spec_->source);
  ASSERT_TRUE(files.ok()) << files.status();
  rpc::Split split;
  split.split_id = 1;
  for (uint64_t i = 0; i < 16; ++i) {
    split.elements.push_back(pipeline::MakeSourceElement(*files, /*with_label=*/true, 0, i));
  }
  ASSERT_TRUE((*stream)->SendSplit(std::move(split)).ok());
  // Reads until an event of `kind`; each chunk read lets the worker run one more sample.
  const auto read_until = [&](rpc::StreamEvent::Kind kind) {
    for (;;) {
      std::optional<rpc::StreamEvent> e = (*stream)->NextFor(30000);
      if (!e.has_value()) return ::testing::AssertionFailure() << "nothing for 30 s";
      if (e->kind == kind) return ::testing::AssertionSuccess();
      if (e->kind == rpc::StreamEvent::Kind::kFailed) {
        return ::testing::AssertionFailure() << e->status;
      }
    }
  };
  // The worker holds the split once its first sample arrives.
  ASSERT_TRUE(read_until(rpc::StreamEvent::Kind::kElements));
  worker->Signal(SIGTERM);
  ASSERT_TRUE(read_until(rpc::StreamEvent::Kind::kDraining));
  // Nothing more is read: the split cannot finish, and the drain would last its 600 s.
  worker->Signal(SIGINT);
  const std::optional<int> code = worker->WaitExit(kExitBoundS);
  ASSERT_TRUE(code.has_value()) << "the worker did not stop: " << worker->Stderr();
  EXPECT_EQ(*code, 0) << worker->Stderr();
  // The trainer's stream ends (a Loader would re-queue what it had not received).
  EXPECT_TRUE(read_until(rpc::StreamEvent::Kind::kFailed));
}

}  // namespace
}  // namespace sluice::offload_test::offload_drain_test
