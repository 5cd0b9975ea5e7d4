#include "sluice/rpc/worker_service.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/rpc/rpc_test_util.h"

namespace sluice::rpc {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

struct Drained {
  std::vector<Element> elements;
  std::map<uint64_t, WorkerOutput> done;
  std::vector<WorkerOutput> metrics;
  Status error;
  std::vector<WorkerOutput> draining;     // kDraining
  std::vector<WorkerOutput> returned;     // kSplitReturned
  std::vector<WorkerOutput::Kind> kinds;  // every output's, in order
};

// Takes every output until the session ends, crediting each chunk.
Drained Drain(WorkerSession& session) {
  Drained d;
  while (true) {
    WorkerOutput out;
    WorkerSession::Next next = session.NextOutput(&out, 30000);
    if (next == WorkerSession::Next::kEnd) break;
    if (next == WorkerSession::Next::kTimeout) {
      ADD_FAILURE() << "session produced nothing for 30 s";
      break;
    }
    d.kinds.push_back(out.kind);
    switch (out.kind) {
      case WorkerOutput::Kind::kChunk: {
        const size_t bytes = out.chunk.wire_bytes();
        auto decoded = DecodeElements(out.chunk.header, out.chunk.FlattenPayload());
        EXPECT_TRUE(decoded.ok()) << decoded.status();
        for (Element& e : *decoded) d.elements.push_back(std::move(e));
        session.AddCredit(bytes);
        break;
      }
      case WorkerOutput::Kind::kSplitDone:
        EXPECT_EQ(d.done.count(out.split_id), 0u);
        d.done[out.split_id] = std::move(out);
        break;
      case WorkerOutput::Kind::kMetrics:
        d.metrics.push_back(std::move(out));
        break;
      case WorkerOutput::Kind::kError:
        d.error = out.error;
        break;
      case WorkerOutput::Kind::kDraining:
        d.draining.push_back(std::move(out));
        break;
      case WorkerOutput::Kind::kSplitReturned:
        d.returned.push_back(std::move(out));
        break;
      case WorkerOutput::Kind::kDrained:
        break;
    }
  }
  return d;
}

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::WriteJpegs(dir_, 16);
    spec_ = test::ImageSpec(dir_.path() + "/data/**/*.jpg");
  }

  OpenRequest Request(int cut, ReadMode mode = ReadMode::kRemoteRead) const {
    OpenRequest r;
    r.spec_json = pipeline::ToCanonicalJson(spec_);
    r.cut = cut;
    r.read_mode = mode;
    r.client_version = SluiceVersion();
    return r;
  }

  // Sends the epoch's samples in splits of 8 (after read_file when local_read).
  // A session that fails early may refuse later splits: `may_fail` tolerates that.
  void SendEpoch(WorkerSession& session, ReadMode mode, bool may_fail = false) {
    std::vector<Element> source = test::SourceElements(spec_, 0);
    if (mode == ReadMode::kLocalRead) source = test::RunLocally(spec_, std::move(source), 0, 1);
    for (size_t i = 0; i < source.size(); i += 8) {
      std::vector<Element> split(source.begin() + i,
                                 source.begin() + std::min(source.size(), i + 8));
      Status s = session.AddSplit(i / 8, std::move(split));
      if (!may_fail) {
        ASSERT_TRUE(s.ok()) << s;
      }
    }
    session.CloseInput();
  }

  // Options of a worker whose data root holds the test's files.
  WorkerOptions Rooted() const {
    WorkerOptions options;
    options.data_root = dir_.path();
    return options;
  }

  TempDir dir_;
  pipeline::PipelineSpec spec_;
};

struct CutCase {
  int cut;
  ReadMode mode;
  Codec compression;
};

void PrintTo(const CutCase& c, std::ostream* os) {
  *os << "cut " << CutName(c.cut) << ", " << c.mode << ", " << c.compression;
}

class WorkerServiceCutTest : public WorkerServiceTest,
                             public ::testing::WithParamInterface<CutCase> {};

