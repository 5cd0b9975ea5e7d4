#include "sluice/pipeline/local_executor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/core/cpu_budget.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/test_util.h"

namespace sluice::pipeline {
namespace {

using ::testing::HasSubstr;
using testing_util::TempDir;
using testing_util::WithWatchdog;

OpSpec Op(std::string name, std::map<std::string, ops::ArgValue> args = {}) {
  return OpSpec{std::move(name), std::move(args)};
}

class LocalExecutorTest : public ::testing::Test {
 protected:
  // A spec over `n` files in dir_/data (no batching, no prefetch unless set).
  PipelineSpec Spec(int n, std::vector<OpSpec> op_specs) {
    PipelineSpec spec;
    spec.source.files = {dir_.WriteFiles(n, absl::StrCat("data", n))};
    spec.ops = std::move(op_specs);
    spec.prefetch = 0;
    return spec;
  }

  StatusOr<std::unique_ptr<LocalExecutor>> Create(const PipelineSpec& spec, int threads = 2,
                                                  size_t budget = 256 << 20) {
    ExecutorOptions options;
    options.threads = threads;
    options.max_buffered_bytes = budget;
    return LocalExecutor::Create(spec, options, *registry_);
  }

  std::unique_ptr<LocalExecutor> MustCreate(const PipelineSpec& spec, int threads = 2,
                                            size_t budget = 256 << 20) {
    StatusOr<std::unique_ptr<LocalExecutor>> ex = Create(spec, threads, budget);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return ex.ok() ? *std::move(ex) : nullptr;
  }

  static std::vector<Element> Drain(LocalExecutor& ex, size_t limit = 100000) {
    std::vector<Element> out;
    for (size_t i = 0; i < limit; ++i) {
      Element e;
      bool eos = false;
      Status s = ex.GetNext(&e, &eos);
      if (!s.ok()) {
        ADD_FAILURE() << s;
        break;
      }
      if (eos) break;
      out.push_back(std::move(e));
    }
    return out;
  }

  static std::vector<SampleId> MemberIds(const std::vector<Element>& batches) {
    std::vector<SampleId> ids;
    for (const Element& b : batches) {
      if (b.members.empty()) {
        ids.push_back(b.id);
      } else {
        ids.insert(ids.end(), b.members.begin(), b.members.end());
      }
    }
    return ids;
  }

  TempDir dir_;
  std::unique_ptr<ops::Registry> registry_ = testing_util::TestRegistry();
};

TEST_F(LocalExecutorTest, RunsSourceMapBatchPrefetchOverEpochs) {
  PipelineSpec spec;
  for (const char* cls : {"cat", "dog"}) {
    for (int i = 0; i < 5; ++i) dir_.Write(absl::StrCat("train/", cls, "/", i, ".jpg"));
  }
  spec.source.files = {dir_.path() + "/train/**/*.jpg"};
  spec.source.label = LabelMode::kParentDir;
  spec.source.shuffle = true;
  spec.source.seed = 3;
  spec.ops = {Op("tag"), Op("sleep", {{"ms", int64_t{0}}, {"spread", int64_t{2}}})};
  spec.batch.size = 4;
  spec.prefetch = 2;
  spec.epochs = 2;
  auto ex = MustCreate(spec, 3);
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(ex->threads(), 3);
  EXPECT_EQ(ex->samples_per_epoch(), 10);
  EXPECT_THAT(ex->source_files().class_names, ::testing::ElementsAre("cat", "dog"));
  EXPECT_EQ(ex->output_schema().ToString(), "{path: bytes[?,?], label: i64[?], tag: i64[?]}");
  std::vector<Element> batches = Drain(*ex);
  ASSERT_EQ(batches.size(), 5u);  // 20 samples in batches of 4 (epochs run together)
  std::vector<SampleId> ids = MemberIds(batches);
  std::sort(ids.begin(), ids.end());
  std::vector<SampleId> expected;
  for (uint32_t e = 0; e < 2; ++e) {
    for (uint64_t i = 0; i < 10; ++i) expected.push_back(SampleId{e, i});
  }
  EXPECT_EQ(ids, expected);
  for (const Element& b : batches) {
    for (size_t i = 0; i < b.members.size(); ++i) {
      // Files sorted: cat/0..4 are indices 0-4 (label 0), dog/0..4 are 5-9 (label 1).
      EXPECT_EQ(b.tensors[1].data<int64_t>()[i], b.members[i].index < 5 ? 0 : 1);
      EXPECT_EQ(b.tensors[2].data<int64_t>()[i],
                static_cast<int64_t>(b.members[i].index * 10 + b.members[i].epoch));
    }
  }
  const PipelineStats& stats = ex->stats();
  EXPECT_EQ(stats.source_samples.load(), 20);
  EXPECT_EQ(stats.samples_out.load(), 20);
  EXPECT_EQ(stats.batches_out.load(), 5);
  std::vector<OpStatsSnapshot> ops = stats.SnapshotOps();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].name, "tag");
  EXPECT_EQ(ops[0].samples, 20);
  EXPECT_EQ(ops[1].name, "sleep");
}

