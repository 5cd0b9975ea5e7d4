// Exactly once under worker failure, with real `sluice worker` processes: a worker
// SIGKILLed mid-epoch, a worker stopped and restarted on the same port, two workers with one
// killed, a slow (CPU-starved) worker, and a worker unreachable at start. In every case the
// epoch yields each SampleId exactly once, with the same contents as the all-local run.
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload_test_util.h"
#include "sluice/core/error_kind.h"

// Its own namespace: test files are compiled together (SLUICE_UNITY_TESTS).
namespace sluice::offload_test::offload_failure_test {
namespace {

using ::testing::HasSubstr;

constexpr int kImages = 256;
// Cut after random_resized_crop: decoding and cropping happen on the worker.
constexpr int kCut = 3;

class OffloadFailureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    GenerateImages(dir_->path(), kImages);
    spec_ = new pipeline::PipelineSpec(StandardSpec(dir_->path(), /*deterministic=*/false));
    expected_ = new std::map<SampleId, std::string>(SamplesById(DrainLocal(*spec_)));
  }
  static void TearDownTestSuite() {
    delete expected_;
    delete spec_;
    delete dir_;
  }

  static TempDir* dir_;
  static pipeline::PipelineSpec* spec_;
  static std::map<SampleId, std::string>* expected_;
};

TempDir* OffloadFailureTest::dir_ = nullptr;
pipeline::PipelineSpec* OffloadFailureTest::spec_ = nullptr;
std::map<SampleId, std::string>* OffloadFailureTest::expected_ = nullptr;