TEST_P(WorkerServiceCutTest, SameElementsAsALocalRun) {
  const CutCase c = GetParam();
  WorkerOptions options = Rooted();
  options.threads = 2;
  WorkerService service(options);
  OpenRequest request = Request(c.cut, c.mode);
  request.compression = c.compression;
  auto session = service.OpenSession(request);
  ASSERT_TRUE(session.ok()) << session.status();
  SendEpoch(**session, c.mode);
  Drained d = Drain(**session);
  ASSERT_TRUE(d.error.ok()) << d.error;
  const int first = c.mode == ReadMode::kLocalRead ? 1 : 0;
  std::vector<Element> expected = test::SourceElements(spec_, 0);
  expected = test::RunLocally(spec_, std::move(expected), 0, c.cut);
  test::ExpectSameById(expected, d.elements);
  ASSERT_EQ(d.done.size(), 2u);
  for (auto& [id, done] : d.done) {
    EXPECT_EQ(done.delivered, 8u) << "split " << id;
    EXPECT_TRUE(done.skipped.empty());
  }
  // The last metrics cover every sample of every remote op.
  ASSERT_FALSE(d.metrics.empty());
  const std::vector<WorkerOpMetrics>& m = d.metrics.back().metrics;
  const int end = c.cut < 0 ? 5 : c.cut;
  ASSERT_EQ(static_cast<int>(m.size()), end - first);
  for (const WorkerOpMetrics& op : m) {
    EXPECT_EQ(op.samples, 16) << op.name;
    EXPECT_EQ(op.name, spec_.ops[op.position].name);
  }
  // And the worker's CPU on the session: at least its ops' (its only session: all of the
  // process's since it opened), reported with them.
  int64_t op_cpu = 0;
  for (const WorkerOpMetrics& op : m) op_cpu += op.cpu_ns;
  EXPECT_GE(d.metrics.back().cpu_ns, op_cpu);
  (*session)->Cancel();
  EXPECT_EQ(service.open_sessions(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cuts, WorkerServiceCutTest,
    ::testing::Values(CutCase{0, ReadMode::kRemoteRead, Codec::kNone},
                      CutCase{2, ReadMode::kRemoteRead, Codec::kNone},
                      CutCase{3, ReadMode::kRemoteRead, Codec::kLz4},
                      CutCase{5, ReadMode::kRemoteRead, Codec::kZstd},
                      CutCase{kCutAfterBatch, ReadMode::kRemoteRead, Codec::kNone},
                      CutCase{1, ReadMode::kLocalRead, Codec::kNone},
                      CutCase{4, ReadMode::kLocalRead, Codec::kLz4},
                      CutCase{kCutAfterBatch, ReadMode::kLocalRead, Codec::kNone}),
    [](const ::testing::TestParamInfo<CutCase>& info) {
      return absl::StrCat("cut_", CutName(info.param.cut), "_", ReadModeName(info.param.mode), "_",
                          CodecName(info.param.compression));
    });

TEST_F(WorkerServiceTest, RejectsUnknownOpsNamingThem) {
  WorkerService service(Rooted());
  pipeline::PipelineSpec spec = spec_;
  spec.ops.push_back({"warp_drive", {}});
  OpenRequest request = Request(2);
  request.spec_json = pipeline::ToCanonicalJson(spec);
  auto session = service.OpenSession(request);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(session.status().message()), HasSubstr("warp_drive"));
  EXPECT_THAT(std::string(session.status().message()), HasSubstr("rejected by the worker"));
}

// A peer that skips the trainer's checks and sends a spec with a huge batch, thread count or
// op argument gets the session refused, naming the field; the service goes on serving.
TEST_F(WorkerServiceTest, RejectsSpecsOutsideTheirRanges) {
  WorkerService service(Rooted());
  const struct {
    std::function<void(pipeline::PipelineSpec&)> edit;
    const char* message;
  } cases[] = {
      {[](pipeline::PipelineSpec& s) { s.batch.size = int64_t{1} << 40; },
       "batch.size: must be in [1, 65536], got 1099511627776"},
      {[](pipeline::PipelineSpec& s) { s.options.threads = 1 << 30; },
       "options.threads: must be \"auto\" or an int in [1, 1024], got 1073741824"},
      {[](pipeline::PipelineSpec& s) { s.prefetch = int64_t{1} << 50; },
       "prefetch: must be in [0, 1024], got 1125899906842624"},
      {[](pipeline::PipelineSpec& s) {
         s.ops.push_back(
             {"pad_or_trim", {{"field", std::string("image")}, {"length", int64_t{1} << 40}}});
       },
       "pad_or_trim.length: must be in [1, 134217728], got 1099511627776"},
  };
  for (const auto& c : cases) {
    pipeline::PipelineSpec spec = spec_;
    c.edit(spec);
    OpenRequest request = Request(2);
    request.spec_json = pipeline::ToCanonicalJson(spec);
    auto session = service.OpenSession(request);
    ASSERT_FALSE(session.ok()) << c.message;
    EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(session.status().message()), HasSubstr("rejected by the worker"));
    EXPECT_THAT(std::string(session.status().message()), HasSubstr(c.message));
  }
  auto session = service.OpenSession(Request(2));
  ASSERT_TRUE(session.ok()) << session.status();
}

TEST_F(WorkerServiceTest, RejectsAVersionMismatchNamingBothVersions) {
  WorkerOptions options = Rooted();
  options.version = "9.9.9";
  WorkerService service(options);
  auto session = service.OpenSession(Request(2));
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(session.status().message()), HasSubstr(SluiceVersion()));
  EXPECT_THAT(std::string(session.status().message()), HasSubstr("9.9.9"));
}

TEST_F(WorkerServiceTest, RejectsBadCutsAndReadModes) {
  WorkerService service(Rooted());
  auto far = service.OpenSession(Request(6));
  EXPECT_THAT(std::string(far.status().message()), HasSubstr("cut 6 is out of range"));
  auto zero_local = service.OpenSession(Request(0, ReadMode::kLocalRead));
  EXPECT_FALSE(zero_local.ok());
  pipeline::PipelineSpec spec = spec_;
  spec.ops.erase(spec.ops.begin());
  OpenRequest request = Request(1, ReadMode::kLocalRead);
  request.spec_json = pipeline::ToCanonicalJson(spec);
  auto no_read = service.OpenSession(request);
  EXPECT_THAT(std::string(no_read.status().message()), HasSubstr("needs ops[0] to be read_file"));
}

TEST_F(WorkerServiceTest, CapsSessions) {
  WorkerOptions options = Rooted();
  options.max_sessions = 2;
  WorkerService service(options);
  auto a = service.OpenSession(Request(2));
  auto b = service.OpenSession(Request(2));
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = service.OpenSession(Request(2));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(), "worker at capacity: 2 sessions");
  (*a)->Cancel();
  EXPECT_EQ(service.open_sessions(), 1);
  EXPECT_TRUE(service.OpenSession(Request(2)).ok());
}

TEST_F(WorkerServiceTest, SessionsAreIsolated) {
  WorkerOptions options = Rooted();
  options.threads = 2;
  WorkerService service(options);
  auto a = service.OpenSession(Request(2));
  auto b = service.OpenSession(Request(kCutAfterBatch));
  ASSERT_TRUE(a.ok() && b.ok());
  SendEpoch(**a, ReadMode::kRemoteRead);
  SendEpoch(**b, ReadMode::kRemoteRead);
  Drained da = Drain(**a);
  Drained db = Drain(**b);
  test::ExpectSameById(test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, 2), da.elements);
  test::ExpectSameById(test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, -1), db.elements);
  // Each session counts only its own work.
  EXPECT_EQ(da.metrics.back().metrics.size(), 2u);
  EXPECT_EQ(db.metrics.back().metrics[0].samples, 16);
  EXPECT_EQ(da.metrics.back().metrics[0].samples, 16);
}

// One thread, two sessions with work waiting: one whose samples cost ~30x the other's CPU.
// Served first come first served (as before), the cheap session would finish its epoch only
// after the costly one had run nearly all of its own; served by CPU, it finishes while the
// costly one has run a few.
TEST_F(WorkerServiceTest, SessionsShareTheCpuNotTheTurns) {
  WorkerOptions options = Rooted();
  options.threads = 1;
  WorkerService service(options);
  pipeline::PipelineSpec heavy_spec = spec_;
  heavy_spec.ops[2].args["size"] = std::vector<int64_t>{320, 320};  // crop scaled up: costly
  OpenRequest heavy_request = Request(5);
  heavy_request.spec_json = pipeline::ToCanonicalJson(heavy_spec);
  auto heavy = service.OpenSession(heavy_request);
  auto light = service.OpenSession(Request(1));  // read_file only
  ASSERT_TRUE(heavy.ok() && light.ok());
  std::vector<Element> source = test::SourceElements(spec_, 0);
  ASSERT_EQ(source.size(), 16u);
  ASSERT_TRUE((*heavy)->AddSplit(0, source).ok());
  ASSERT_TRUE((*light)->AddSplit(0, source).ok());
  (*heavy)->CloseInput();
  (*light)->CloseInput();
  std::thread heavy_drain([&] { Drain(**heavy); });
  Drained d = Drain(**light);
  const std::vector<WorkerOpMetrics> heavy_ran = (*heavy)->Metrics();
  heavy_drain.join();
  EXPECT_EQ(d.elements.size(), 16u);
  ASSERT_EQ(heavy_ran.size(), 5u);
  EXPECT_LT(heavy_ran.back().samples, 8) << "the costly session had run "
                                         << heavy_ran.back().samples << " of 16 samples";
}