TEST_F(LocalExecutorTest, ThreadsComeFromOptionsThenSpecThenCpuBudget) {
  PipelineSpec spec = Spec(3, {Op("tag")});
  spec.options.threads = 5;
  EXPECT_EQ(MustCreate(spec, 2)->threads(), 2);
  EXPECT_EQ(MustCreate(spec, 0)->threads(), 5);
  spec.options.threads = 0;
  EXPECT_EQ(MustCreate(spec, 0)->threads(), ProbeCpuBudget().threads());
}

TEST_F(LocalExecutorTest, EachEpochIsAnExactPermutationWhateverTheThreads) {
  auto run = [&](int threads) {
    PipelineSpec spec =
        Spec(40, {Op("sleep", {{"ms", int64_t{0}}, {"spread", int64_t{3}}}), Op("rand")});
    spec.source.shuffle = true;
    spec.source.seed = 21;
    spec.epochs = 3;
    spec.options.deterministic = true;
    spec.prefetch = 3;
    auto ex = MustCreate(spec, threads);
    return Drain(*ex);
  };
  std::vector<Element> one = run(1);
  std::vector<Element> four = run(4);
  ASSERT_EQ(one.size(), 120u);
  ASSERT_EQ(four.size(), 120u);
  std::vector<std::vector<uint64_t>> epochs(3);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].id, four[i].id);
    EXPECT_EQ(one[i].id.epoch, i / 40);
    EXPECT_TRUE(one[i].tensors[1].Equals(four[i].tensors[1]));
    epochs[i / 40].push_back(one[i].id.index);
  }
  for (uint32_t e = 0; e < 3; ++e) {
    EXPECT_EQ(epochs[e], EpochOrder(40, true, 21, e));
    std::vector<uint64_t> sorted = epochs[e];
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < 40; ++i) EXPECT_EQ(sorted[i], i);
  }
  EXPECT_NE(epochs[0], epochs[1]);
}

TEST_F(LocalExecutorTest, ShuffleBufferIsAPermutationAndDeterministicWhenOrdered) {
  auto run = [&](int threads) {
    PipelineSpec spec = Spec(60, {Op("tag")});
    spec.shuffle_buffer = 10;
    spec.options.deterministic = true;
    spec.source.seed = 4;
    auto ex = MustCreate(spec, threads);
    std::vector<uint64_t> order;
    for (const Element& e : Drain(*ex)) order.push_back(e.id.index);
    return order;
  };
  std::vector<uint64_t> a = run(1);
  EXPECT_EQ(a, run(3));
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(sorted.size(), 60u);
  for (uint64_t i = 0; i < 60; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_FALSE(std::is_sorted(a.begin(), a.end()));
}

TEST_F(LocalExecutorTest, TakeLimitsSamplesPerEpoch) {
  PipelineSpec spec = Spec(10, {Op("tag")});
  spec.take = 4;
  spec.epochs = 2;
  spec.batch.size = 3;
  auto ex = MustCreate(spec);
  EXPECT_EQ(ex->samples_per_epoch(), 4);
  std::vector<SampleId> ids = MemberIds(Drain(*ex));
  EXPECT_EQ(ids.size(), 8u);
  for (const SampleId& id : ids) EXPECT_LT(id.index, 4u);
}

TEST_F(LocalExecutorTest, NoOpsAndNoBatchingStillRuns) {
  PipelineSpec spec = Spec(3, {});
  spec.prefetch = 1;
  auto ex = MustCreate(spec);
  std::vector<Element> out = Drain(*ex);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].tensors[0].bytes(), out[0].origin);
  EXPECT_EQ(ex->stats().batches_out.load(), 3);
}

