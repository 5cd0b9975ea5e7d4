#include "sluice/pipeline/map.h"

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/test_util.h"

// Its own namespace: test files are compiled together (SLUICE_UNITY_TESTS).
namespace sluice::pipeline::map_test {
namespace {

using ::testing::HasSubstr;
using testing_util::Drain;
using testing_util::FakeFiles;
using testing_util::WithWatchdog;

OpSpec Op(std::string name, std::map<std::string, ops::ArgValue> args = {}) {
  return OpSpec{std::move(name), std::move(args)};
}

// Source (FakeFiles) -> ParallelMap over the test ops, with stats.
// REQUIRES: the previous iterator made by Make() is gone (its ops are replaced).
class MapTest : public ::testing::Test {
 protected:
  std::unique_ptr<ParallelMapIterator> Make(const std::vector<OpSpec>& op_specs, int files,
                                            MapOptions options, SourceOptions source = {}) {
    StatusOr<BuiltOps> built =
        BuildOps(op_specs, source.seed, *registry_, SourceSchema(LabelMode::kNone));
    EXPECT_TRUE(built.ok()) << built.status();
    built_ = *std::move(built);
    stats_ = std::make_unique<PipelineStats>();
    stats_->Init(built_.names);
    options.stats = stats_.get();
    auto input = std::make_unique<SourceIterator>(FakeFiles(files), source);
    return ParallelMapIterator::Create(std::move(input), MakeStages(built_, stats_.get()),
                                       built_.output_schema, options);
  }

  static std::vector<SampleId> Ids(const std::vector<Element>& elements) {
    std::vector<SampleId> ids;
    for (const Element& e : elements) ids.push_back(e.id);
    return ids;
  }

  static std::vector<SampleId> AllIds(uint32_t epochs, uint64_t n) {
    std::vector<SampleId> ids;
    for (uint32_t e = 0; e < epochs; ++e) {
      for (uint64_t i = 0; i < n; ++i) ids.push_back(SampleId{e, i});
    }
    return ids;
  }

  std::unique_ptr<ops::Registry> registry_ = testing_util::TestRegistry();
  BuiltOps built_;
  std::unique_ptr<PipelineStats> stats_;
};

TEST_F(MapTest, UnorderedDeliversEverySampleIdExactlyOnce) {
  MapOptions options;
  options.threads = 4;
  SourceOptions source;
  source.epochs = 2;
  source.shuffle = true;
  source.seed = 5;
  auto it = Make({Op("sleep", {{"ms", int64_t{0}}, {"spread", int64_t{3}}}), Op("tag")}, 120,
                 options, source);
  EXPECT_EQ(it->schema().ToString(), "{path: bytes[?], tag: i64[]}");
  std::vector<Element> out = Drain(*it);
  std::vector<SampleId> ids = Ids(out);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, AllIds(2, 120));
  for (const Element& e : out) {
    ASSERT_EQ(e.tensors.size(), 2u);
    EXPECT_EQ(e.tensors[1].scalar_int(), static_cast<int64_t>(e.id.index * 10 + e.id.epoch));
    EXPECT_EQ(e.tensors[0].bytes(), e.origin);
  }
  EXPECT_EQ(stats_->op(1).samples.load(), 240);
}

TEST_F(MapTest, OrderedModePreservesInputOrder) {
  MapOptions options;
  options.threads = 4;
  options.deterministic = true;
  SourceOptions source;
  source.shuffle = true;
  source.seed = 11;
  // Later samples often finish first: sleeps of 0..4 ms by index.
  auto it = Make({Op("sleep", {{"ms", int64_t{0}}, {"spread", int64_t{5}}})}, 80, options, source);
  std::vector<SampleId> ids = Ids(Drain(*it));
  std::vector<uint64_t> order = EpochOrder(80, true, 11, 0);
  ASSERT_EQ(ids.size(), order.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], (SampleId{0, order[i]}));
}

TEST_F(MapTest, RandomOpsDependOnIdentityNotOnThreads) {
  auto run = [&](int threads) {
    MapOptions options;
    options.threads = threads;
    SourceOptions source;
    source.epochs = 2;
    source.seed = 77;
    auto it = Make({Op("sleep", {{"ms", int64_t{0}}, {"spread", int64_t{2}}}), Op("rand")}, 60,
                   options, source);
    std::map<SampleId, int64_t> draws;
    for (const Element& e : Drain(*it)) draws[e.id] = e.tensors[1].scalar_int();
    return draws;
  };
  std::map<SampleId, int64_t> one = run(1);
  std::map<SampleId, int64_t> four = run(4);
  ASSERT_EQ(one.size(), 120u);
  EXPECT_EQ(one, four);
  std::set<int64_t> distinct;
  for (const auto& [id, v] : one) distinct.insert(v);
  EXPECT_EQ(distinct.size(), one.size());  // every identity draws differently
}