// A worker whose link binds always has an output queued when its transport asks for the next
// one. Metrics that are due go first: behind such a queue they had never gone (the trainer ran
// a whole plan without the worker's op costs, CPU share or CPU figure).
TEST_F(WorkerServiceTest, DueMetricsGoBeforeQueuedOutputs) {
  WorkerOptions options = Rooted();
  options.metrics_interval_s = 0.001;
  WorkerService service(options);
  auto session = service.OpenSession(Request(3));
  ASSERT_TRUE(session.ok()) << session.status();
  SendEpoch(**session, ReadMode::kRemoteRead);
  // Every sample processed, so the chunks and split ends are queued, none taken yet.
  for (int i = 0; i < 30000; ++i) {
    const std::vector<WorkerOpMetrics> m = (*session)->Metrics();
    if (!m.empty() && m.back().samples == 16) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ((*session)->Metrics().back().samples, 16);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the interval: due
  WorkerOutput first;
  ASSERT_EQ((*session)->NextOutput(&first, 1000), WorkerSession::Next::kOutput);
  EXPECT_EQ(first.kind, WorkerOutput::Kind::kMetrics);
  EXPECT_GT(first.cpu_ns, 0);
  // The queued outputs follow, all of them.
  Drained rest = Drain(**session);
  ASSERT_TRUE(rest.error.ok()) << rest.error;
  EXPECT_EQ(rest.elements.size(), 16u);
  EXPECT_EQ(rest.done.size(), 2u);
}

// Each session is told the CPU it is entitled to: the budget divided by weight between the
// sessions active (with work, or with work within kActivityWindowS).
TEST_F(WorkerServiceTest, EachSessionIsToldItsShareOfTheCpu) {
  WorkerOptions options = Rooted();
  options.threads = 1;
  std::atomic<int64_t> now{1'000'000'000};
  options.clock = [&now] { return now.load(); };
  WorkerService service(options);
  const double budget = service.Info().cpu_budget;
  ASSERT_GT(budget, 0);
  EXPECT_EQ(service.Info().active_session_weight, 0);
  OpenRequest weighted = Request(2);
  weighted.weight = 3;
  auto a = service.OpenSession(Request(2));
  auto b = service.OpenSession(weighted);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_DOUBLE_EQ((*a)->cpu_share(), budget);  // no one else is active yet
  SendEpoch(**a, ReadMode::kRemoteRead);
  SendEpoch(**b, ReadMode::kRemoteRead);
  Drained da = Drain(**a);
  Drained db = Drain(**b);
  // Both ran just now (the clock stands still): a quarter and three quarters.
  EXPECT_DOUBLE_EQ((*a)->cpu_share(), budget / 4);
  EXPECT_DOUBLE_EQ((*b)->cpu_share(), budget * 3 / 4);
  EXPECT_DOUBLE_EQ(service.Info().active_session_weight, 4);
  // The last metrics carried the share.
  ASSERT_FALSE(da.metrics.empty());
  EXPECT_GT(da.metrics.back().cpu_share, 0);
  EXPECT_LE(da.metrics.back().cpu_share, budget);
  // Idle for longer than the activity window: each would have it all again.
  now += static_cast<int64_t>((kActivityWindowS + 1) * 1e9);
  EXPECT_DOUBLE_EQ((*a)->cpu_share(), budget);
  EXPECT_EQ(service.Info().active_session_weight, 0);
  (*b)->Cancel();
  EXPECT_DOUBLE_EQ((*a)->cpu_share(), budget);

  // Two sessions of one trainer process (a plan switch) do not halve each other's share, and
  // its GetInfo leaves them out; another process sees them as one trainer.
  OpenRequest mine = Request(2);
  mine.client_id = 42;
  auto c = service.OpenSession(mine);
  auto d = service.OpenSession(mine);
  ASSERT_TRUE(c.ok() && d.ok());
  SendEpoch(**c, ReadMode::kRemoteRead);
  SendEpoch(**d, ReadMode::kRemoteRead);
  Drain(**c);
  Drain(**d);
  EXPECT_DOUBLE_EQ((*c)->cpu_share(), budget);  // not halved by d (a is idle past the window)
  EXPECT_DOUBLE_EQ((*d)->cpu_share(), budget);
  EXPECT_DOUBLE_EQ(service.Info(/*client_id=*/42).active_session_weight, 0);
  EXPECT_DOUBLE_EQ(service.Info(/*client_id=*/43).active_session_weight, 1);
  (*d)->Cancel();  // the switch ends: d closes while c goes on
  // Another trainer's session closes while active (its plan switch): until its activity
  // window has passed, c is not told that the whole worker is its own.
  OpenRequest theirs = Request(2);
  theirs.client_id = 7;
  auto e = service.OpenSession(theirs);
  ASSERT_TRUE(e.ok());
  SendEpoch(**e, ReadMode::kRemoteRead);
  Drain(**e);
  EXPECT_DOUBLE_EQ((*c)->cpu_share(), budget / 2);
  (*e)->Cancel();
  EXPECT_DOUBLE_EQ((*c)->cpu_share(), budget / 2);
  EXPECT_DOUBLE_EQ(service.Info(/*client_id=*/42).active_session_weight, 1);
  // A newcomer (no session here) is not told to share with a trainer that left before it
  // came: it never shared with it, and a trainer whose sessions all closed has most often
  // ended.
  EXPECT_DOUBLE_EQ(service.Info(/*client_id=*/99).active_session_weight, 1);  // c, not e
  now += static_cast<int64_t>((kActivityWindowS + 1) * 1e9);
  EXPECT_DOUBLE_EQ((*c)->cpu_share(), budget);
  EXPECT_EQ(service.Info(/*client_id=*/42).active_session_weight, 0);
}

TEST_F(WorkerServiceTest, RefusesASessionWeightOutOfRange) {
  WorkerService service(Rooted());
  for (double w : {0.0, -1.0, kMaxSessionWeight * 2, std::nan("")}) {
    OpenRequest r = Request(2);
    r.weight = w;
    auto s = service.OpenSession(r);
    ASSERT_FALSE(s.ok()) << w;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("session weight"));
  }
  EXPECT_EQ(service.open_sessions(), 0);
}

TEST_F(WorkerServiceTest, SkipsCorruptSamplesAndReportsThemInSplitDone) {
  dir_.Write("data/cat/99.jpg", "this is not a jpeg");
  spec_.options.on_error = pipeline::OnError::kSkip;
  WorkerService service(Rooted());
  auto session = service.OpenSession(Request(2));
  ASSERT_TRUE(session.ok());
  SendEpoch(**session, ReadMode::kRemoteRead);
  Drained d = Drain(**session);
  ASSERT_TRUE(d.error.ok()) << d.error;
  EXPECT_EQ(d.elements.size(), 16u);
  size_t skipped = 0, delivered = 0;
  for (auto& [id, done] : d.done) {
    delivered += done.delivered;
    for (const SkippedSample& s : done.skipped) {
      ++skipped;
      EXPECT_THAT(s.reason, HasSubstr("99.jpg"));
      EXPECT_THAT(s.reason, HasSubstr("ops[1].decode_jpeg"));
      EXPECT_EQ(s.kind, ErrorKind::kData);
    }
  }
  EXPECT_EQ(skipped, 1u);
  EXPECT_EQ(delivered, 16u);
}

TEST_F(WorkerServiceTest, FailsTheSessionOnACorruptSampleUnderOnErrorFail) {
  dir_.Write("data/cat/99.jpg", "this is not a jpeg");
  WorkerService service(Rooted());
  auto session = service.OpenSession(Request(2));
  ASSERT_TRUE(session.ok());
  SendEpoch(**session, ReadMode::kRemoteRead, /*may_fail=*/true);
  Drained d = Drain(**session);
  ASSERT_FALSE(d.error.ok());
  EXPECT_THAT(std::string(d.error.message()), HasSubstr("99.jpg"));
  EXPECT_EQ(KindOf(d.error), ErrorKind::kData);
}

TEST_F(WorkerServiceTest, ResolvesPathsUnderTheDataRoot) {
  // The trainer names files relative to the data root; the worker resolves them.
  spec_.source.files = {"data/**/*.jpg"};
  std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());
  std::vector<Element> source = test::SourceElements(spec_, 0);
  std::vector<Element> expected = test::RunLocally(spec_, source, 0, 3);
  std::filesystem::current_path(cwd);

  WorkerOptions options = Rooted();
  options.data_root = dir_.path();
  WorkerService service(options);
  auto session = service.OpenSession(Request(3));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddSplit(0, source).ok());
  // An absolute path outside the root fails that sample, naming the root.
  Element outside = source[0];
  outside.tensors[0] = Tensor::FromBytes("/etc/hostname");
  outside.origin = "/etc/hostname";
  ASSERT_TRUE((*session)->AddSplit(1, {outside}).ok());
  (*session)->CloseInput();
  Drained d = Drain(**session);
  ASSERT_FALSE(d.error.ok());
  EXPECT_THAT(std::string(d.error.message()), HasSubstr("outside the worker's data root"));
  EXPECT_EQ(d.error.code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(WorkerServiceTest, DataRootMappedOutputIsUnchanged) {
  spec_.source.files = {"data/**/*.jpg"};
  std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());
  std::vector<Element> source = test::SourceElements(spec_, 0);
  std::vector<Element> expected = test::RunLocally(spec_, source, 0, 3);
  std::filesystem::current_path(cwd);
  WorkerOptions options = Rooted();
  options.data_root = dir_.path();
  WorkerService service(options);
  auto session = service.OpenSession(Request(3));
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->AddSplit(0, source).ok());
  (*session)->CloseInput();
  Drained d = Drain(**session);
  ASSERT_TRUE(d.error.ok()) << d.error;
  test::ExpectSameById(expected, d.elements);  // the path field is the trainer's own
}

