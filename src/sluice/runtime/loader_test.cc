// Loader tests against an in-process gRPC worker (the process-level tests with real
// `sluice worker` processes live in tests/offload_*_test.cc).
#include "sluice/runtime/loader.h"

#include <stdlib.h>

#include <condition_variable>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/tar.h"
#include "sluice/runtime/connector_test_util.h"
#include "sluice/rpc/grpc_worker_server.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sluice-runtime-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& rel, const std::string& bytes) const {
    fs::path p = fs::path(path_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }

 private:
  std::string path_;
};

// read_file, decode_jpeg, random_resized_crop, random_flip, normalize; batches of 4.
pipeline::PipelineSpec ImageSpec(const std::string& glob, bool deterministic) {
  pipeline::PipelineSpec spec;
  spec.source.files = {glob};
  spec.source.label = pipeline::LabelMode::kParentDir;
  spec.source.shuffle = true;
  spec.source.seed = 11;
  spec.ops = {{"read_file", {}},
              // Reduced-size decoding (the default): at cut 2 the worker's decoder must
              // still size its decode for the crop that runs in the trainer.
              {"decode_jpeg", {}},
              {"random_resized_crop", {{"size", std::vector<int64_t>{16, 16}}}},
              {"random_flip", {}},
              {"normalize",
               {{"mean", std::vector<double>{0.5, 0.4, 0.3}},
                {"std", std::vector<double>{0.2, 0.2, 0.2}}}}};
  spec.batch.size = 4;
  spec.prefetch = 2;
  spec.options.deterministic = deterministic;
  spec.options.threads = 2;
  return spec;
}

class LoaderTest : public ::testing::Test {
 protected:
  static constexpr int kImages = 48;

  void SetUp() override {
    for (int i = 0; i < kImages; ++i) {
      Tensor img = ops::test::TexturedImage(40 + 3 * (i % 5), 44 + 2 * (i % 7), 3, i + 1);
      dir_.Write(absl::StrCat("data/", i % 3 ? "dog" : "cat", "/", 100 + i, ".jpg"),
                 ops::test::EncodeJpeg(img));
    }
    glob_ = dir_.path() + "/data/**/*.jpg";
  }

  std::unique_ptr<rpc::GrpcWorkerServer> StartWorker(int threads = 2) {
    rpc::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.worker.threads = threads;
    options.worker.metrics_interval_s = 0.1;
    options.worker.data_root = dir_.path();
    auto server = rpc::GrpcWorkerServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // `files_spec`'s images packed into three tar shards of 16 in the order the files resolve
  // (labels in a `cls` member): the same spec reading them.
  pipeline::PipelineSpec PackShards(const pipeline::PipelineSpec& files_spec) {
    StatusOr<pipeline::SourceFiles> files = pipeline::ResolveSource(files_spec.source);
    EXPECT_TRUE(files.ok()) << files.status();
    if (!files.ok()) return files_spec;
    std::string tar;
    int shards = 0;
    for (size_t i = 0; i < files->paths.size(); ++i) {
      std::ifstream in(files->paths[i], std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      const std::string key = absl::StrCat("k", 1000 + i);
      EXPECT_TRUE(pipeline::AppendTarMember(&tar, key + ".jpg", bytes).ok());
      EXPECT_TRUE(
          pipeline::AppendTarMember(&tar, key + ".cls", absl::StrCat(files->labels[i])).ok());
      if (i % 16 == 15 || i + 1 == files->paths.size()) {
        pipeline::AppendTarEnd(&tar);
        dir_.Write(absl::StrCat("shards/s-", shards++, ".tar"), tar);
        tar.clear();
      }
    }
    pipeline::PipelineSpec spec = files_spec;
    spec.source.files.clear();
    spec.source.shards = {dir_.path() + "/shards/s-{0..2}.tar"};
    spec.source.data = "jpg";
    spec.source.label = pipeline::LabelMode::kMember;
    spec.source.label_member = "cls";
    return spec;
  }

  LoaderOptions Plan(const std::vector<std::string>& addresses, int cut, double ratio,
                     ReadMode read_mode = ReadMode::kRemoteRead) {
    LoaderOptions o;
    for (const std::string& a : addresses) {
      rpc::ConnectOptions c;
      c.address = a;
      c.connect_timeout_s = 2;
      o.workers.push_back(c);
    }
    o.cut = cut;
    o.ratio = ratio;
    o.read_mode = read_mode;
    o.split_size = 8;
    o.threads = 2;
    o.reconnect_initial_s = 0.05;
    o.reconnect_max_s = 0.2;
    o.warn = [this](const std::string& w) {
      std::lock_guard<std::mutex> lock(warn_mu_);
      warnings_.push_back(w);
    };
    return o;
  }

  static std::vector<Element> DrainLocal(const pipeline::PipelineSpec& spec) {
    auto ex = pipeline::LocalExecutor::Create(spec);
    EXPECT_TRUE(ex.ok()) << ex.status();
    std::vector<Element> out;
    for (;;) {
      Element e;
      bool end = false;
      Status s = (*ex)->GetNext(&e, &end);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok() || end) break;
      out.push_back(std::move(e));
    }
    return out;
  }

  static Status Drain(Loader& loader, std::vector<Element>* out) {
    for (;;) {
      Element e;
      bool end = false;
      SLUICE_RETURN_IF_ERROR(loader.GetNext(&e, &end));
      if (end) return absl::OkStatus();
      out->push_back(std::move(e));
    }
  }

  // Every sample's content keyed by SampleId (batches are split into their members).
  static std::map<SampleId, std::string> ById(const std::vector<Element>& batches) {
    std::map<SampleId, std::string> out;
    for (const Element& b : batches) {
      for (size_t m = 0; m < b.members.size(); ++m) {
        std::string bytes;
        for (const Tensor& t : b.tensors) {
          const Tensor row = t.Slice(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1);
          bytes.append(row.bytes());
        }
        EXPECT_TRUE(out.emplace(b.members[m], bytes).second)
            << "sample " << b.members[m].index << " delivered twice";
      }
    }
    return out;
  }

  static void ExpectIdentical(const std::vector<Element>& expected, const std::vector<Element>& got,
                              const std::string& label) {
    ASSERT_EQ(expected.size(), got.size()) << label;
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(expected[i].members, got[i].members) << label << " batch " << i;
      ASSERT_EQ(expected[i].tensors.size(), got[i].tensors.size()) << label;
      for (size_t t = 0; t < expected[i].tensors.size(); ++t) {
        ASSERT_TRUE(expected[i].tensors[t].Equals(got[i].tensors[t]))
            << label << " batch " << i << " field " << t;
      }
    }
  }