TEST_F(LocalExecutorTest, PaddedBatch) {
  PipelineSpec spec = Spec(6, {Op("ragged")});
  spec.batch.size = 3;
  spec.batch.padded = true;
  spec.batch.padding_value = -7;
  spec.options.deterministic = true;
  auto ex = MustCreate(spec);
  EXPECT_EQ(ex->output_schema().ToString(),
            "{path: bytes[?,?], seq: f32[?,?,2], path_shape: i64[?,1], seq_shape: i64[?,2]}");
  std::vector<Element> batches = Drain(*ex);
  ASSERT_EQ(batches.size(), 2u);
  // Batch 1: indices 3, 4, 5 with 4, 1, 2 rows.
  const Element& b = batches[1];
  ASSERT_EQ(b.tensors[1].shape(), (Shape{3, 4, 2}));
  const float* v = b.tensors[1].data<float>();
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[7], 3);
  EXPECT_EQ(v[8], 4);
  EXPECT_EQ(v[9], 4);
  EXPECT_EQ(v[10], -7);
  EXPECT_EQ(v[15], -7);
  EXPECT_EQ(v[16 + 3], 5);
  EXPECT_EQ(v[16 + 4], -7);
  const int64_t* shapes = b.tensors[3].data<int64_t>();
  EXPECT_THAT(std::vector<int64_t>(shapes, shapes + 6), ::testing::ElementsAre(4, 2, 1, 2, 2, 2));
}

TEST_F(LocalExecutorTest, BatchShapeMismatchSurfacesThroughTheExecutor) {
  PipelineSpec spec = Spec(6, {Op("ragged")});
  spec.batch.size = 3;
  spec.prefetch = 2;
  auto ex = MustCreate(spec);
  Element e;
  bool eos = false;
  Status s = ex->GetNext(&e, &eos);
  EXPECT_THAT(std::string(s.message()), HasSubstr("field 'seq'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("padded_batch"));
  EXPECT_EQ(ex->GetNext(&e, &eos), s);
}

TEST_F(LocalExecutorTest, OnErrorFailNamesOpFileAndReason) {
  PipelineSpec spec = Spec(10, {Op("tag"), Op("fail_on", {{"ids", std::vector<int64_t>{6}}})});
  spec.batch.size = 2;
  spec.prefetch = 2;
  auto ex = MustCreate(spec, 3);
  Status s;
  for (int i = 0; i < 10 && s.ok(); ++i) {
    Element e;
    bool eos = false;
    s = ex->GetNext(&e, &eos);
    ASSERT_FALSE(eos);
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            absl::StrCat("ops[1].fail_on: ", dir_.path(), "/data10/f006.dat: bad sample 6"));
  Element e;
  bool eos = false;
  EXPECT_EQ(ex->GetNext(&e, &eos), s);
}

TEST_F(LocalExecutorTest, OnErrorSkipCountsAndNames) {
  PipelineSpec spec = Spec(10, {Op("fail_on", {{"ids", std::vector<int64_t>{2, 7}}})});
  spec.options.on_error = OnError::kSkip;
  spec.batch.size = 4;
  auto ex = MustCreate(spec, 2);
  std::vector<SampleId> ids = MemberIds(Drain(*ex));
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(ex->stats().skipped(), 2);
  EXPECT_EQ(ex->stats().samples_out.load(), 8);
  std::vector<std::string> names = ex->stats().skipped_names();
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names,
              ::testing::ElementsAre(
                  absl::StrCat(dir_.path(), "/data10/f002.dat: ops[0].fail_on: bad sample 2"),
                  absl::StrCat(dir_.path(), "/data10/f007.dat: ops[0].fail_on: bad sample 7")));
}

TEST_F(LocalExecutorTest, BuildErrorsNameTheOp) {
  PipelineSpec spec = Spec(3, {Op("tag"), Op("needs_tag"), Op("bogus")});
  StatusOr<std::unique_ptr<LocalExecutor>> ex = Create(spec);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("ops[2].bogus: "));
  spec.ops = {Op("needs_tag")};
  ex = Create(spec);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()),
              ::testing::StartsWith("ops[0].needs_tag: needs field 'tag'"));
  spec.ops = {Op("sleep", {{"nope", int64_t{1}}})};
  ex = Create(spec);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()), ::testing::StartsWith("ops[0].sleep: "));
}