TEST_F(WorkerServiceTest, RejectsSplitsThatDoNotFitTheSchema) {
  WorkerService service(Rooted());
  auto session = service.OpenSession(Request(2, ReadMode::kLocalRead));
  ASSERT_TRUE(session.ok());
  // Source elements lack `data`: local_read splits carry the bytes.
  Status s = (*session)->AddSplit(0, test::SourceElements(spec_, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("expects"));
  EXPECT_FALSE((*session)->AddEncodedSplit(1, "garbage", "").ok());
}

TEST_F(WorkerServiceTest, CapsQueuedInputPerSession) {
  WorkerOptions options = Rooted();
  options.max_session_bytes = 4096;
  WorkerService service(options);
  auto session = service.OpenSession(Request(2, ReadMode::kLocalRead));
  ASSERT_TRUE(session.ok());
  std::vector<Element> split = test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, 1);
  Status s = (*session)->AddSplit(0, std::move(split));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("per-session memory cap"));
}

TEST_F(WorkerServiceTest, RejectsElementsOverTheMessageLimit) {
  WorkerOptions options = Rooted();
  options.max_message_bytes = 8192;
  WorkerService service(options);
  auto session = service.OpenSession(Request(3));  // after the crop: 24x24x3 u8, small
  ASSERT_TRUE(session.ok());
  SendEpoch(**session, ReadMode::kRemoteRead);
  Drained ok = Drain(**session);
  EXPECT_TRUE(ok.error.ok()) << ok.error;

  auto decoded = service.OpenSession(Request(2));  // decoded images are ~10 KB each
  ASSERT_TRUE(decoded.ok());
  // The session fails at the first decoded sample; later splits may find it over.
  (void)(*decoded)->AddSplit(0, test::SourceElements(spec_, 0));
  Drained d = Drain(**decoded);
  ASSERT_FALSE(d.error.ok());
  EXPECT_EQ(d.error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(d.error.message()), HasSubstr("over the message limit of 8192"));
}

// Takes every output until the session ends, crediting each chunk: the chunks' sizes on the
// wire, and their samples added to *samples.
std::vector<size_t> ChunkSizes(WorkerSession& session, size_t* samples) {
  std::vector<size_t> sizes;
  while (true) {
    WorkerOutput out;
    const WorkerSession::Next next = session.NextOutput(&out, 30000);
    if (next == WorkerSession::Next::kTimeout) ADD_FAILURE() << "nothing for 30 s";
    if (next != WorkerSession::Next::kOutput) break;
    if (out.kind != WorkerOutput::Kind::kChunk) continue;
    *samples += out.samples;
    sizes.push_back(out.chunk.wire_bytes());
    session.AddCredit(out.chunk.wire_bytes());
  }
  return sizes;
}