  std::vector<std::string> Warnings() {
    std::lock_guard<std::mutex> lock(warn_mu_);
    return warnings_;
  }

  TempDir dir_;
  std::string glob_;
  std::mutex warn_mu_;
  std::vector<std::string> warnings_;
};

TEST_F(LoaderTest, WithoutWorkersOrWithRatioZeroItIsTheLocalPipeline) {
  const pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/true);
  const std::vector<Element> expected = DrainLocal(spec);
  for (double ratio : {0.0, 0.7}) {
    LoaderOptions plan = Plan({}, /*cut=*/2, ratio);
    if (ratio == 0) plan = Plan({"127.0.0.1:1"}, /*cut=*/2, /*ratio=*/0);
    auto loader = Loader::Create(spec, plan);
    ASSERT_TRUE(loader.ok()) << loader.status();
    std::vector<Element> got;
    ASSERT_TRUE(Drain(**loader, &got).ok());
    ExpectIdentical(expected, got, absl::StrCat("ratio ", ratio));
    LoaderReport report = (*loader)->Report();
    EXPECT_FALSE(report.offloaded);
    EXPECT_EQ(report.samples_out, kImages);
  }
  EXPECT_TRUE(Warnings().empty());
}

TEST_F(LoaderTest, RejectsImpossiblePlans) {
  const pipeline::PipelineSpec spec = ImageSpec(glob_, false);
  pipeline::PipelineSpec unbatched = spec;
  unbatched.batch.size = 0;
  struct Case {
    const char* label;
    pipeline::PipelineSpec spec;
    LoaderOptions plan;
    const char* error;
  };
  std::vector<Case> cases = {
      {"cut past the ops", spec, Plan({"127.0.0.1:1"}, 6, 0.5), "out of range"},
      {"negative cut", spec, Plan({"127.0.0.1:1"}, -3, 0.5), "out of range"},
      {"batch cut without batch", unbatched, Plan({"127.0.0.1:1"}, kCutAfterBatch, 0.5),
       "needs a pipeline with a batch"},
      {"local read at cut 0", spec, Plan({"127.0.0.1:1"}, 0, 0.5, ReadMode::kLocalRead),
       "cut of at least 1"},
      {"ratio over 1", spec, Plan({"127.0.0.1:1"}, 2, 1.5), "ratio"},
  };
  LoaderOptions shares = Plan({"127.0.0.1:1"}, 2, 0.5);
  shares.worker_shares = {1, 2};
  cases.push_back({"shares mismatch", spec, shares, "worker shares"});
  for (const Case& c : cases) {
    auto loader = Loader::Create(c.spec, c.plan);
    ASSERT_FALSE(loader.ok()) << c.label;
    EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument) << c.label;
    EXPECT_THAT(std::string(loader.status().message()), HasSubstr(c.error)) << c.label;
  }
}

// The heart of offloading: whatever the cut and read mode, a deterministic run gives the
// very batches of the all-local run.
TEST_F(LoaderTest, DeterministicOffloadedRunIsBitIdenticalForEveryCutAndReadMode) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/true);
  const std::vector<Element> expected = DrainLocal(spec);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kImages / 4));
  for (int cut : {0, 1, 2, 3, 4, 5, kCutAfterBatch}) {
    for (ReadMode mode : {ReadMode::kRemoteRead, ReadMode::kLocalRead}) {
      if (mode == ReadMode::kLocalRead && cut == 0) continue;
      const std::string label = absl::StrCat("cut ", cut, " ", ReadModeName(mode));
      auto loader = Loader::Create(spec, Plan({worker->address()}, cut, /*ratio=*/0.5, mode));
      ASSERT_TRUE(loader.ok()) << label << ": " << loader.status();
      std::vector<Element> got;
      Status s = Drain(**loader, &got);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      ExpectIdentical(expected, got, label);
      LoaderReport report = (*loader)->Report();
      EXPECT_TRUE(report.offloaded);
      ASSERT_EQ(report.workers.size(), 1u);
      EXPECT_EQ(report.samples_local + report.workers[0].samples, kImages) << label;
      EXPECT_GT(report.workers[0].samples, 0) << label;
      EXPECT_GT(report.workers[0].bytes_received, 0) << label;
      EXPECT_EQ(report.duplicates_dropped, 0) << label;
      EXPECT_EQ(report.samples_out, kImages) << label;
    }
  }
  for (const std::string& w : Warnings()) ADD_FAILURE() << "unexpected warning: " << w;
}

// After the batch cut the local samples are written into their batch's slots, as
// all-local's are. Slots are taken in the order samples finish, so with two threads a
// sample finishing out of turn makes its batch a copy (how many depends on scheduling); with
// one thread and no spill-over (the local side keeps to its splits of 8, two batches each)
// every local batch is stacked without a copy, whatever the machine's load.
TEST_F(LoaderTest, AfterTheBatchCutOneThreadStacksEveryLocalBatchInItsSlots) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/true);
  const std::vector<Element> expected = DrainLocal(spec);
  LoaderOptions plan = Plan({worker->address()}, kCutAfterBatch, /*ratio=*/0.5);
  plan.threads = 1;
  plan.spill_over = false;
  auto loader = Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  Status s = Drain(**loader, &got);
  ASSERT_TRUE(s.ok()) << s;
  ExpectIdentical(expected, got, "after batch, one thread");
  const LoaderReport report = (*loader)->Report();
  EXPECT_GT(report.samples_local, 0);
  EXPECT_EQ(report.samples_local % spec.batch.size, 0);
  EXPECT_EQ(report.batches_in_place, report.samples_local / spec.batch.size);
  for (const std::string& w : Warnings()) ADD_FAILURE() << "unexpected warning: " << w;
}