TEST_F(LocalExecutorTest, SourceAndSpecErrors) {
  PipelineSpec spec = Spec(2, {});
  spec.source.files = {dir_.path() + "/data2/*.png"};
  StatusOr<std::unique_ptr<LocalExecutor>> ex = Create(spec);
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()), HasSubstr("/data2/*.png"));
  spec = Spec(2, {});
  spec.epochs = 0;
  EXPECT_THAT(std::string(Create(spec).status().message()), HasSubstr("epochs"));
  spec.epochs = 1;
  spec.batch.padded = true;
  spec.batch.size = 2;
  spec.batch.padding_values = {{"nothing", 1}};
  EXPECT_THAT(std::string(Create(spec).status().message()), HasSubstr("'nothing'"));
}

TEST(BuildOpsTest, DecodersLearnTheirScaleConsumer) {
  auto registry = testing_util::TestRegistry();
  Schema in = SourceSchema(LabelMode::kNone);
  StatusOr<BuiltOps> built = BuildOps({Op("decoder"), Op("flip"), Op("flip"), Op("resize"),
                                       Op("decoder"), Op("tag"), Op("resize"), Op("decoder")},
                                      /*seed=*/9, *registry, in);
  ASSERT_TRUE(built.ok()) << built.status();
  auto as_lambda = [&](int i) {
    return static_cast<const testing_util::LambdaOp*>(built->ops[i].get());
  };
  EXPECT_EQ(as_lambda(0)->scale_consumer, built->ops[3].get());
  EXPECT_EQ(as_lambda(0)->scale_consumer_ctx.position, 3);
  EXPECT_EQ(as_lambda(0)->scale_consumer_ctx.seed, 9u);
  EXPECT_EQ(as_lambda(4)->scale_consumer, nullptr);  // `tag` (kOther) is in the way
  EXPECT_EQ(as_lambda(7)->scale_consumer, nullptr);  // nothing after it
  EXPECT_EQ(built->contexts[5].position, 5);
  EXPECT_EQ(built->Label(5), "ops[5].tag");
}

// --------------------------------------------------------------------------- cancellation

class CancelTest : public LocalExecutorTest {
 protected:
  std::unique_ptr<LocalExecutor> Slow() {
    PipelineSpec spec = Spec(200, {Op("sleep", {{"ms", int64_t{40}}})});
    spec.batch.size = 2;
    spec.prefetch = 2;
    spec.epochs = -1;
    return MustCreate(spec, 2);
  }
};

TEST_F(CancelTest, BeforeTheFirstGetNext) {
  WithWatchdog(30, [&] {
    auto ex = Slow();
    ex->Cancel();
    Element e;
    bool eos = false;
    EXPECT_TRUE(absl::IsCancelled(ex->GetNext(&e, &eos)));
    EXPECT_TRUE(absl::IsCancelled(ex->GetNext(&e, &eos)));
  });
}