// A local_read split of `n` samples of 8 KiB (a path, a label, the bytes).
std::vector<Element> EightKiBSamples(int n) {
  std::vector<Element> split;
  for (int i = 0; i < n; ++i) {
    Element e;
    e.id = {0, static_cast<uint64_t>(i)};
    e.origin = "f.jpg";
    e.tensors.push_back(Tensor::FromBytes("data/f.jpg"));
    e.tensors.push_back(Tensor::Scalar(1));
    e.tensors.push_back(Tensor::Zeros(DType::kBytes, {8192}));
    split.push_back(std::move(e));
  }
  return split;
}

// Local_read with no remote ops: every output equals its input, 8 KiB + a small header.
TEST_F(WorkerServiceTest, FlowControlBoundsBufferedBytesWhenTheConsumerStalls) {
  WorkerOptions options = Rooted();
  options.threads = 2;
  WorkerService service(options);
  OpenRequest request = Request(1, ReadMode::kLocalRead);
  const size_t window = 64 << 10;
  request.max_inflight_bytes = window;
  auto session = service.OpenSession(request);
  ASSERT_TRUE(session.ok());
  EXPECT_EQ((*session)->info().max_inflight_bytes, window);
  const int total = 200;
  ASSERT_TRUE((*session)->AddSplit(0, EightKiBSamples(total)).ok());
  (*session)->CloseInput();

  // Take chunks without crediting them until nothing more comes.
  std::vector<WorkerOutput> taken;
  size_t samples = 0;
  while (true) {
    WorkerOutput out;
    if ((*session)->NextOutput(&out, 500) != WorkerSession::Next::kOutput) break;
    if (out.kind == WorkerOutput::Kind::kChunk) {
      samples += out.samples;
      taken.push_back(std::move(out));
    }
  }
  EXPECT_LT(samples, static_cast<size_t>(total));
  EXPECT_GT(samples, 0u);
  EXPECT_LE((*session)->peak_buffered_bytes(), window);
  // Crediting lets it finish, still within the window.
  for (WorkerOutput& out : taken) (*session)->AddCredit(out.chunk.wire_bytes());
  Drained rest = Drain(**session);
  EXPECT_EQ(samples + rest.elements.size(), static_cast<size_t>(total));
  EXPECT_LE((*session)->peak_buffered_bytes(), window);
  ASSERT_EQ(rest.done.size(), 1u);
  EXPECT_EQ(rest.done.begin()->second.delivered, static_cast<uint64_t>(total));
}


TEST_F(WorkerServiceTest, SamplesOfASplitRunningOneAfterAnotherShareAChunk) {
  // One thread runs a split's samples one after another. Each finished sample whose split's
  // next sample starts right after it waits for that one, so a split under the chunk size
  // comes back as one chunk: not one message (and one credit) per sample.
  WorkerOptions options = Rooted();
  options.threads = 1;
  options.chunk_bytes = 64 << 20;
  WorkerService service(options);
  auto session = service.OpenSession(Request(4));
  ASSERT_TRUE(session.ok()) << session.status();
  SendEpoch(**session, ReadMode::kRemoteRead);
  Drained d = Drain(**session);
  ASSERT_TRUE(d.error.ok()) << d.error;
  EXPECT_EQ(d.elements.size(), 16u);
  const auto chunks = std::count(d.kinds.begin(), d.kinds.end(), WorkerOutput::Kind::kChunk);
  EXPECT_EQ(chunks, 2) << "one chunk for each of the two splits of 8";
}

// A chunk is at most a quarter of the session's window (however large chunk_bytes is), so
// that several are in flight while the credit for the first comes back. Without that bound
// a split whose samples run one after another is held until the window is full and comes
// as one chunk of the whole window.
TEST_F(WorkerServiceTest, AChunkIsAtMostAQuarterOfTheWindow) {
  WorkerOptions options = Rooted();
  options.threads = 1;
  options.chunk_bytes = 64 << 20;
  WorkerService service(options);
  OpenRequest request = Request(1, ReadMode::kLocalRead);
  const size_t window = 256 << 10;
  request.max_inflight_bytes = window;
  auto session = service.OpenSession(request);
  ASSERT_TRUE(session.ok()) << session.status();
  const int total = 64;
  ASSERT_TRUE((*session)->AddSplit(0, EightKiBSamples(total)).ok());
  (*session)->CloseInput();
  size_t samples = 0;
  const std::vector<size_t> chunk_bytes = ChunkSizes(**session, &samples);
  EXPECT_EQ(samples, static_cast<size_t>(total));
  // Flushed once a quarter of the window is pending: one sample over it at most.
  for (size_t b : chunk_bytes) EXPECT_LE(b, window / 4 + 8192 + 512);
  EXPECT_GE(chunk_bytes.size(), 8u);
}