// At the pipeline's end (nothing runs after the merge but the batcher) a payload on the
// bulk channel lands in its batch's slots as it is read, through the shared-memory ring and
// over TCP. With the worker alone (ratio 1, no spill-over) its one stream delivers in the
// order the slots were taken, so every batch is stacked without a copy; mixed with local
// samples (which write into slots of their own) every sample still arrives once, with the
// bytes of the all-local run.
TEST_F(LoaderTest, AtThePipelinesEndReceivedSamplesLandInTheirBatchSlots) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  const int end = static_cast<int>(spec.ops.size());
  const std::map<SampleId, std::string> expected = ById(DrainLocal(spec));
  for (const bool ring : {true, false}) {
    for (const double ratio : {1.0, 0.5}) {
      const std::string label = absl::StrCat(ring ? "shared memory" : "tcp", ", ratio ", ratio);
      LoaderOptions plan = Plan({worker->address()}, end, ratio);
      plan.workers[0].bulk_shared_memory = ring;
      plan.spill_over = ratio < 1;
      auto loader = Loader::Create(spec, plan);
      ASSERT_TRUE(loader.ok()) << label << ": " << loader.status();
      std::vector<Element> got;
      Status s = Drain(**loader, &got);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      EXPECT_TRUE(ById(got) == expected) << label;
      const LoaderReport report = (*loader)->Report();
      ASSERT_EQ(report.workers.size(), 1u);
      EXPECT_TRUE(report.workers[0].bulk) << label;
      EXPECT_EQ(report.workers[0].shared_memory, ring) << label;
      // Through the ring, the worker writes the images into shared slots (rpc/slot_arena.h).
      if (ring) {
        EXPECT_GT(report.workers[0].shared_slots, 0) << label;
      } else {
        EXPECT_EQ(report.workers[0].shared_slots, 0) << label;
      }
      EXPECT_EQ(report.samples_out, kImages) << label;
      EXPECT_EQ(report.duplicates_dropped, 0) << label;
      if (ratio == 1.0) {
        EXPECT_EQ(report.samples_local, 0) << label;
        EXPECT_EQ(report.batches_in_place, kImages / spec.batch.size) << label;
      }
    }
  }
  for (const std::string& w : Warnings()) ADD_FAILURE() << "unexpected warning: " << w;
}

// The same images packed into tar shards in the order the files resolve: offloaded with
// either read mode (the worker reads each member from the shard under its data root, or the
// trainer reads and ships it), the run is bit-identical to the loose files' local run.
TEST_F(LoaderTest, ShardsOffloadWithEitherReadModeAsFilesDo) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec files_spec = ImageSpec(glob_, /*deterministic=*/true);
  pipeline::PipelineSpec spec;
  ASSERT_NO_FATAL_FAILURE(spec = PackShards(files_spec));
  // The shards' elements also carry `span`, `key` and `problem`, and their `path` names the
  // shard: the sample ids, images and labels are what must match.
  const auto same = [](const pipeline::PipelineSpec& a_spec, const std::vector<Element>& a,
                       const Schema& b_schema, const std::vector<Element>& b,
                       const std::string& label) {
    auto ex = pipeline::LocalExecutor::Create(a_spec);
    ASSERT_TRUE(ex.ok());
    const Schema& a_schema = (*ex)->output_schema();
    ASSERT_EQ(a.size(), b.size()) << label;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].members, b[i].members) << label << " batch " << i;
      for (int x = 0; x < static_cast<int>(a_schema.fields().size()); ++x) {
        const std::string& field = a_schema.fields()[x].name;
        if (field == "path") continue;
        const int y = b_schema.IndexOf(field);
        ASSERT_GE(y, 0) << label << ": no field " << field;
        ASSERT_TRUE(a[i].tensors[x].Equals(b[i].tensors[y])) << label << " batch " << i << field;
      }
    }
  };
  const std::vector<Element> expected = DrainLocal(files_spec);
  {
    auto ex = pipeline::LocalExecutor::Create(spec);
    ASSERT_TRUE(ex.ok()) << ex.status();
    same(files_spec, expected, (*ex)->output_schema(), DrainLocal(spec), "local shards");
  }
  for (ReadMode mode : {ReadMode::kRemoteRead, ReadMode::kLocalRead}) {
    const std::string label = absl::StrCat("shards, cut 2, ", ReadModeName(mode));
    auto loader = Loader::Create(spec, Plan({worker->address()}, /*cut=*/2, /*ratio=*/0.5, mode));
    ASSERT_TRUE(loader.ok()) << label << ": " << loader.status();
    std::vector<Element> got;
    Status s = Drain(**loader, &got);
    ASSERT_TRUE(s.ok()) << label << ": " << s;
    same(files_spec, expected, (*loader)->output_schema(), got, label);
    const LoaderReport report = (*loader)->Report();
    ASSERT_EQ(report.workers.size(), 1u);
    EXPECT_GT(report.workers[0].samples, 0) << label;
  }
}