TEST_F(MapTest, FailStopsWithOpFileAndReason) {
  MapOptions options;
  options.threads = 3;
  auto it = Make({Op("tag"), Op("fail_on", {{"ids", std::vector<int64_t>{5}}})}, 20, options);
  Status status;
  for (int i = 0; i < 100 && status.ok(); ++i) {
    Element e;
    bool eos = false;
    status = it->GetNext(&e, &eos);
    ASSERT_FALSE(eos) << "the failure never surfaced";
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "ops[1].fail_on: /data/odd/5.jpg: bad sample 5");
  // Sticky.
  Element e;
  bool eos = false;
  EXPECT_EQ(it->GetNext(&e, &eos), status);
  EXPECT_EQ(it->GetNext(&e, &eos), status);
  EXPECT_EQ(stats_->op(1).errors.load(), 1);
}

TEST_F(MapTest, OrderedFailDeliversEverythingBeforeTheError) {
  MapOptions options;
  options.threads = 4;
  options.deterministic = true;
  auto it = Make({Op("sleep", {{"ms", int64_t{0}}, {"spread", int64_t{3}}}),
                  Op("fail_on", {{"ids", std::vector<int64_t>{9}}})},
                 30, options);
  for (uint64_t i = 0; i < 9; ++i) {
    Element e;
    bool eos = false;
    ASSERT_TRUE(it->GetNext(&e, &eos).ok());
    ASSERT_FALSE(eos);
    EXPECT_EQ(e.id.index, i);
  }
  Element e;
  bool eos = false;
  Status status = it->GetNext(&e, &eos);
  EXPECT_THAT(std::string(status.message()), HasSubstr("ops[1].fail_on: /data/odd/9.jpg"));
}

TEST_F(MapTest, SkipDropsCountsAndNamesTheSamples) {
  for (bool deterministic : {false, true}) {
    MapOptions options;
    options.threads = 3;
    options.deterministic = deterministic;
    options.on_error = OnError::kSkip;
    std::mutex mu;
    std::vector<std::pair<uint64_t, std::string>> reported;
    options.on_skip = [&](const Element& e, const Status& error) {
      std::lock_guard<std::mutex> lock(mu);
      reported.emplace_back(e.id.index, std::string(error.message()));
    };
    auto it = Make({Op("fail_on", {{"ids", std::vector<int64_t>{3, 8}}}), Op("tag")}, 12, options);
    std::vector<SampleId> ids = Ids(Drain(*it));
    if (!deterministic) std::sort(ids.begin(), ids.end());
    std::vector<SampleId> expected;
    for (uint64_t i = 0; i < 12; ++i) {
      if (i != 3 && i != 8) expected.push_back(SampleId{0, i});
    }
    EXPECT_EQ(ids, expected);
    EXPECT_EQ(stats_->skipped(), 2);
    std::vector<std::string> names = stats_->skipped_names();
    std::sort(names.begin(), names.end());
    EXPECT_THAT(names, ::testing::ElementsAre("/data/even/8.jpg: ops[0].fail_on: bad sample 8",
                                              "/data/odd/3.jpg: ops[0].fail_on: bad sample 3"));
    EXPECT_EQ(stats_->op(0).errors.load(), 2);
    EXPECT_EQ(stats_->op(1).samples.load(), 10);
    std::sort(reported.begin(), reported.end());
    EXPECT_THAT(reported, ::testing::ElementsAre(
                              std::make_pair(3, "ops[0].fail_on: /data/odd/3.jpg: bad sample 3"),
                              std::make_pair(8, "ops[0].fail_on: /data/even/8.jpg: bad sample 8")));
  }
}

TEST_F(MapTest, CountsSamplesCpuAndBytesPerOp) {
  MapOptions options;
  options.threads = 2;
  auto it = Make({Op("burn", {{"us", int64_t{300}}}), Op("blob", {{"bytes", int64_t{100}}})}, 20,
                 options);
  std::vector<Element> out = Drain(*it);
  ASSERT_EQ(out.size(), 20u);
  std::vector<OpStatsSnapshot> snap = stats_->SnapshotOps();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].name, "burn");
  EXPECT_EQ(snap[0].samples, 20);
  EXPECT_GE(snap[0].cpu_ns, 20 * 300'000);  // the op spins until its thread used 300 us
  EXPECT_EQ(snap[1].name, "blob");
  EXPECT_EQ(snap[1].samples, 20);
  int64_t path_bytes = 0;
  for (const Element& e : out) path_bytes += static_cast<int64_t>(e.origin.size());
  EXPECT_EQ(snap[1].bytes_out, path_bytes + 20 * 100);
  EXPECT_EQ(snap[0].bytes_out, path_bytes);
  EXPECT_DOUBLE_EQ(snap[1].bytes_per_sample(), static_cast<double>(path_bytes + 2000) / 20);
}