// A chunk that took long to send makes the next ones what the way to the trainer carries in
// kChunkCrossingS (never under kMinChunkBytes); quick sends bring them back to the session's
// chunk size.
TEST_F(WorkerServiceTest, ChunksShrinkToWhatASlowLinkCarriesInAFiftiethOfASecond) {
  WorkerOptions options = Rooted();
  options.threads = 1;
  options.chunk_bytes = 1 << 20;
  WorkerService service(options);
  auto session = service.OpenSession(Request(1, ReadMode::kLocalRead));
  ASSERT_TRUE(session.ok()) << session.status();
  WorkerSession& w = **session;
  EXPECT_EQ(w.chunk_target(), size_t{1} << 20);
  // 1 MiB in 0.1048576 s: 10 MB/s, so 200 KB in 20 ms.
  w.NoteChunkSent(1 << 20, 0.1048576);
  EXPECT_NEAR(static_cast<double>(w.chunk_target()), 200e3, 1);
  ASSERT_TRUE(w.AddSplit(0, EightKiBSamples(64)).ok());
  w.CloseInput();
  size_t samples = 0;
  const std::vector<size_t> chunk_bytes = ChunkSizes(w, &samples);
  EXPECT_EQ(samples, 64u);
  for (size_t b : chunk_bytes) EXPECT_LE(b, 200e3 + 8192 + 512);
  EXPECT_GE(chunk_bytes.size(), 3u) << "64 samples of 8 KiB in chunks of 200 KB";
  // Quick sends: back to the whole size within a few chunks, not at the first.
  w.NoteChunkSent(1 << 20, 1e-4);
  EXPECT_LT(w.chunk_target(), size_t{1} << 20);
  for (int i = 0; i < 20; ++i) w.NoteChunkSent(1 << 20, 1e-4);
  EXPECT_EQ(w.chunk_target(), size_t{1} << 20);
  // A link slower than the floor: the floor.
  for (int i = 0; i < 40; ++i) w.NoteChunkSent(1 << 20, 100.0);
  EXPECT_EQ(w.chunk_target(), WorkerSession::kMinChunkBytes);
}
TEST_F(WorkerServiceTest, SendsMetricsPeriodically) {
  WorkerOptions options = Rooted();
  options.metrics_interval_s = 0.01;
  WorkerService service(options);
  auto session = service.OpenSession(Request(2));
  ASSERT_TRUE(session.ok());
  WorkerOutput out;
  ASSERT_EQ((*session)->NextOutput(&out, 5000), WorkerSession::Next::kOutput);
  EXPECT_EQ(out.kind, WorkerOutput::Kind::kMetrics);
  ASSERT_EQ(out.metrics.size(), 2u);
  EXPECT_EQ(out.metrics[1].name, "decode_jpeg");
  EXPECT_EQ(out.metrics[1].position, 1);
}

TEST_F(WorkerServiceTest, ShutdownEndsOpenSessions) {
  auto service = std::make_unique<WorkerService>(Rooted());
  auto session = service->OpenSession(Request(2));
  ASSERT_TRUE(session.ok());
  service->Shutdown();
  WorkerOutput out;
  EXPECT_EQ((*session)->NextOutput(&out, 5000), WorkerSession::Next::kEnd);
  EXPECT_EQ(service->OpenSession(Request(2)).status().code(), absl::StatusCode::kUnavailable);
  service.reset();  // the session outlives the service safely
  EXPECT_FALSE((*session)->AddSplit(0, {}).ok());
}

TEST_F(WorkerServiceTest, SessionsShareTheWorkersMemoryBudget) {
  WorkerOptions options = Rooted();
  options.max_session_bytes = 8 << 20;
  options.max_total_bytes = 22 << 20;  // one whole session (16 MiB), then 6 MiB left
  WorkerService service(options);
  OpenRequest request = Request(3);
  request.max_inflight_bytes = 8 << 20;
  auto first = service.OpenSession(request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->info().max_inflight_bytes, size_t{8} << 20);
  // What is left is split between the second session's window and its input cap.
  auto second = service.OpenSession(request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->info().max_inflight_bytes, size_t{3} << 20);
  // Nothing left: refused with the figures, until a session gives its reservation back.
  auto third = service.OpenSession(request);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("worker memory budget exhausted: 23068672 of 23068672 bytes reserved "
                        "by 2 sessions (--max-memory-bytes)"));
  (*first)->Cancel();
  auto fourth = service.OpenSession(request);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ((*fourth)->info().max_inflight_bytes, size_t{8} << 20);
}

// --- confinement: every file any op reads on a worker stays under its data root ----------

// A trainer in read=local mode sends the bytes of ops[0]'s file; a second read_file after
// the cut would read on the worker. It reads under the data root or not at all.
TEST_F(WorkerServiceTest, AReadFileAfterTheCutInLocalReadStaysInTheRoot) {
  spec_.ops = {{"read_file", {}}, {"read_file", {}}};
  spec_.batch.size = 0;
  WorkerService service(Rooted());
  auto session = service.OpenSession(Request(2, ReadMode::kLocalRead));
  ASSERT_TRUE(session.ok()) << session.status();
  Element e = test::RunLocally(spec_, test::SourceElements(spec_, 0), 0, 1)[0];
  e.tensors[0] = Tensor::FromBytes("/etc/passwd");
  ASSERT_TRUE((*session)->AddSplit(0, {e}).ok());
  (*session)->CloseInput();
  Drained d = Drain(**session);
  EXPECT_TRUE(d.elements.empty());
  EXPECT_EQ(d.error.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(d.error.message()),
              HasSubstr("path '/etc/passwd' is outside the worker's data root"));
}

TEST_F(WorkerServiceTest, AWorkerWithoutADataRootRefusesSessionsThatReadFiles) {
  WorkerService service(WorkerOptions{});
  auto remote = service.OpenSession(Request(3));
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(remote.status().message()),
              HasSubstr("ops[0].read_file would read files on this worker, which was started "
                        "without --data-root"));
  // read=local with no file-reading op after the cut is what such a worker serves.
  auto local = service.OpenSession(Request(3, ReadMode::kLocalRead));
  ASSERT_TRUE(local.ok()) << local.status();
  SendEpoch(**local, ReadMode::kLocalRead);
  Drained d = Drain(**local);
  EXPECT_TRUE(d.error.ok()) << d.error;
  EXPECT_EQ(d.elements.size(), 16u);
  // ... and a file-reading op after the cut is refused there too.
  spec_.ops.insert(spec_.ops.begin() + 1, {"read_box", {}});
  auto sidecar = service.OpenSession(Request(3, ReadMode::kLocalRead));
  ASSERT_FALSE(sidecar.ok());
  EXPECT_THAT(std::string(sidecar.status().message()), HasSubstr("ops[1].read_box would read"));
  EXPECT_THAT(std::string(service.CheckReadable(dir_.path() + "/x.jpg").message()),
              HasSubstr("reads no files: this worker was started without --data-root"));
}

TEST_F(WorkerServiceTest, ASymlinkOutOfTheRootIsRefusedUnlessAllowed) {
  const std::string root = dir_.path() + "/data";
  std::filesystem::create_symlink("/etc/hostname", root + "/escape.jpg");
  spec_.ops = {{"read_file", {}}};
  spec_.batch.size = 0;
  Element e = test::SourceElements(spec_, 0)[0];
  e.tensors[0] = Tensor::FromBytes("escape.jpg");
  for (bool allow : {false, true}) {
    WorkerOptions options;
    options.data_root = root;
    options.allow_symlinks_out = allow;
    WorkerService service(options);
    auto session = service.OpenSession(Request(1));
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->AddSplit(0, {e}).ok());
    (*session)->CloseInput();
    Drained d = Drain(**session);
    if (allow) {
      EXPECT_TRUE(d.error.ok()) << d.error;
      EXPECT_EQ(d.elements.size(), 1u);
    } else {
      EXPECT_THAT(std::string(d.error.message()),
                  HasSubstr("'escape.jpg' is outside the worker's data root '" + root +
                            "' through a symlink"));
    }
  }
}