// `shuffle: shards`: offloaded, every epoch visits the shards in its seeded order, each
// shard's samples together, and a shuffle buffer after them reports the memory it held.
TEST_F(LoaderTest, ShardOrderShuffleOffloadsShardByShardAndReportsItsBuffer) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec;
  ASSERT_NO_FATAL_FAILURE(spec = PackShards(ImageSpec(glob_, /*deterministic=*/true)));
  spec.source.shard_order = true;
  spec.epochs = 2;
  const std::vector<uint64_t> groups = {0, 16, 32};
  for (ReadMode mode : {ReadMode::kRemoteRead, ReadMode::kLocalRead}) {
    const std::string label = absl::StrCat("shard order, ", ReadModeName(mode));
    auto loader = Loader::Create(spec, Plan({worker->address()}, /*cut=*/2, /*ratio=*/0.5, mode));
    ASSERT_TRUE(loader.ok()) << label << ": " << loader.status();
    std::vector<Element> got;
    ASSERT_TRUE(Drain(**loader, &got).ok()) << label;
    std::map<uint32_t, std::vector<uint64_t>> order;
    for (const Element& batch : got) {
      for (const SampleId& id : batch.members) order[id.epoch].push_back(id.index);
    }
    for (uint32_t epoch : {0u, 1u}) {
      EXPECT_EQ(order[epoch], pipeline::EpochOrder(kImages, true, 11, epoch, groups))
          << label << " epoch " << epoch;
    }
    EXPECT_NE(order[0], order[1]) << label;
    EXPECT_EQ((*loader)->Report().shuffle_buffer_peak_samples, 0) << label;
  }
  // A shuffle buffer of 8 samples mixes within reach; every sample still comes once.
  spec.shuffle_buffer = 8;
  spec.options.deterministic = false;
  auto loader = Loader::Create(spec, Plan({worker->address()}, /*cut=*/2, /*ratio=*/0.5));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  std::set<SampleId> seen;
  for (const Element& batch : got) {
    for (const SampleId& id : batch.members) EXPECT_TRUE(seen.insert(id).second) << id.index;
  }
  EXPECT_EQ(seen.size(), 2u * kImages);
  const LoaderReport report = (*loader)->Report();
  EXPECT_EQ(report.shuffle_buffer_peak_samples, 8);
  // 8 normalized 16x16x3 float images and their labels, at least.
  EXPECT_GE(report.shuffle_buffer_peak_bytes, 8 * 16 * 16 * 3 * 4);
}

TEST_F(LoaderTest, FirstComeRunDeliversTheSameSamplesWithCompression) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  spec.epochs = 2;
  const std::map<SampleId, std::string> expected = ById(DrainLocal(spec));
  ASSERT_EQ(expected.size(), static_cast<size_t>(2 * kImages));
  for (Codec c : {Codec::kLz4, Codec::kZstd}) {
    LoaderOptions plan = Plan({worker->address()}, /*cut=*/3, /*ratio=*/0.8);
    plan.codec = c;
    auto loader = Loader::Create(spec, plan);
    ASSERT_TRUE(loader.ok()) << loader.status();
    std::vector<Element> got;
    ASSERT_TRUE(Drain(**loader, &got).ok());
    EXPECT_TRUE(ById(got) == expected) << CodecName(c);
  }
}

TEST_F(LoaderTest, SetSharesChangesTheRatioWithoutAReconnect) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  spec.epochs = 3;
  const std::map<SampleId, std::string> expected = ById(DrainLocal(spec));
  for (double ratio : {0.0, 1.0}) {
    auto loader = Loader::Create(spec, Plan({worker->address()}, /*cut=*/3, /*ratio=*/0.5));
    ASSERT_TRUE(loader.ok()) << loader.status();
    std::vector<Element> got;
    for (int i = 0; i < 4; ++i) {
      Element e;
      bool end = false;
      ASSERT_TRUE((*loader)->GetNext(&e, &end).ok());
      ASSERT_FALSE(end);
      got.push_back(std::move(e));
    }
    ASSERT_TRUE((*loader)->SetShares(ratio, {}).ok());
    const LoaderReport before = (*loader)->Report();
    ASSERT_TRUE(Drain(**loader, &got).ok());
    const LoaderReport after = (*loader)->Report();
    EXPECT_TRUE(ById(got) == expected) << ratio;
    EXPECT_DOUBLE_EQ(after.ratio, ratio);
    ASSERT_EQ(after.workers.size(), 1u);
    EXPECT_DOUBLE_EQ(after.workers[0].share, ratio);
    EXPECT_EQ(after.workers[0].connects, 1) << "no reconnect";
    // Only what the side now left out had already been handed (its open splits, 8 samples
    // each) reaches the merge from it after the change.
    if (ratio == 0) {
      EXPECT_LE(after.workers[0].samples - before.workers[0].samples, 3 * 8);
      EXPECT_GT(after.samples_local - before.samples_local, 48);
    } else {
      EXPECT_LE(after.samples_local - before.samples_local, 3 * 8);
      EXPECT_GT(after.workers[0].samples - before.workers[0].samples, 48);
    }
  }
}

TEST_F(LoaderTest, SetSharesNeedsAnOffloadingLoaderAndValidShares) {
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  auto local = Loader::Create(spec, LoaderOptions{});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->SetShares(0.5, {}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*local)->SetLocalSpillOver(false).code(), absl::StatusCode::kFailedPrecondition);

  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  auto loader = Loader::Create(spec, Plan({worker->address()}, /*cut=*/2, /*ratio=*/0.5));
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->SetShares(1.5, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*loader)->SetShares(0.5, {1, 2}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*loader)->SetShares(0.25, {3}).ok());
  EXPECT_DOUBLE_EQ((*loader)->Report().ratio, 0.25);
  EXPECT_TRUE((*loader)->SetLocalSpillOver(false).ok());
}

TEST_F(LoaderTest, WithoutSpillOverEverySampleStillArrivesOnce) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  spec.epochs = 2;
  const std::map<SampleId, std::string> expected = ById(DrainLocal(spec));
  LoaderOptions plan = Plan({worker->address()}, /*cut=*/4, /*ratio=*/0.5);
  plan.spill_over = false;
  auto loader = Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  EXPECT_TRUE(ById(got) == expected);
  const LoaderReport r = (*loader)->Report();
  // Counters, not spill-over: each side got its half, to a split or two.
  EXPECT_NEAR(static_cast<double>(r.samples_local), kImages, 2 * 8 + 1);
}

TEST_F(LoaderTest, UnreachableWorkerAtStartIsReportedAndTheRunIsLocal) {
  const pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/true);
  const std::vector<Element> expected = DrainLocal(spec);
  LoaderOptions plan = Plan({"127.0.0.1:1"}, /*cut=*/2, /*ratio=*/0.9);
  plan.workers[0].connect_timeout_s = 0.3;
  auto loader = Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  ExpectIdentical(expected, got, "unreachable");
  const std::vector<std::string> warnings = Warnings();
  ASSERT_FALSE(warnings.empty());
  EXPECT_THAT(warnings[0], HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(warnings[0], HasSubstr("unreachable"));
  LoaderReport report = (*loader)->Report();
  EXPECT_EQ(report.samples_local, kImages);
  EXPECT_EQ(report.workers[0].samples, 0);
  EXPECT_FALSE(report.workers[0].connected);
}