TEST_F(OffloadFailureTest, WorkerKilledMidEpochStillYieldsEverySampleOnce) {
  ASSERT_EQ(expected_->size(), static_cast<size_t>(kImages));
  auto worker = WorkerProcess::Start(dir_->path());
  ASSERT_NE(worker, nullptr);
  Warnings warnings;
  auto loader =
      runtime::Loader::Create(*spec_, Plan({worker->address()}, kCut, /*ratio=*/0.7, &warnings));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  Take(**loader, 2, &got);
  worker->Kill(SIGKILL);
  // The stream notices the dead worker on its own thread: waited for (bounded), so that a
  // fast machine does not drain the epoch locally before it does.
  for (int i = 0; i < 1000 && (*loader)->Report().workers[0].failures == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(Drain(**loader, &got).ok());
  EXPECT_TRUE(SamplesById(got) == *expected_);
  const runtime::LoaderReport report = (*loader)->Report();
  EXPECT_GE(report.workers[0].failures, 1);
  EXPECT_GT(report.requeued_samples, 0);  // its open splits went back to the queue
  EXPECT_FALSE(report.workers[0].connected);
  EXPECT_EQ(report.samples_local + report.workers[0].samples, kImages);
  EXPECT_THAT(warnings.Joined(), HasSubstr(worker->address()));
}

TEST_F(OffloadFailureTest, WorkerRestartedOnTheSamePortIsUsedAgain) {
  auto worker = WorkerProcess::Start(dir_->path());
  ASSERT_NE(worker, nullptr);
  const int port = worker->port();
  auto loader =
      runtime::Loader::Create(*spec_, Plan({worker->address()}, kCut, /*ratio=*/0.7, nullptr));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  Take(**loader, 2, &got);
  worker->Kill(SIGKILL);
  worker.reset();
  auto restarted = WorkerProcess::Start(dir_->path(), port);
  ASSERT_NE(restarted, nullptr);
  // The trainer is not consuming, so the epoch cannot end before the worker is back.
  ASSERT_TRUE(WaitFor([&] { return (*loader)->Report().workers[0].connects >= 2; }, 30))
      << "never reconnected: " << (*loader)->Report().workers[0].last_error;
  const int64_t before = (*loader)->Report().workers[0].samples;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  EXPECT_TRUE(SamplesById(got) == *expected_);
  const runtime::LoaderReport report = (*loader)->Report();
  EXPECT_GT(report.workers[0].samples, before) << "the restarted worker was not used";
  EXPECT_GE(report.workers[0].failures, 1);
}

TEST_F(OffloadFailureTest, TwoWorkersOneKilled) {
  auto a = WorkerProcess::Start(dir_->path());
  auto b = WorkerProcess::Start(dir_->path());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto loader = runtime::Loader::Create(
      *spec_, Plan({a->address(), b->address()}, kCut, /*ratio=*/0.8, nullptr));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  Take(**loader, 2, &got);
  a->Kill(SIGKILL);
  ASSERT_TRUE(Drain(**loader, &got).ok());
  EXPECT_TRUE(SamplesById(got) == *expected_);
  const runtime::LoaderReport report = (*loader)->Report();
  EXPECT_GE(report.workers[0].failures, 1);
  EXPECT_EQ(report.workers[1].failures, 0);
  EXPECT_GT(report.workers[1].samples, 0);
  EXPECT_EQ(report.samples_local + report.workers[0].samples + report.workers[1].samples, kImages);
}

TEST_F(OffloadFailureTest, SlowWorkerDoesNotHoldTheEpochBack) {
  auto worker = WorkerProcess::Start(dir_->path(), /*port=*/0, /*threads=*/1);
  ASSERT_NE(worker, nullptr);
  auto loader =
      runtime::Loader::Create(*spec_, Plan({worker->address()}, kCut, /*ratio=*/0.5, nullptr));
  ASSERT_TRUE(loader.ok()) << loader.status();
  // A CPU-starved worker: runnable 10 ms out of every 100.
  worker->Throttle(/*on_ms=*/10, /*off_ms=*/90);
  std::vector<Element> got;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  worker->StopThrottle();
  EXPECT_TRUE(SamplesById(got) == *expected_);
  const runtime::LoaderReport report = (*loader)->Report();
  // Its target was half of the samples; spill-over gave most of them to the local side.
  EXPECT_LT(report.workers[0].samples, kImages / 4) << "worker " << report.workers[0].samples;
  EXPECT_GT(report.samples_local, kImages * 3 / 4);
}

TEST_F(OffloadFailureTest, UnreachableWorkerAtStartWarnsAndRunsLocally) {
  const pipeline::PipelineSpec spec = StandardSpec(dir_->path(), /*deterministic=*/true);
  const std::vector<Element> expected = DrainLocal(spec);
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  Warnings warnings;
  runtime::LoaderOptions plan = Plan({address}, kCut, /*ratio=*/0.9, &warnings);
  plan.workers[0].connect_timeout_s = 0.5;
  auto loader = runtime::Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  EXPECT_TRUE(SameBatches(expected, got));
  ASSERT_FALSE(warnings.all().empty());
  EXPECT_THAT(warnings.all()[0], HasSubstr(address));
  EXPECT_THAT(warnings.all()[0], HasSubstr("unreachable"));
  const runtime::LoaderReport report = (*loader)->Report();
  EXPECT_EQ(report.samples_local, kImages);
  EXPECT_EQ(report.workers[0].samples, 0);
}

// Runs all-remote at the cut after normalize against a worker with `limit` bytes of
// message limit; returns how the run ended.
Status RunAgainstMessageLimit(const fs::path& scratch, const pipeline::PipelineSpec& spec,
                              int limit) {
  auto worker = WorkerProcess::Start(scratch, 0, 1, {"--max-message-bytes", std::to_string(limit)});
  if (worker == nullptr) return absl::InternalError("worker did not start");
  Warnings warnings;
  runtime::LoaderOptions plan = Plan({worker->address()}, /*cut=*/5, /*ratio=*/1.0, &warnings);
  auto loader = runtime::Loader::Create(spec, plan);
  if (!loader.ok()) return loader.status();
  std::vector<Element> got;
  return Drain(**loader, &got);
}

// Messages over a size limit fail the same way on every retry and every worker, so the run
// must end with the message instead of re-queueing the same samples forever.
TEST_F(OffloadFailureTest, SplitOverTheWorkersMessageLimitEndsTheRunNamingIt) {
  const Status status = RunAgainstMessageLimit(dir_->path(), *spec_, 6000);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("message limit of 6000 bytes"));
  EXPECT_EQ(KindOf(status), ErrorKind::kMessageLimit);
}

TEST_F(OffloadFailureTest, SampleOverTheWorkersMessageLimitEndsTheRunNamingIt) {
  // Each sample leaves the worker as a 32x32x3 float image (12 KB), over 9 KB.
  const Status status = RunAgainstMessageLimit(dir_->path(), *spec_, 9000);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("over the message limit of 9000 bytes"));
  // Decided by the kind the worker sent with its error (worker.proto Error.kind).
  EXPECT_EQ(KindOf(status), ErrorKind::kMessageLimit);
}

}  // namespace
}  // namespace sluice::offload_test::offload_failure_test