// read_box's sidecars resolve like read_file's paths: relative to the data root, whatever
// the worker's working directory.
TEST_F(WorkerServiceTest, ReadBoxSidecarsResolveUnderTheDataRoot) {
  std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());
  spec_.source.files = {"data/**/*.jpg"};
  spec_.ops = {{"read_box", {}}};
  spec_.batch.size = 0;
  std::vector<Element> source = test::SourceElements(spec_, 0);
  for (const Element& e : source) {
    std::filesystem::path box(std::string(e.tensors[0].bytes()));
    box.replace_extension(".box");
    std::ofstream(box) << "1 2 " << 3 + e.id.index << " 4";
  }
  std::vector<Element> expected = test::RunLocally(spec_, source, 0, 1);
  std::filesystem::current_path(cwd);
  WorkerService service(Rooted());
  auto session = service.OpenSession(Request(1));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddSplit(0, source).ok());
  (*session)->CloseInput();
  Drained d = Drain(**session);
  EXPECT_TRUE(d.error.ok()) << d.error;
  test::ExpectSameById(expected, d.elements);

  auto hostile = service.OpenSession(Request(1));
  ASSERT_TRUE(hostile.ok()) << hostile.status();
  Element outside = source[0];
  outside.tensors[0] = Tensor::FromBytes("../../etc/passwd.jpg");
  ASSERT_TRUE((*hostile)->AddSplit(0, {outside}).ok());
  (*hostile)->CloseInput();
  Drained h = Drain(**hostile);
  EXPECT_THAT(std::string(h.error.message()),
              HasSubstr("box file: path '../../etc/passwd.box' is outside the worker's data root"));
}

// A clock the test moves by hand (nanoseconds).
struct FakeClock {
  std::shared_ptr<std::atomic<int64_t>> now = std::make_shared<std::atomic<int64_t>>(1000);
  std::function<int64_t()> Fn() const {
    return [now = now] { return now->load(); };
  }
  void Advance(double seconds) { now->fetch_add(static_cast<int64_t>(seconds * 1e9)); }
};

TEST_F(WorkerServiceTest, ASessionWhoseTrainerIsSilentForItsLeaseIsClosed) {
  FakeClock clock;
  std::vector<std::string> log;
  std::mutex log_mu;
  WorkerOptions options = Rooted();
  options.max_sessions = 1;
  options.session_lease_s = 30;
  options.clock = clock.Fn();
  options.log = [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(log_mu);
    log.push_back(m);
  };
  WorkerService service(options);
  auto opened = service.OpenSession(Request(2));
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<WorkerSession> session = *opened;
  EXPECT_EQ(session->info().session_lease_s, 30);
  EXPECT_EQ(session->info().id, 1u);
  // Work in hand, so that the expiry has memory to free.
  SendEpoch(*session, ReadMode::kRemoteRead);

  // Every message renews the lease: a credit, a heartbeat.
  clock.Advance(29);
  EXPECT_EQ(service.ExpireLeases(), 0);
  session->AddCredit(0);
  clock.Advance(29);
  EXPECT_EQ(service.ExpireLeases(), 0);
  session->Heartbeat();
  EXPECT_EQ(session->heartbeats(), 1);
  clock.Advance(29.999);
  EXPECT_EQ(service.ExpireLeases(), 0);
  EXPECT_FALSE(session->expired());

  // Then silence for the whole lease.
  clock.Advance(0.002);
  EXPECT_EQ(service.ExpireLeases(), 1);
  EXPECT_TRUE(session->expired());
  EXPECT_EQ(service.expired_sessions(), 1);
  EXPECT_EQ(service.open_sessions(), 0) << "the slot is released at once";
  EXPECT_TRUE(service.Sessions().empty());
  EXPECT_EQ(session->buffered_bytes(), 0u) << "its buffered output is dropped";
  // The transport gets the reason, then the end.
  WorkerOutput out;
  ASSERT_EQ(session->NextOutput(&out, 5000), WorkerSession::Next::kOutput);
  ASSERT_EQ(out.kind, WorkerOutput::Kind::kError);
  EXPECT_EQ(out.error.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(out.error.message()),
              HasSubstr("session lease expired: no message from the trainer for 30.0 s"));
  EXPECT_EQ(session->NextOutput(&out, 5000), WorkerSession::Next::kEnd);
  EXPECT_FALSE(session->AddSplit(99, {}).ok());
  {
    std::lock_guard<std::mutex> lock(log_mu);
    ASSERT_EQ(log.size(), 2u);
    EXPECT_THAT(log[0], HasSubstr("session 1 opened"));
    EXPECT_THAT(log[1], HasSubstr("session 1 closed: its trainer sent nothing for 30.0 s"));
  }
  // The slot is free for another trainer.
  EXPECT_TRUE(service.OpenSession(Request(2)).ok());
}

TEST_F(WorkerServiceTest, AnExpiredSessionStillHeldByItsTransportFiresTheExpiryHook) {
  FakeClock clock;
  WorkerOptions options = Rooted();
  options.session_lease_s = 5;
  options.clock = clock.Fn();
  WorkerService service(options);
  auto session = service.OpenSession(Request(2));
  ASSERT_TRUE(session.ok());
  std::atomic<int> fired{0};
  (*session)->SetExpiryHook([&] { ++fired; });
  clock.Advance(6);
  EXPECT_EQ(service.ExpireLeases(), 1);
  EXPECT_EQ(fired.load(), 0) << "the transport first gets a chance to send the error";
  EXPECT_EQ(service.ExpireLeases(), 0);
  EXPECT_EQ(fired.load(), 1) << "still held on the next pass: cancel the call";
  EXPECT_EQ(service.ExpireLeases(), 0);
  EXPECT_EQ(fired.load(), 1) << "once";

  // A session the transport ended (Cancel) is left alone.
  auto other = service.OpenSession(Request(2));
  ASSERT_TRUE(other.ok());
  (*other)->SetExpiryHook([&] { ++fired; });
  (*other)->Cancel();
  clock.Advance(60);
  service.ExpireLeases();
  service.ExpireLeases();
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(service.expired_sessions(), 1);
}