// A worker that goes mid-run: every sample still comes out once. At cut 2, and at the
// pipeline's end, where the worker writes into shared slots (rpc/slot_arena.h): batches that
// hold views of its regions when it goes, and its samples re-run locally, come out whole.
TEST_F(LoaderTest, WorkerShutDownMidRunStillYieldsEverySampleOnce) {
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  spec.epochs = 3;
  spec.prefetch = 1;
  const std::map<SampleId, std::string> expected = ById(DrainLocal(spec));
  const int end = static_cast<int>(spec.ops.size());
  for (const int cut : {2, end}) {
    auto worker = StartWorker(/*threads=*/1);
    ASSERT_NE(worker, nullptr);
    LoaderOptions plan = Plan({worker->address()}, cut, /*ratio=*/0.9);
    auto loader = Loader::Create(spec, plan);
    ASSERT_TRUE(loader.ok()) << loader.status();
    std::vector<Element> got;
    // Three batches, and at the pipeline's end until the worker's first samples came through
    // its slots: then it goes, with views of its regions held and in flight.
    while (got.size() < 3 || (cut == end && (*loader)->Report().workers[0].shared_slots == 0)) {
      Element e;
      bool done = false;
      ASSERT_TRUE((*loader)->GetNext(&e, &done).ok());
      ASSERT_FALSE(done) << "cut " << cut << ": the run ended before the worker went";
      got.push_back(std::move(e));
    }
    worker->Shutdown(/*grace_s=*/0);
    ASSERT_TRUE(Drain(**loader, &got).ok()) << "cut " << cut;
    EXPECT_TRUE(ById(got) == expected) << "cut " << cut;
    EXPECT_EQ((*loader)->Report().samples_out, 3 * kImages) << "cut " << cut;
  }
}

TEST_F(LoaderTest, SkippedSamplesAreAccountedLocallyAndRemotely) {
  dir_.Write("data/cat/999.jpg", "not a jpeg at all");
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/true);
  spec.options.on_error = pipeline::OnError::kSkip;
  const std::vector<Element> expected = DrainLocal(spec);
  for (int cut : {1, 3, kCutAfterBatch}) {
    for (double ratio : {0.01, 1.0}) {  // the bad file lands locally or remotely
      const std::string label = absl::StrCat("cut ", cut, " ratio ", ratio);
      auto loader = Loader::Create(spec, Plan({worker->address()}, cut, ratio));
      ASSERT_TRUE(loader.ok()) << loader.status();
      std::vector<Element> got;
      Status s = Drain(**loader, &got);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      std::map<SampleId, std::string> ids = ById(got);
      EXPECT_EQ(ids.size(), static_cast<size_t>(kImages)) << label;
      EXPECT_EQ((*loader)->Report().skipped, 1) << label;
      if (cut != kCutAfterBatch) ExpectIdentical(expected, got, label);
    }
  }
}

TEST_F(LoaderTest, RemoteSampleFailureUnderOnErrorFailEndsTheRun) {
  dir_.Write("data/cat/999.jpg", "not a jpeg at all");
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  auto loader = Loader::Create(spec, Plan({worker->address()}, /*cut=*/3, /*ratio=*/1.0));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  Status s = Drain(**loader, &got);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("decode_jpeg"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("999.jpg"));
}

}  // namespace
}  // namespace sluice::runtime

namespace sluice::runtime {
namespace {

// Takes `batches` batches, then resumes a new Loader from Progress(): together they deliver
// every sample of both epochs exactly once, each with the content of an uninterrupted run.
void CheckResume(const pipeline::PipelineSpec& spec, const std::function<LoaderOptions()>& plan,
                 const std::map<SampleId, std::string>& expected, int batches,
                 const std::string& label) {
  auto first = Loader::Create(spec, plan());
  ASSERT_TRUE(first.ok()) << label << ": " << first.status();
  std::vector<Element> got;
  for (int i = 0; i < batches; ++i) {
    Element e;
    bool end = false;
    ASSERT_TRUE((*first)->GetNext(&e, &end).ok()) << label;
    ASSERT_FALSE(end) << label;
    got.push_back(std::move(e));
  }
  auto progress = std::make_shared<pipeline::SourceProgress>((*first)->Progress());
  first->reset();
  LoaderOptions options = plan();
  options.resume = progress;
  auto second = Loader::Create(spec, options);
  ASSERT_TRUE(second.ok()) << label << ": " << second.status();
  Element e;
  for (;;) {
    bool end = false;
    Status s = (*second)->GetNext(&e, &end);
    ASSERT_TRUE(s.ok()) << label << ": " << s;
    if (end) break;
    got.push_back(std::move(e));
  }
  std::map<SampleId, std::string> all;
  for (const Element& b : got) {
    for (size_t m = 0; m < b.members.size(); ++m) {
      std::string bytes;
      for (const Tensor& t : b.tensors) {
        bytes.append(t.Slice(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1).bytes());
      }
      ASSERT_TRUE(all.emplace(b.members[m], bytes).second)
          << label << ": sample " << b.members[m].epoch << "/" << b.members[m].index << " twice";
    }
  }
  ASSERT_EQ(all.size(), expected.size()) << label;
  EXPECT_TRUE(all == expected) << label << ": different content after the resume";
  pipeline::SourceProgress done = (*second)->Progress();
  EXPECT_EQ(done.first_epoch, static_cast<uint32_t>(spec.epochs)) << label;
  EXPECT_TRUE(done.consumed.empty()) << label;
}

class LoaderResumeTest : public LoaderTest {};

TEST_F(LoaderResumeTest, ProgressResumesExactlyTheUndeliveredSamplesLocallyAndOffloaded) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  for (bool deterministic : {false, true}) {
    pipeline::PipelineSpec spec = ImageSpec(glob_, deterministic);
    spec.epochs = 2;
    spec.shuffle_buffer = deterministic ? 0 : 5;
    const std::map<SampleId, std::string> expected = ById(DrainLocal(spec));
    ASSERT_EQ(expected.size(), static_cast<size_t>(2 * kImages));
    for (int batches : {3, 17}) {  // mid first epoch; across the epoch boundary
      const std::string label = absl::StrCat(deterministic ? "deterministic" : "first-come",
                                             ", after ", batches, " batches");
      CheckResume(spec, [&] { return Plan({}, 0, 0); }, expected, batches, label + ", local");
      CheckResume(spec, [&] { return Plan({worker->address()}, 2, 0.5); }, expected, batches,
                  label + ", cut 2");
      CheckResume(spec, [&] { return Plan({worker->address()}, kCutAfterBatch, 0.5); },
                  expected, batches, label + ", cut batch");
    }
  }
}

}  // namespace
}  // namespace sluice::runtime