TEST_F(MapTest, KeepsAtMostTheConfiguredElementsInFlight) {
  MapOptions options;
  options.threads = 3;  // default window: 6
  auto it = Make({Op("blob", {{"bytes", int64_t{1000}}})}, 40, options);
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow consumer
    EXPECT_LE(it->in_flight(), 6u);
    Element e;
    bool eos = false;
    ASSERT_TRUE(it->GetNext(&e, &eos).ok());
    ASSERT_FALSE(eos);
  }
  options.max_in_flight = 2;
  options.threads = 4;
  it.reset();
  it = Make({Op("tag")}, 30, options);
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_LE(it->in_flight(), 2u);
    Element e;
    bool eos = false;
    ASSERT_TRUE(it->GetNext(&e, &eos).ok());
  }
}

// A consumer woken for a group of results (MapOptions::wake_after) is still woken when fewer
// can come: the in-flight cap, the bytes budget, the end of the stream and an error each stop
// the workers short of a group, and every sample (or the error) still arrives.
TEST_F(MapTest, AConsumerWokenForAGroupIsWokenWhenFewerCanCome) {
  WithWatchdog(60, [&] {
    MapOptions options;
    options.threads = 2;
    options.wake_after = 100;  // more than can ever be ready at once
    options.max_in_flight = 4;
    auto it = Make({Op("sleep", {{"ms", int64_t{0}}, {"spread", int64_t{2}}})}, 30, options);
    EXPECT_EQ(Drain(*it).size(), 30u) << "the in-flight cap";
    it.reset();

    options.max_in_flight = 16;
    options.wake_after = 8;
    options.max_buffered_bytes = 2500;  // two or three 1000-byte results
    it = Make({Op("blob", {{"bytes", int64_t{1000}}})}, 30, options);
    EXPECT_EQ(Drain(*it).size(), 30u) << "the bytes budget";
    it.reset();

    options.max_buffered_bytes = 0;
    it = Make({Op("tag")}, 3, options);
    EXPECT_EQ(Drain(*it).size(), 3u) << "the end of the stream";
    it.reset();

    it = Make({Op("fail_on", {{"ids", std::vector<int64_t>{5}}})}, 30, options);
    Status status;
    for (int i = 0; i < 40; ++i) {
      Element e;
      bool eos = false;
      status = it->GetNext(&e, &eos);
      if (!status.ok() || eos) break;
    }
    EXPECT_THAT(status.message(), HasSubstr("ops[0].fail_on")) << "an error";
  });
}

TEST_F(MapTest, InputErrorsEndTheStream) {
  Schema schema({{"x", DType::kI64, {}}});
  std::vector<Element> elements;
  for (uint64_t i = 0; i < 5; ++i)
    elements.push_back(testing_util::MakeElement(i, {Tensor::Scalar(1)}));
  auto input = std::make_unique<testing_util::VectorIterator>(schema, elements,
                                                              absl::UnavailableError("disk gone"));
  MapOptions options;
  options.threads = 2;
  options.deterministic = true;
  auto it = ParallelMapIterator::Create(std::move(input), {}, schema, options);
  for (int i = 0; i < 5; ++i) {
    Element e;
    bool eos = false;
    ASSERT_TRUE(it->GetNext(&e, &eos).ok());
  }
  Element e;
  bool eos = false;
  EXPECT_EQ(it->GetNext(&e, &eos).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(it->GetNext(&e, &eos).code(), absl::StatusCode::kUnavailable);
}

TEST_F(MapTest, EndOfStreamIsSticky) {
  MapOptions options;
  options.threads = 2;
  auto it = Make({Op("tag")}, 3, options);
  EXPECT_EQ(Drain(*it).size(), 3u);
  for (int i = 0; i < 3; ++i) {
    Element e;
    bool eos = false;
    ASSERT_TRUE(it->GetNext(&e, &eos).ok());
    EXPECT_TRUE(eos);
  }
}

TEST_F(MapTest, CancelWakesABlockedConsumer) {
  WithWatchdog(20, [&] {
    MapOptions options;
    options.threads = 2;
    auto it = Make({Op("sleep", {{"ms", int64_t{1000}}})}, 100, options);
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      it->Cancel();
    });
    Element e;
    bool eos = false;
    Status status = it->GetNext(&e, &eos);
    canceller.join();
    EXPECT_TRUE(absl::IsCancelled(status)) << status;
    EXPECT_TRUE(absl::IsCancelled(it->GetNext(&e, &eos)));
    it.reset();  // joins after the current sleeps end
  });
}