TEST_F(CancelTest, WhileTheConsumerIsBlockedInGetNext) {
  WithWatchdog(30, [&] {
    PipelineSpec spec = Spec(20, {Op("sleep", {{"ms", int64_t{400}}})});
    spec.batch.size = 4;
    spec.prefetch = 2;
    auto ex = MustCreate(spec, 2);
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ex->Cancel();
    });
    // The first batch needs two rounds of 400 ms sleeps, so this waits until cancelled.
    Element e;
    bool eos = false;
    Status s = ex->GetNext(&e, &eos);
    canceller.join();
    EXPECT_TRUE(absl::IsCancelled(s)) << s;
  });
}

TEST_F(CancelTest, WhileWorkersAreBusy) {
  WithWatchdog(30, [&] {
    auto ex = Slow();
    Element e;
    bool eos = false;
    ASSERT_TRUE(ex->GetNext(&e, &eos).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers mid-op
    std::thread canceller([&] { ex->Cancel(); });
    canceller.join();
    EXPECT_TRUE(absl::IsCancelled(ex->GetNext(&e, &eos)));
  });
}

TEST_F(CancelTest, AfterEndOfStream) {
  WithWatchdog(30, [&] {
    PipelineSpec spec = Spec(5, {Op("tag")});
    spec.batch.size = 2;
    spec.prefetch = 2;
    auto ex = MustCreate(spec, 2);
    EXPECT_EQ(Drain(*ex).size(), 3u);
    Element e;
    bool eos = false;
    ASSERT_TRUE(ex->GetNext(&e, &eos).ok());
    EXPECT_TRUE(eos);
    ex->Cancel();
    EXPECT_TRUE(absl::IsCancelled(ex->GetNext(&e, &eos)));
  });
}

TEST_F(CancelTest, DestructionFromEveryStateDoesNotHang) {
  WithWatchdog(30, [&] {
    Slow().reset();  // before the first GetNext
    {
      auto ex = Slow();  // workers busy, queues filling
      Element e;
      bool eos = false;
      ASSERT_TRUE(ex->GetNext(&e, &eos).ok());
    }
    {
      auto ex = Slow();
      ex->Cancel();  // cancelled, then destroyed
    }
    {
      PipelineSpec spec = Spec(3, {Op("tag")});
      spec.prefetch = 1;
      auto ex = MustCreate(spec, 2);
      EXPECT_EQ(Drain(*ex).size(), 3u);  // after end of stream
    }
    {
      PipelineSpec spec = Spec(3, {Op("fail_on", {{"ids", std::vector<int64_t>{0}}})});
      spec.prefetch = 1;
      auto ex = MustCreate(spec, 2);
      Status s;
      for (int i = 0; i < 5 && s.ok(); ++i) {  // unordered: sample 0 need not come first
        Element e;
        bool eos = false;
        s = ex->GetNext(&e, &eos);
      }
      EXPECT_FALSE(s.ok());  // destroyed after an error
    }
  });
}

// --------------------------------------------------------------------------- memory bound

TEST_F(LocalExecutorTest, PeakMemoryStaysBoundedOverManyBatches) {
  constexpr int64_t kElement = 1 << 20;
  constexpr int kThreads = 3;
  constexpr int kBatch = 4;
  constexpr int kPrefetch = 2;
  constexpr int kBatches = 320;
  const int64_t baseline = Buffer::LiveBytes();
  {
    PipelineSpec spec = Spec(64, {Op("blob", {{"bytes", kElement}})});
    spec.epochs = kBatches * kBatch / 64;
    spec.batch.size = kBatch;
    spec.prefetch = kPrefetch;
    auto ex = MustCreate(spec, kThreads, /*budget=*/1 << 30);
    // Capacities: the map holds at most max(2 x threads, 16) elements when batching (see
    // LocalExecutor::Create); the batch stage at most one
    // batch of members plus the batch it is stacking; the prefetch queue `prefetch` batches;
    // the consumer one batch. Paths are a few bytes each, hence the slack.
    const int64_t bound =
        kElement * (std::max(2 * kThreads, 16) + 2 * kBatch + kPrefetch * kBatch + kBatch) +
        (1 << 20);
    std::atomic<int64_t> peak{0};
    std::atomic<bool> stop{false};
    std::thread sampler([&] {
      while (!stop.load()) {
        int64_t live = Buffer::LiveBytes() - baseline;
        int64_t prev = peak.load();
        while (live > prev && !peak.compare_exchange_weak(prev, live)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    int batches = 0;
    int64_t step_peak = 0;
    for (;;) {
      Element e;
      bool eos = false;
      ASSERT_TRUE(ex->GetNext(&e, &eos).ok());
      if (eos) break;
      ++batches;
      ASSERT_EQ(e.tensors[1].shape(), (Shape{kBatch, kElement}));
      step_peak = std::max(step_peak, Buffer::LiveBytes() - baseline);
      ASSERT_LE(Buffer::LiveBytes() - baseline, bound) << "after batch " << batches;
      std::this_thread::sleep_for(std::chrono::microseconds(500));  // a slow consumer
    }
    stop = true;
    sampler.join();
    EXPECT_EQ(batches, kBatches);
    EXPECT_LE(peak.load(), bound);
    EXPECT_GE(step_peak, kElement * kBatch);  // the sampling did see real data
    std::printf("live bytes: peak %.1f MB sampled, %.1f MB at steps, bound %.1f MB\n",
                peak.load() / 1e6, step_peak / 1e6, bound / 1e6);
  }
  EXPECT_LE(Buffer::LiveBytes() - baseline, 0) << "buffers left after destruction";
}

}  // namespace
}  // namespace sluice::pipeline

namespace sluice::pipeline {
namespace {

// Samples written into their batch's slots (core/batch_slots.h): the batches hold exactly
// the bytes the same pipeline gives sample by sample, whether or not they were stacked in
// place, and the executor counts the batches that were.
class BatchSlotsPipelineTest : public ::testing::Test {
 protected:
  // `n` small JPEGs of different sizes and colours; the image pipeline's tail with a crop to
  // a fixed shape, so normalize (the last op) writes into slots.
  PipelineSpec Spec(int n) {
    for (int i = 0; i < n; ++i) {
      cv::Mat img(20 + i % 5, 24 + i % 3, CV_8UC3, cv::Scalar(7 * i % 256, 3 * i % 256, 200));
      std::vector<uchar> jpeg;
      cv::imencode(".jpg", img, jpeg);
      dir_.Write(absl::StrCat("img/", 100 + i, ".jpg"), std::string(jpeg.begin(), jpeg.end()));
    }
    PipelineSpec spec;
    spec.source.files = {dir_.path() + "/img/*.jpg"};
    spec.source.shuffle = true;
    spec.source.seed = 5;
    spec.ops = {OpSpec{"read_file", {}}, OpSpec{"decode_jpeg", {}},
                OpSpec{"center_crop", {{"size", std::vector<int64_t>{16, 16}}}},
                OpSpec{"normalize",
                       {{"mean", std::vector<double>{0.5, 0.4, 0.3}},
                        {"std", std::vector<double>{0.2, 0.25, 0.3}},
                        {"layout", std::string("CHW")}}}};
    spec.prefetch = 2;
    return spec;
  }

  std::vector<Element> Run(const PipelineSpec& spec, int threads, int64_t* in_place = nullptr) {
    ExecutorOptions options;
    options.threads = threads;
    StatusOr<std::unique_ptr<LocalExecutor>> ex = LocalExecutor::Create(spec, options);
    EXPECT_TRUE(ex.ok()) << ex.status();
    if (!ex.ok()) return {};
    std::vector<Element> out;
    for (int i = 0; i < 1000; ++i) {
      Element e;
      bool eos = false;
      Status s = (*ex)->GetNext(&e, &eos);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok() || eos) break;
      out.push_back(std::move(e));
    }
    if (in_place != nullptr) *in_place = (*ex)->stats().batches_in_place.load();
    return out;
  }

  // Every batch's image rows against the samples of an unbatched run, by sample id.
  void ExpectBatchesHoldTheSamples(const std::vector<Element>& batches,
                                   const std::vector<Element>& samples, size_t total) {
    const int image = 1;  // {path, image}
    std::map<SampleId, const Tensor*> by_id;
    for (const Element& s : samples) by_id[s.id] = &s.tensors[image];
    ASSERT_EQ(by_id.size(), total);
    size_t seen = 0;
    for (const Element& b : batches) {
      const Tensor& t = b.tensors[image];
      ASSERT_EQ(t.dim(0), static_cast<int64_t>(b.members.size()));
      const size_t row = t.nbytes() / b.members.size();
      for (size_t i = 0; i < b.members.size(); ++i) {
        const Tensor* want = by_id.at(b.members[i]);
        ASSERT_EQ(want->nbytes(), row);
        EXPECT_EQ(std::memcmp(t.raw() + i * row, want->raw(), row), 0)
            << "batch row " << i << " is not sample " << b.members[i].index;
        ++seen;
      }
    }
    EXPECT_EQ(seen, total);
  }

  // `spec` in batches of `batch` on `threads` threads, checked against the same spec unbatched
  // on one thread (`total` samples in all).
  std::vector<Element> RunBatched(PipelineSpec spec, int64_t batch, int threads, size_t total,
                                  int64_t* in_place) {
    spec.batch.size = 0;
    const std::vector<Element> samples = Run(spec, 1);
    spec.batch.size = batch;
    std::vector<Element> batches = Run(spec, threads, in_place);
    ExpectBatchesHoldTheSamples(batches, samples, total);
    return batches;
  }

  TempDir dir_;
};

TEST_F(BatchSlotsPipelineTest, OneThreadStacksEveryBatchInPlaceWithTheSamplesBytes) {
  PipelineSpec spec = Spec(10);
  spec.options.deterministic = true;
  int64_t in_place = -1;
  // 10 samples: batches of 4, 4 and 2.
  const std::vector<Element> batches = RunBatched(spec, 4, 1, 10, &in_place);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(in_place, 3);  // the last, short batch too: a view of its first two slots
  EXPECT_EQ(batches[0].tensors[1].shape(), (Shape{4, 3, 16, 16}));
}

// A pipeline whose last op is random_flip (a tail left to the accelerator, say): the op
// writes the samples it does not flip into their slots too, so no batch is left with a hole.
TEST_F(BatchSlotsPipelineTest, RandomFlipLastFillsEverySlotFlippedOrNot) {
  PipelineSpec spec = Spec(10);
  spec.ops.back() = OpSpec{"random_flip", {{"p", 0.5}}};
  spec.options.deterministic = true;
  int64_t in_place = -1;
  const std::vector<Element> batches = RunBatched(spec, 5, 1, 10, &in_place);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(in_place, 2);
  EXPECT_EQ(batches[0].tensors[1].shape(), (Shape{5, 16, 16, 3}));
}

TEST_F(BatchSlotsPipelineTest, TwoThreadsOutOfTurnStillGiveEachSampleItsOwnRow) {
  PipelineSpec spec = Spec(40);
  spec.options.deterministic = false;  // first finished, first batched
  spec.epochs = 3;                     // samples of three epochs, so ids repeat only across epochs
  int64_t in_place = -1;
  const std::vector<Element> batches = RunBatched(spec, 4, 2, 120, &in_place);
  ASSERT_EQ(batches.size(), 30u);
  EXPECT_GE(in_place, 0);
  EXPECT_LE(in_place, 30);  // a batch whose samples finished out of turn was copied
}

TEST_F(BatchSlotsPipelineTest, AShuffleBufferBetweenTheMapAndTheBatcherTurnsSlotsOff) {
  PipelineSpec spec = Spec(12);
  spec.shuffle_buffer = 5;
  spec.options.deterministic = true;
  int64_t in_place = -1;
  const std::vector<Element> batches = RunBatched(spec, 4, 1, 12, &in_place);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(in_place, 0);
}

}  // namespace
}  // namespace sluice::pipeline