namespace sluice::runtime {
namespace {

// Ranks of a sharded run (pipeline/shard.h), locally and offloaded to an in-process worker.
class LoaderShardTest : public LoaderTest {
 protected:
  // 47 images (so that 2, 3 and 4 ranks all leave a remainder), 2 epochs, batches of 4.
  static constexpr uint64_t kTake = 47;

  pipeline::PipelineSpec ShardSpec(pipeline::EvenRule even) {
    pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
    spec.take = kTake;
    spec.epochs = 2;
    spec.source.even = even;
    return spec;
  }

  struct Run {
    std::vector<Element> batches;
    pipeline::SourceProgress progress;
  };

  // The first `batches` batches (every one when < 0) of rank `rank` of `world`, resumed from
  // `resume` (may be null), and its progress after them.
  static Run RunRank(const pipeline::PipelineSpec& spec, LoaderOptions options, int64_t rank,
                     int64_t world, std::shared_ptr<const pipeline::SourceProgress> resume,
                     int batches = -1) {
    options.shard = pipeline::Shard{rank, world};
    options.resume = std::move(resume);
    Run run;
    auto loader = Loader::Create(spec, options);
    EXPECT_TRUE(loader.ok()) << loader.status();
    if (!loader.ok()) return run;
    for (int i = 0; batches < 0 || i < batches; ++i) {
      Element e;
      bool end = false;
      Status s = (*loader)->GetNext(&e, &end);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok() || end) break;
      run.batches.push_back(std::move(e));
    }
    run.progress = (*loader)->Progress();
    return run;
  }

  // Adds every real sample of `batches` to `seen` (failing on one seen before, or whose
  // content differs from the unsharded run's) and returns how many padded ones they held.
  static int64_t Collect(const std::vector<Element>& batches,
                         const std::map<SampleId, std::string>& reference, std::set<SampleId>* seen,
                         const std::string& label) {
    int64_t padded = 0;
    for (const Element& b : batches) {
      for (size_t m = 0; m < b.members.size(); ++m) {
        const SampleId id = b.members[m];
        if (id.index >= kTake) {
          ++padded;
          continue;
        }
        EXPECT_TRUE(seen->insert(id).second)
            << label << ": sample " << id.epoch << "/" << id.index << " twice";
        std::string bytes;
        for (const Tensor& t : b.tensors) {
          bytes.append(t.Slice(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1).bytes());
        }
        EXPECT_EQ(bytes, reference.at(id)) << label << ": content of " << id.index;
      }
    }
    return padded;
  }

  static int64_t Undelivered(const std::set<SampleId>& seen, uint32_t epoch) {
    int64_t n = 0;
    for (uint64_t i = 0; i < kTake; ++i) n += seen.count(SampleId{epoch, i}) == 0 ? 1 : 0;
    return n;
  }
};

// Disjoint and complete coverage of both epochs by 1-4 ranks under both rules, all-local
// and offloaded (cut 2), each rank yielding the same number of batches.
TEST_F(LoaderShardTest, RanksCoverEveryEpochOnceWithEqualBatchCounts) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  for (pipeline::EvenRule even : {pipeline::EvenRule::kDrop, pipeline::EvenRule::kPad}) {
    const pipeline::PipelineSpec spec = ShardSpec(even);
    const std::map<SampleId, std::string> reference = ById(DrainLocal(spec));
    ASSERT_EQ(reference.size(), 2 * kTake);
    for (int64_t world = 1; world <= 4; ++world) {
      for (bool offloaded : {false, true}) {
        const std::string label =
            absl::StrCat(even == pipeline::EvenRule::kPad ? "pad" : "drop", ", world_size ", world,
                         offloaded ? ", offloaded" : ", local");
        const int64_t per_rank =
            static_cast<int64_t>(pipeline::SamplesPerRank(kTake, pipeline::Shard{0, world}, even));
        std::set<SampleId> seen;
        int64_t padded = 0;
        for (int64_t rank = 0; rank < world; ++rank) {
          const LoaderOptions plan = offloaded ? Plan({worker->address()}, 2, 0.5) : Plan({}, 0, 0);
          Run run = RunRank(spec, plan, rank, world, nullptr);
          EXPECT_EQ(run.batches.size(), static_cast<size_t>((2 * per_rank + 3) / 4))
              << label << ", rank " << rank;
          padded += Collect(run.batches, reference, &seen, label);
          EXPECT_EQ(run.progress.first_epoch, 2u) << label;
        }
        const int64_t left_out = even == pipeline::EvenRule::kDrop ? kTake % world : 0;
        EXPECT_EQ(Undelivered(seen, 0), left_out) << label;
        EXPECT_EQ(Undelivered(seen, 1), left_out) << label;
        EXPECT_EQ(padded, even == pipeline::EvenRule::kPad ? 2 * (per_rank * world - 47) : 0)
            << label;
      }
    }
  }
}