TEST_F(MapTest, CancelBeforeFirstGetNextAndDestroyWhileBusy) {
  WithWatchdog(20, [&] {
    MapOptions options;
    options.threads = 3;
    auto it = Make({Op("sleep", {{"ms", int64_t{20}}})}, 1000, options);
    it->Cancel();
    Element e;
    bool eos = false;
    EXPECT_TRUE(absl::IsCancelled(it->GetNext(&e, &eos)));
    it.reset();
    it = Make({Op("sleep", {{"ms", int64_t{20}}})}, 1000, options);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    it.reset();  // workers are mid-op; destruction must not hang
    it = Make({Op("tag")}, 5, options);
    EXPECT_EQ(Drain(*it).size(), 5u);
    it->Cancel();  // after end of stream
    EXPECT_TRUE(absl::IsCancelled(it->GetNext(&e, &eos)));
  });
}

TEST(ApplyStagesTest, FormatsTheFailure) {
  auto registry = testing_util::TestRegistry();
  StatusOr<BuiltOps> built =
      BuildOps({Op("tag"), Op("fail_on", {{"ids", std::vector<int64_t>{0}}})}, 0, *registry,
               SourceSchema(LabelMode::kNone), /*first_position=*/2);
  ASSERT_TRUE(built.ok()) << built.status();
  std::vector<MapStage> stages = MakeStages(*built, nullptr);
  Element e = MakeSourceElement(*FakeFiles(1), false, 0, 0);
  Status s = ApplyStages(stages, e);
  EXPECT_EQ(s.message(), "ops[3].fail_on: /data/even/0.jpg: bad sample 0");
}

// An allocation that fails inside an op (a size from hostile data or arguments) is the
// sample's error, named by op and file; it never leaves the op as an exception.
TEST(ApplyStagesTest, AnExceptionInAnOpIsTheSamplesError) {
  auto registry = testing_util::TestRegistry();
  const std::pair<int64_t, std::string> cases[] = {
      {0, "ops[0].throw_on: /data/even/0.jpg: out of memory: an allocation failed"},
      {2, "ops[0].throw_on: /data/even/0.jpg: out of memory (OpenCV): Failed to allocate 1 TB"},
      {3, "ops[0].throw_on: /data/even/0.jpg: unexpected exception: something odd"}};
  for (const auto& [kind, message] : cases) {
    StatusOr<BuiltOps> built =
        BuildOps({Op("throw_on", {{"ids", std::vector<int64_t>{0}}, {"kind", kind}})}, 0, *registry,
                 SourceSchema(LabelMode::kNone));
    ASSERT_TRUE(built.ok()) << built.status();
    std::vector<MapStage> stages = MakeStages(*built, nullptr);
    Element e = MakeSourceElement(*FakeFiles(1), false, 0, 0);
    Status s = ApplyStages(stages, e);
    EXPECT_EQ(s.message(), message);
    EXPECT_EQ(s.code(),
              kind == 3 ? absl::StatusCode::kInternal : absl::StatusCode::kResourceExhausted);
  }
  StatusOr<BuiltOps> built =
      BuildOps({Op("throw_on", {{"ids", std::vector<int64_t>{0}}, {"kind", int64_t{1}}})}, 0,
               *registry, SourceSchema(LabelMode::kNone));
  ASSERT_TRUE(built.ok()) << built.status();
  std::vector<MapStage> stages = MakeStages(*built, nullptr);
  Element e = MakeSourceElement(*FakeFiles(1), false, 0, 0);
  Status s = ApplyStages(stages, e);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("out of memory: an allocation was too large ("));
}

// ... and it follows on_error: skip drops the sample and counts it, fail stops the stream
// with the message.
TEST_F(MapTest, AnAllocationFailureFollowsOnError) {
  MapOptions options;
  options.threads = 2;
  options.on_error = OnError::kSkip;
  auto it = Make({Op("throw_on", {{"ids", std::vector<int64_t>{1, 3}}})}, 6, options);
  EXPECT_EQ(Drain(*it).size(), 4u);
  it.reset();
  options.on_error = OnError::kFail;
  it = Make({Op("throw_on", {{"ids", std::vector<int64_t>{1}}})}, 6, options);
  Element e;
  bool eos = false;
  Status s;
  while ((s = it->GetNext(&e, &eos)).ok() && !eos) {
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("ops[0].throw_on: "));
  EXPECT_THAT(s.message(), HasSubstr("out of memory: an allocation failed"));
}

}  // namespace
}  // namespace sluice::pipeline::map_test
