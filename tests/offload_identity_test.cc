// Offloading never changes the data: with a real `sluice worker` process, every cut of the
// standard pipeline (0..5 and after batch) in both read modes gives, with `deterministic:
// true`, the very batches of the all-local run, and in first-come mode the same sample
// contents by SampleId.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "offload_test_util.h"

namespace sluice::offload_test {
namespace {

class OffloadIdentityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    GenerateImages(dir_->path(), 64);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static TempDir* dir_;
};

TempDir* OffloadIdentityTest::dir_ = nullptr;

TEST_F(OffloadIdentityTest, DeterministicRunsAreBitIdenticalForEveryCutAndReadMode) {
  auto worker = WorkerProcess::Start(dir_->path(), /*port=*/0, /*threads=*/2);
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = StandardSpec(dir_->path(), /*deterministic=*/true);
  const std::vector<Element> expected = DrainLocal(spec);
  ASSERT_EQ(expected.size(), 8u);
  for (int cut : {0, 1, 2, 3, 4, 5, kCutAfterBatch}) {
    for (ReadMode mode : {ReadMode::kRemoteRead, ReadMode::kLocalRead}) {
      // In local_read the trainer runs read_file itself: a cut of 0 means nothing.
      if (mode == ReadMode::kLocalRead && cut == 0) continue;
      const std::string label = absl::StrCat("cut ", cut, ", ", ReadModeName(mode));
      Warnings warnings;
      auto loader = runtime::Loader::Create(
          spec, Plan({worker->address()}, cut, /*ratio=*/0.6, &warnings, mode));
      ASSERT_TRUE(loader.ok()) << label << ": " << loader.status();
      std::vector<Element> got;
      Status s = Drain(**loader, &got);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      EXPECT_TRUE(SameBatches(expected, got)) << label;
      const runtime::LoaderReport report = (*loader)->Report();
      EXPECT_GT(report.workers[0].samples, 0) << label;
      EXPECT_EQ(report.samples_local + report.workers[0].samples, 64) << label;
      EXPECT_TRUE(warnings.all().empty()) << label << ": " << warnings.Joined();
    }
  }
}

// At cut 4 the trainer's suffix (normalize) writes every sample, received or local, into its
// batch slot: with one suffix thread and the merge's order, every batch is stacked in place,
// and the batches are still those of the all-local run, with compression off and on.
TEST_F(OffloadIdentityTest, ReceivedSamplesAreNormalizedIntoTheirBatchSlots) {
  auto worker = WorkerProcess::Start(dir_->path(), /*port=*/0, /*threads=*/2);
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = StandardSpec(dir_->path(), /*deterministic=*/true);
  const std::vector<Element> expected = DrainLocal(spec);
  ASSERT_EQ(expected.size(), 8u);
  for (Codec codec : {Codec::kNone, Codec::kLz4}) {
    const std::string label = absl::StrCat("codec ", static_cast<int>(codec));
    runtime::LoaderOptions plan = Plan({worker->address()}, /*cut=*/4, /*ratio=*/0.6, nullptr);
    plan.codec = codec;
    plan.threads = 1;
    auto loader = runtime::Loader::Create(spec, plan);
    ASSERT_TRUE(loader.ok()) << label << ": " << loader.status();
    std::vector<Element> got;
    ASSERT_TRUE(Drain(**loader, &got).ok()) << label;
    EXPECT_TRUE(SameBatches(expected, got)) << label;
    const runtime::LoaderReport report = (*loader)->Report();
    EXPECT_GT(report.workers[0].samples, 0) << label;
    EXPECT_EQ(report.batches_out, 8) << label;
    EXPECT_EQ(report.batches_in_place, 8) << label;
  }
}

// At the pipeline's end (cut 5) the local prefix and the received samples fill slot buffers
// of their own and the merge interleaves them: each batch is still one buffer, a view (but
// for the two buffers the end of the data leaves part-filled), and every sample comes once
// with its all-local content.
TEST_F(OffloadIdentityTest, AMixedPlanAtThePipelinesEndBatchesOneSlotBufferAtATime) {
  // Messages of 40 KB at most make the worker's chunks a sample or two (12 KB of floats each),
  // so its samples reach the merge one by one between the local ones.
  // One epoch of 256 samples: a buffer waits for a worker that lags (a loaded machine) until
  // the data ends, where in epochs of 64 a lag of two epochs would end its wait with a copy.
  TempDir dir;
  GenerateImages(dir.path(), 256);
  auto worker = WorkerProcess::Start(dir.path(), /*port=*/0, /*threads=*/2,
                                     {"--max-message-bytes", "40000"});
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = StandardSpec(dir.path(), /*deterministic=*/false);
  const std::map<SampleId, std::string> expected = SamplesById(DrainLocal(spec));
  ASSERT_EQ(expected.size(), 256u);
  runtime::LoaderOptions plan = Plan({worker->address()}, /*cut=*/5, /*ratio=*/0.5, nullptr);
  plan.split_size = 32;  // a split each side at once: their samples interleave in the merge
  auto loader = runtime::Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  EXPECT_TRUE(SamplesById(got) == expected);
  const runtime::LoaderReport report = (*loader)->Report();
  EXPECT_GT(report.workers[0].samples, 0);
  EXPECT_GT(report.samples_local, 0);
  EXPECT_EQ(report.batches_out, 32);
  // Received samples land in slots only off the bulk data channel (a trainer that could not
  // reach it takes them whole from the stream, each chunk a buffer of its own).
  ASSERT_TRUE(report.workers[0].bulk) << "the bulk data channel did not connect";
  EXPECT_GE(report.batches_in_place, report.batches_out - 2) << "of " << report.batches_out;
}

TEST_F(OffloadIdentityTest, FirstComeRunsDeliverTheSameSamplesAsTheLocalRun) {
  auto a = WorkerProcess::Start(dir_->path());
  auto b = WorkerProcess::Start(dir_->path());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const pipeline::PipelineSpec spec = StandardSpec(dir_->path(), /*deterministic=*/false);
  const std::map<SampleId, std::string> expected = SamplesById(DrainLocal(spec));
  ASSERT_EQ(expected.size(), 64u);
  for (int cut : {1, 3, kCutAfterBatch}) {
    runtime::LoaderOptions plan = Plan({a->address(), b->address()}, cut, /*ratio=*/0.7, nullptr);
    plan.codec = cut == 3 ? Codec::kLz4 : Codec::kZstd;
    auto loader = runtime::Loader::Create(spec, plan);
    ASSERT_TRUE(loader.ok()) << loader.status();
    std::vector<Element> got;
    ASSERT_TRUE(Drain(**loader, &got).ok());
    EXPECT_TRUE(SamplesById(got) == expected) << "cut " << cut;
    const runtime::LoaderReport report = (*loader)->Report();
    EXPECT_EQ(report.duplicates_dropped, 0);
    EXPECT_GT(report.workers[0].bytes_received + report.workers[1].bytes_received, 0);
  }
}

}  // namespace
}  // namespace sluice::offload_test