// Elastic resume, 2 -> 3 and 3 -> 2 ranks: the old ranks take 3 batches each, their progress
// is merged, and the new ranks (local and offloaded) deliver every sample not delivered
// before exactly once, with equal batch counts; only the remainder rule leaves samples out.
TEST_F(LoaderShardTest, ElasticResumeDeliversTheRestOnceOnANewNumberOfRanks) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  for (auto [from, to] : {std::pair<int64_t, int64_t>{2, 3}, {3, 2}}) {
    for (pipeline::EvenRule even : {pipeline::EvenRule::kDrop, pipeline::EvenRule::kPad}) {
      const std::string label = absl::StrCat(from, " -> ", to, " ranks, ",
                                             even == pipeline::EvenRule::kPad ? "pad" : "drop");
      const pipeline::PipelineSpec spec = ShardSpec(even);
      const std::map<SampleId, std::string> reference = ById(DrainLocal(spec));
      std::set<SampleId> seen;
      std::vector<pipeline::SourceProgress> old;
      // Padded samples the first batches held (an order-free batcher may bring a rank's last
      // sample, its pad, forward): they are no epoch's samples, so no progress counts them.
      int64_t head_pads = 0;
      for (int64_t rank = 0; rank < from; ++rank) {
        Run head = RunRank(spec, Plan({}, 0, 0), rank, from, nullptr, /*batches=*/3);
        ASSERT_EQ(head.batches.size(), 3u) << label;
        head_pads += Collect(head.batches, reference, &seen, label);
        old.push_back(head.progress);
      }
      StatusOr<pipeline::SourceProgress> merged = pipeline::MergeRankProgress(old);
      ASSERT_TRUE(merged.ok()) << label << ": " << merged.status();
      ASSERT_EQ(merged->first_epoch, 0u) << label;
      // What the new ranks divide: each epoch less what the old ranks received of it.
      int64_t remaining[2] = {static_cast<int64_t>(kTake), static_cast<int64_t>(kTake)};
      for (const auto& [epoch, bits] : merged->consumed) {
        for (bool bit : bits) remaining[epoch] -= bit ? 1 : 0;
      }
      EXPECT_EQ(remaining[0] + remaining[1],
                2 * static_cast<int64_t>(kTake) - (12 * from - head_pads));
      auto resume = std::make_shared<const pipeline::SourceProgress>(*merged);
      std::vector<pipeline::SourceProgress> done;
      std::set<size_t> batch_counts;
      for (int64_t rank = 0; rank < to; ++rank) {
        const LoaderOptions plan =
            rank % 2 == 1 ? Plan({worker->address()}, 2, 0.5) : Plan({}, 0, 0);
        Run tail = RunRank(spec, plan, rank, to, resume);
        batch_counts.insert(tail.batches.size());
        Collect(tail.batches, reference, &seen, label);
        done.push_back(tail.progress);
      }
      EXPECT_EQ(batch_counts.size(), 1u) << label << ": the new ranks' batch counts differ";
      const bool drop = even == pipeline::EvenRule::kDrop;
      EXPECT_EQ(Undelivered(seen, 0), drop ? remaining[0] % to : 0) << label;
      EXPECT_EQ(Undelivered(seen, 1), drop ? remaining[1] % to : 0) << label;
      StatusOr<pipeline::SourceProgress> end = pipeline::MergeRankProgress(done);
      ASSERT_TRUE(end.ok()) << label;
      EXPECT_EQ(end->first_epoch, 2u) << label;
    }
  }
}

// The same world size resumes as one trainer does: a rank resumed from its own progress
// (here past its padded sample and the epoch boundary) delivers exactly the rest of its own
// share, locally and offloaded.
TEST_F(LoaderShardTest, OwnProgressResumesTheRestOfTheOwnShare) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  const pipeline::PipelineSpec spec = ShardSpec(pipeline::EvenRule::kPad);
  const std::map<SampleId, std::string> reference = ById(DrainLocal(spec));
  std::set<SampleId> whole;
  // Rank 2 of 3 gets the one padded sample of each epoch (47 = 3 x 16 - 1).
  Collect(RunRank(spec, Plan({}, 0, 0), 2, 3, nullptr).batches, reference, &whole, "whole");
  for (bool offloaded : {false, true}) {
    const LoaderOptions plan = offloaded ? Plan({worker->address()}, 2, 0.5) : Plan({}, 0, 0);
    const std::string label = offloaded ? "offloaded" : "local";
    Run head = RunRank(spec, plan, 2, 3, nullptr, /*batches=*/5);  // 20 of 2 x 16
    std::set<SampleId> seen;
    int64_t padded = Collect(head.batches, reference, &seen, label);
    Run tail =
        RunRank(spec, plan, 2, 3, std::make_shared<const pipeline::SourceProgress>(head.progress));
    padded += Collect(tail.batches, reference, &seen, label);
    EXPECT_EQ(seen, whole) << label;
    EXPECT_EQ(padded, 2) << label;  // one padded sample per epoch, delivered once
    EXPECT_EQ(tail.progress.first_epoch, 2u) << label;
  }
}

TEST_F(LoaderShardTest, CutAfterBatchIsRefusedToARank) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  LoaderOptions options = Plan({worker->address()}, kCutAfterBatch, 0.5);
  options.shard = pipeline::Shard{0, 2};
  EXPECT_THAT(Loader::Create(ShardSpec(pipeline::EvenRule::kDrop), options).status().message(),
              HasSubstr("cut=batch is not available to a rank of a sharded run"));
  options.shard = pipeline::Shard{2, 2};
  EXPECT_THAT(Loader::Create(ShardSpec(pipeline::EvenRule::kDrop), options).status().message(),
              HasSubstr("rank: must be in [0, 1]"));
}

}  // namespace
}  // namespace sluice::runtime