TEST_F(WorkerServiceTest, ALeaseOfZeroNeverExpires) {
  FakeClock clock;
  WorkerOptions options = Rooted();
  options.session_lease_s = 0;
  options.clock = clock.Fn();
  WorkerService service(options);
  auto session = service.OpenSession(Request(2));
  ASSERT_TRUE(session.ok());
  EXPECT_EQ((*session)->info().session_lease_s, 0);
  clock.Advance(1e6);
  EXPECT_EQ(service.ExpireLeases(), 0);
  EXPECT_EQ(service.open_sessions(), 1);
}

// Drain (worker_service.h, "Drain"). The sessions below ask for a window of one byte: the
// worker then runs one sample and waits for credit, so no split can finish before the test
// takes (and credits) the output.
OpenRequest OneSampleAtATime(OpenRequest request) {
  request.max_inflight_bytes = 1;
  return request;
}

std::vector<Element> Slice(const std::vector<Element>& all, size_t begin, size_t end) {
  return std::vector<Element>(all.begin() + begin, all.begin() + end);
}

TEST_F(WorkerServiceTest, DrainFinishesTheSplitsHeldRefusesNewOnesAndSaysSo) {
  WorkerOptions options = Rooted();
  options.threads = 2;
  int drains_begun = 0;
  options.on_drain = [&] { ++drains_begun; };
  WorkerService service(options);
  auto session = service.OpenSession(OneSampleAtATime(Request(/*cut=*/3)));
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<Element> source = test::SourceElements(spec_, 0);
  ASSERT_EQ(source.size(), 16u);
  ASSERT_TRUE((*session)->AddSplit(0, Slice(source, 0, 8)).ok());
  ASSERT_TRUE((*session)->AddSplit(1, Slice(source, 8, 16)).ok());

  EXPECT_EQ(service.BeginDrain(/*deadline_s=*/30), 1);
  EXPECT_TRUE(service.draining());
  EXPECT_TRUE((*session)->draining());
  EXPECT_EQ(drains_begun, 1);
  EXPECT_EQ(service.BeginDrain(30), 0);  // once
  EXPECT_EQ(drains_begun, 1);

  // New work is refused with a typed error; the session goes on.
  const Status refused = (*session)->AddSplit(2, Slice(source, 0, 1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsDrainingRefusal(refused)) << refused;
  auto other = service.OpenSession(Request(3));
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(IsDrainingRefusal(other.status())) << other.status();
  EXPECT_FALSE(IsDrainingRefusal(absl::UnavailableError("the worker is draining")));

  // The splits held are finished and delivered, and the session ends by itself (its input
  // was never closed).
  Drained d = Drain(**session);
  ASSERT_TRUE(d.error.ok()) << d.error;
  ASSERT_EQ(d.draining.size(), 1u);
  EXPECT_EQ(d.draining[0].deadline_s, 30);
  EXPECT_EQ(d.draining[0].held_splits, 2u);
  ASSERT_EQ(d.returned.size(), 1u);
  EXPECT_EQ(d.returned[0].split_id, 2u);
  EXPECT_THAT(d.returned[0].reason, HasSubstr("draining"));
  ASSERT_EQ(d.done.size(), 2u);
  EXPECT_EQ(d.done[0].delivered, 8u);
  EXPECT_EQ(d.done[1].delivered, 8u);
  test::ExpectSameById(test::RunLocally(spec_, source, 0, 3), d.elements);
  ASSERT_FALSE(d.kinds.empty());
  EXPECT_EQ(d.kinds.back(), WorkerOutput::Kind::kDrained);
  EXPECT_EQ((*session)->returned_splits(), 1);
  (*session)->Cancel();
  EXPECT_EQ(service.open_sessions(), 0);
}

TEST_F(WorkerServiceTest, HandBackAtTheDrainDeadlineReturnsWhatIsStillHeld) {
  WorkerOptions options = Rooted();
  options.threads = 1;
  WorkerService service(options);
  auto session = service.OpenSession(OneSampleAtATime(Request(/*cut=*/3)));
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<Element> source = test::SourceElements(spec_, 0);
  ASSERT_TRUE((*session)->AddSplit(0, Slice(source, 0, 8)).ok());
  ASSERT_TRUE((*session)->AddSplit(1, Slice(source, 8, 16)).ok());
  EXPECT_EQ(service.HandBack(), 0u);  // only while draining

  // The one sample the window admits, taken and not credited: nothing else runs.
  WorkerOutput first;
  do {
    ASSERT_EQ((*session)->NextOutput(&first, 30000), WorkerSession::Next::kOutput);
  } while (first.kind == WorkerOutput::Kind::kMetrics);
  ASSERT_EQ(first.kind, WorkerOutput::Kind::kChunk);
  EXPECT_EQ(first.split_id, 0u);
  EXPECT_EQ(first.samples, 1u);

  EXPECT_EQ(service.BeginDrain(/*deadline_s=*/5), 1);
  EXPECT_EQ(service.HandBack(), 2u);
  Drained d = Drain(**session);
  ASSERT_TRUE(d.error.ok()) << d.error;
  ASSERT_EQ(d.draining.size(), 1u);
  EXPECT_EQ(d.draining[0].held_splits, 2u);
  ASSERT_EQ(d.returned.size(), 2u);
  EXPECT_EQ(d.returned[0].split_id, 0u);
  EXPECT_EQ(d.returned[1].split_id, 1u);
  EXPECT_THAT(d.returned[0].reason, HasSubstr("deadline"));
  // What was delivered stays delivered; nothing of a returned split follows.
  EXPECT_TRUE(d.elements.empty());
  EXPECT_TRUE(d.done.empty());
  ASSERT_FALSE(d.kinds.empty());
  EXPECT_EQ(d.kinds.back(), WorkerOutput::Kind::kDrained);
  EXPECT_EQ((*session)->returned_splits(), 2);
}

TEST_F(WorkerServiceTest, ADrainingSessionThatHoldsNothingEndsAtOnce) {
  WorkerService service(Rooted());
  auto session = service.OpenSession(Request(/*cut=*/3));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(service.BeginDrain(/*deadline_s=*/30), 1);
  Drained d = Drain(**session);
  ASSERT_TRUE(d.error.ok()) << d.error;
  ASSERT_EQ(d.draining.size(), 1u);
  EXPECT_EQ(d.draining[0].held_splits, 0u);
  EXPECT_TRUE(d.elements.empty());
  ASSERT_FALSE(d.kinds.empty());
  EXPECT_EQ(d.kinds.back(), WorkerOutput::Kind::kDrained);
}

}  // namespace
}  // namespace sluice::rpc