namespace sluice::runtime {
namespace {

using test::BreakAfter;
using test::Fault;
using test::FaultyConnector;
using test::QuietAfter;
using test::Refuse;

class LoaderFaultTest : public LoaderTest {
 protected:
  // Cut 2, most samples offloaded, through `c`, with every WorkerEvent recorded. The tests
  // that wait for a reconnect run endlessly (epochs: -1), so that the run cannot end first.
  LoaderOptions FaultPlan(const std::string& address, std::shared_ptr<rpc::Connector> c) {
    LoaderOptions o = Plan({address}, /*cut=*/2, /*ratio=*/0.9);
    o.connector = std::move(c);
    o.on_worker_event = [this](const WorkerEvent& e) {
      std::lock_guard<std::mutex> lock(warn_mu_);
      events_.push_back(e);
    };
    return o;
  }
  std::vector<WorkerEvent> Events() {
    std::lock_guard<std::mutex> lock(warn_mu_);
    return events_;
  }
  // Takes batches until `done` holds, at most 100,000 of them; the batches in *got.
  static bool TakeUntil(Loader& loader, const std::function<bool()>& done,
                        std::vector<Element>* got) {
    for (int i = 0; i < 100000 && !done(); ++i) {
      Element e;
      bool end = false;
      if (!loader.GetNext(&e, &end).ok() || end) return false;
      got->push_back(std::move(e));
    }
    return done();
  }
  // Exactly once, by the Loader's own account: `got` holds no sample twice, and its samples
  // are exactly those Progress() says were received (every sample of the epochs before its
  // first_epoch and those marked consumed in the rest). Call while not taking batches.
  static void ExpectDeliveredAsProgressSays(Loader& loader, const std::vector<Element>& got) {
    const std::map<SampleId, std::string> ids = ById(got);
    const pipeline::SourceProgress progress = loader.Progress();
    size_t received = static_cast<size_t>(progress.first_epoch) * kImages;
    for (const auto& [epoch, bits] : progress.consumed) {
      received += static_cast<size_t>(std::count(bits.begin(), bits.end(), true));
    }
    EXPECT_EQ(ids.size(), received);
    for (const auto& [id, bytes] : ids) {
      EXPECT_TRUE(id.epoch < progress.first_epoch || progress.Consumed(id))
          << "sample " << id.epoch << "/" << id.index << " delivered but not accounted";
    }
  }
  std::vector<WorkerEvent> events_;  // guarded by warn_mu_
};

TEST_F(LoaderFaultTest, AStreamBrokenAfterAChunkLosesAndRepeatsNoSample) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/true);
  spec.epochs = 2;
  const std::vector<Element> expected = DrainLocal(spec);
  // The first session breaks right after its first chunk: samples of that chunk are
  // delivered, the rest of its splits are not (their completion never arrives). Everything
  // is offloaded and the local side does not spill over while the worker is up, so the
  // worker's first chunk comes before the end however slow the machine is.
  auto connector = std::make_shared<FaultyConnector>(
      [](int open) { return open == 0 ? BreakAfter(1) : Fault{}; });
  LoaderOptions plan = FaultPlan(worker->address(), connector);
  plan.ratio = 1.0;
  plan.spill_over = false;
  auto loader = Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  ASSERT_TRUE(Drain(**loader, &got).ok());
  ExpectIdentical(expected, got, "broken after a chunk");
  const LoaderReport report = (*loader)->Report();
  EXPECT_EQ(report.workers[0].failures, 1)
      << "opens " << connector->opens() << ", samples local " << report.samples_local
      << ", remote " << report.workers[0].samples << "; " << absl::StrJoin(Warnings(), "; ");
  EXPECT_GT(report.workers[0].samples, 0);  // the chunk before the break counts
  const std::vector<WorkerEvent> events = Events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, WorkerEvent::Kind::kFailed);
  EXPECT_THAT(events[0].message, HasSubstr("connection broken by the test"));
}

TEST_F(LoaderFaultTest, RefusedReconnectsAreWarnedOnceAndTheWorkerRejoins) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  spec.epochs = -1;
  // Open 0 breaks after a chunk; opens 1-3 are refused alike; open 4 works.
  auto connector = std::make_shared<FaultyConnector>([](int open) {
    if (open == 0) return BreakAfter(1);
    if (open <= 3) return Refuse(absl::UnavailableError("refused by the test"));
    return Fault{};
  });
  auto loader = Loader::Create(spec, FaultPlan(worker->address(), connector));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  // Until the session of open 4 has delivered a chunk.
  ASSERT_TRUE(TakeUntil(
      **loader,
      [&] { return connector->WaitUntil([](int, int, int later) { return later > 0; }, 0); }, &got))
      << "opens: " << connector->opens();
  EXPECT_EQ(connector->opens(), 5);
  int cannot_reach = 0, back = 0;
  for (const std::string& w : Warnings()) {
    if (absl::StrContains(w, "cannot reach worker")) {
      ++cannot_reach;
      EXPECT_THAT(w, HasSubstr("refused by the test"));
    }
    if (absl::StrContains(w, "is back; using it again")) ++back;
  }
  EXPECT_EQ(cannot_reach, 1);  // three refusals with one message: one warning
  EXPECT_EQ(back, 1);
  const LoaderReport report = (*loader)->Report();
  EXPECT_EQ(report.workers[0].connects, 2);
  EXPECT_EQ(report.workers[0].failures, 1);
  EXPECT_TRUE(report.workers[0].connected);
  ExpectDeliveredAsProgressSays(**loader, got);
}

TEST_F(LoaderFaultTest, AStreamThatGoesQuietIsDeclaredHungAndReplaced) {
  auto worker = StartWorker();
  ASSERT_NE(worker, nullptr);
  pipeline::PipelineSpec spec = ImageSpec(glob_, /*deterministic=*/false);
  spec.epochs = -1;
  auto connector = std::make_shared<FaultyConnector>(
      [](int open) { return open == 0 ? QuietAfter(1) : Fault{}; });
  LoaderOptions plan = FaultPlan(worker->address(), connector);
  // Short deadlines: the silence is the test's own, so no live worker is misjudged.
  plan.hang.floor_s = 0.2;
  plan.hang.unmeasured_s = 0.2;
  auto loader = Loader::Create(spec, plan);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  ASSERT_TRUE(TakeUntil(
      **loader,
      [&] { return connector->WaitUntil([](int, int, int later) { return later > 0; }, 0); },
      &got));
  const std::vector<WorkerEvent> events = Events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, WorkerEvent::Kind::kHung);
  EXPECT_THAT(events[0].message, HasSubstr("hung"));
  const LoaderReport report = (*loader)->Report();
  EXPECT_EQ(report.workers[0].hangs, 1);
  EXPECT_GE(report.workers[0].last_hang_silence_s, 0.2);
  EXPECT_EQ(report.workers[0].connects, 2);
  ExpectDeliveredAsProgressSays(**loader, got);
}

}  // namespace
}  // namespace sluice::runtime
