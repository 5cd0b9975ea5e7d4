#include "sluice/runtime/profiler.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/pipeline/source.h"

namespace sluice::runtime {
namespace {

TEST(ConsumerMeterTest, SplitsTimeIntoWaitingAndStepping) {
  ConsumerMeter m;
  // Call 1 waits 10 ms (start-up), then steps of 4 ms with waits of 1 ms.
  int64_t t = 0;
  m.Before(t);
  t += 10'000'000;
  m.After(t, /*samples=*/8);
  for (int i = 0; i < 3; ++i) {
    t += 4'000'000;
    m.Before(t);
    t += 1'000'000;
    m.After(t, 8);
  }
  const ConsumerCounters& c = m.counters();
  EXPECT_EQ(c.batches, 4);
  EXPECT_EQ(c.samples, 32);
  EXPECT_EQ(c.wait_ns, 13'000'000);
  EXPECT_EQ(c.step_ns, 12'000'000);
  EXPECT_EQ(c.steps, 3);
}

TEST(ConsumerMeterTest, ShortestStepSinceTheLastTake) {
  ConsumerMeter m;
  EXPECT_EQ(m.TakeMinStepNs(), 0);  // no step yet
  int64_t t = 0;
  m.Before(t);
  m.After(t += 1'000'000, 8);
  // Steps of 20, 31 (a late wake-up) and 21 ms.
  for (int64_t step : {20'000'000, 31'000'000, 21'000'000}) {
    m.Before(t += step);
    m.After(t += 1'000'000, 8);
  }
  EXPECT_EQ(m.TakeMinStepNs(), 20'000'000);
  EXPECT_EQ(m.TakeMinStepNs(), 0);  // taken
  m.Before(t += 25'000'000);
  EXPECT_EQ(m.TakeMinStepNs(), 25'000'000);
  EXPECT_EQ(m.counters().steps, 4);  // the mean's counters are untouched
}

TEST(ConsumerMeterTest, ExtendWaitMovesTimeFromSteppingToWaiting) {
  ConsumerMeter m;
  m.Before(0);
  m.After(100, 1);
  m.ExtendWait(150);  // 50 ns of loader work after the batch was handed out
  m.Before(400);
  m.After(410, 1);
  EXPECT_EQ(m.counters().wait_ns, 100 + 50 + 10);
  EXPECT_EQ(m.counters().step_ns, 250);
}

TEST(ConsumerMeterTest, ExcludeLeavesTimeOutOfBoth) {
  ConsumerMeter m;
  m.Before(0);
  m.After(100, 1);
  m.Exclude(150);
  m.Before(400);
  m.After(410, 1);
  EXPECT_EQ(m.counters().wait_ns, 110);
  EXPECT_EQ(m.counters().step_ns, 250);
}

TEST(ConsumerMeterTest, TheEndOfTheStreamIsNotABatch) {
  ConsumerMeter m;
  m.Before(0);
  m.After(5, 0);
  EXPECT_EQ(m.counters().batches, 0);
  EXPECT_EQ(m.counters().wait_ns, 5);
}

TEST(WindowTest, RatesOverTheWindow) {
  ConsumerCounters from{/*batches=*/2, /*samples=*/16, /*wait_ns=*/1'000'000'000,
                        /*step_ns=*/0, /*steps=*/1};
  ConsumerCounters to{/*batches=*/12, /*samples=*/96, /*wait_ns=*/1'500'000'000,
                      /*step_ns=*/200'000'000, /*steps=*/11};
  const ConsumerWindow w = Window(from, to, /*wall_s=*/1.0);
  EXPECT_EQ(w.batches, 10);
  EXPECT_EQ(w.samples, 80);
  EXPECT_DOUBLE_EQ(w.samples_per_s(), 80);
  EXPECT_DOUBLE_EQ(w.wait_s, 0.5);
  EXPECT_DOUBLE_EQ(w.step_s, 0.02);  // 200 ms over 10 steps
  // 0.5 s waiting against 10 x 20 ms stepping.
  EXPECT_NEAR(w.stall_fraction(), 0.5 / 0.7, 1e-9);
  EXPECT_EQ(Window(to, to, 1.0).stall_fraction(), 0);

  const policy::ConsumerProfile c = ConsumerFrom(w, /*batch_size=*/8);
  EXPECT_DOUBLE_EQ(c.step_s, 0.02);
  EXPECT_EQ(c.batch_size, 8);
  EXPECT_DOUBLE_EQ(c.DemandSamplesPerS(), 400);
}

pipeline::PipelineSpec TwoOpSpec(int batch) {
  pipeline::PipelineSpec spec;
  spec.ops = {{"read_file", {}}, {"decode_jpeg", {}}};
  spec.batch.size = batch;
  return spec;
}

pipeline::OpStatsSnapshot Op(const std::string& name, int64_t samples, int64_t cpu_ns,
                             int64_t bytes) {
  pipeline::OpStatsSnapshot s;
  s.name = name;
  s.samples = samples;
  s.cpu_ns = cpu_ns;
  s.bytes_out = bytes;
  return s;
}

TEST(CostsFromReportTest, PerOpCostsAndTheReadBytes) {
  const std::vector<pipeline::OpStatsSnapshot> ops = {Op("read_file", 100, 2'000'000, 5'000'000),
                                                      Op("decode_jpeg", 100, 90'000'000,
                                                         24'000'000)};
  const policy::Costs c = CostsFromReport(TwoOpSpec(8), ops, {});
  ASSERT_EQ(c.ops.size(), 2u);
  EXPECT_EQ(c.ops[0].name, "read_file");
  EXPECT_EQ(c.ops[1].position, 1);
  EXPECT_DOUBLE_EQ(c.ops[0].cpu_s_per_sample, 20e-6);
  EXPECT_DOUBLE_EQ(c.ops[1].cpu_s_per_sample, 900e-6);
  EXPECT_DOUBLE_EQ(c.ops[1].bytes_out_per_sample, 240'000);
  EXPECT_DOUBLE_EQ(c.raw_bytes_per_sample, 50'000);  // what read_file produced
  EXPECT_GT(c.batch_cpu_s_per_sample, 0);
  ASSERT_TRUE(c.CostOf(Codec::kNone).has_value());
  EXPECT_GT(c.CostOf(Codec::kNone)->trainer_cpu_s_per_byte, 0);
  EXPECT_TRUE(policy::ValidateProfile(policy::Profile{c, {}, {}, 1}).ok());
  // No batch: no batching cost.
  EXPECT_EQ(CostsFromReport(TwoOpSpec(0), ops, {}).batch_cpu_s_per_sample, 0);
}

TEST(CostsFromReportTest, UnmeasuredOpsKeepTheFallbackOrTheWorkersFigures) {
  policy::Costs old = CostsFromReport(
      TwoOpSpec(8), {Op("read_file", 10, 100'000, 500'000), Op("decode_jpeg", 10, 1'000'000, 9)},
      {});
  // decode_jpeg ran only on a worker this time.
  const std::vector<pipeline::OpStatsSnapshot> local = {Op("read_file", 10, 300'000, 500'000),
                                                        Op("decode_jpeg", 0, 0, 0)};
  policy::Costs kept = CostsFromReport(TwoOpSpec(8), local, {}, &old);
  EXPECT_DOUBLE_EQ(kept.ops[0].cpu_s_per_sample, 30e-6);   // fresh
  EXPECT_DOUBLE_EQ(kept.ops[1].cpu_s_per_sample, 100e-6);  // the fallback's

  WorkerReport w;
  w.address = "w";
  w.metrics = {rpc::WorkerOpMetrics{"decode_jpeg", 1, 20, 4'000'000, 200, 0}};
  policy::Costs from_worker = CostsFromReport(TwoOpSpec(8), local, {w});
  EXPECT_DOUBLE_EQ(from_worker.ops[1].cpu_s_per_sample, 200e-6);
  EXPECT_DOUBLE_EQ(from_worker.ops[1].bytes_out_per_sample, 10);
}

TEST(CostsFromReportTest, ReceiveCostFromTheStreamsCounters) {
  WorkerReport w;
  w.address = "w";
  w.samples = 1000;
  w.bytes_received = 100 << 20;
  CostDefaults d;
  // Per-sample part at the default, the rest spread over the bytes: 2 ns per byte.
  const double per_byte = 2e-9;
  w.read_cpu_ns = static_cast<int64_t>((1000 * d.recv_cpu_s_per_sample +
                                        per_byte * static_cast<double>(w.bytes_received)) *
                                       1e9);
  const policy::Costs c = CostsFromReport(TwoOpSpec(8), {}, {w});
  EXPECT_NEAR(c.CostOf(Codec::kNone)->trainer_cpu_s_per_byte, per_byte, 1e-11);
}

// A codec's entry is the receive of a byte plus its decompression: against a new receive
// cost it keeps its own part. A fallback fitted per element (0 a byte) goes back to the
// default receive cost, and lz4 (0.2 ns a byte of its own) goes up with it.
TEST(CostsFromReportTest, CodecsKeepTheirOwnPartOverTheReceiveCost) {
  policy::Costs fallback;
  fallback.codecs = {policy::CodecCost{Codec::kNone, 1, 0, 0},
                     policy::CodecCost{Codec::kLz4, 1.1, 1e-9, 0.2e-9, 3}};
  const policy::Costs c = CostsFromReport(TwoOpSpec(8), {}, {}, &fallback);
  const double receive = CostDefaults().recv_cpu_s_per_byte;
  EXPECT_DOUBLE_EQ(c.CostOf(Codec::kNone)->trainer_cpu_s_per_byte, receive);
  const std::optional<policy::CodecCost> lz4 = c.CostAt(Codec::kLz4, 3, 4);
  ASSERT_TRUE(lz4.has_value());
  EXPECT_DOUBLE_EQ(lz4->trainer_cpu_s_per_byte, receive + 0.2e-9);
  EXPECT_EQ(lz4->measured_at_cut, 3);
  EXPECT_DOUBLE_EQ(lz4->ratio, 1.1);
}

TEST(OpCostsOfTest, LeavesOutOpsThatRanNothing) {
  const std::vector<policy::OpCost> local =
      OpCostsOf(std::vector<pipeline::OpStatsSnapshot>{Op("a", 0, 0, 0), Op("b", 4, 4000, 40)});
  ASSERT_EQ(local.size(), 1u);
  EXPECT_EQ(local[0].position, 1);
  EXPECT_DOUBLE_EQ(local[0].cpu_s_per_sample, 1e-6);
  EXPECT_DOUBLE_EQ(local[0].bytes_out_per_sample, 10);
  const std::vector<policy::OpCost> remote = OpCostsOf(std::vector<rpc::WorkerOpMetrics>{
      rpc::WorkerOpMetrics{"a", 0, 0, 0, 0, 0}, rpc::WorkerOpMetrics{"b", 3, 2, 2000, 8, 0}});
  ASSERT_EQ(remote.size(), 1u);
  EXPECT_EQ(remote[0].position, 3);
  EXPECT_DOUBLE_EQ(remote[0].cpu_s_per_sample, 1e-6);
}

TEST(MeasureCodecsTest, RatioAndCostsOfLz4AndZstd) {
  Element batch;
  batch.tensors.push_back(Tensor::Zeros(DType::kU8, {64, 1024}));  // compresses very well
  const std::vector<policy::CodecCost> codecs = MeasureCodecs(batch, /*recv=*/1e-9);
  ASSERT_EQ(codecs.size(), 2u);
  EXPECT_EQ(codecs[0].codec, Codec::kLz4);
  EXPECT_EQ(codecs[1].codec, Codec::kZstd);
  for (const policy::CodecCost& c : codecs) {
    EXPECT_GT(c.ratio, 10);
    EXPECT_GE(c.worker_cpu_s_per_byte, 0);
    EXPECT_GE(c.trainer_cpu_s_per_byte, 1e-9);
  }
  Element tiny;
  tiny.tensors.push_back(Tensor::Zeros(DType::kU8, {16}));
  EXPECT_TRUE(MeasureCodecs(tiny, 1e-9).empty());
}

// Each cut before the last gets its own reading, from samples run through the ops: the
// file's bytes (cut 1) are a byte string and have none, the decoded pixels (cut 2) and the
// flipped ones (cut 3) do, the output (cut 4) is MeasureCodecs' on the batch.
TEST(MeasureCodecsTest, AtEachCutBeforeTheLastFromSamplesRunThroughTheOps) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sluice-codecs-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 3; ++i) {
    // A flat image: its pixels compress very well, its JPEG does not shrink much.
    std::ofstream(dir / ("flat" + std::to_string(i) + ".jpg"), std::ios::binary)
        << ops::test::EncodeJpeg(Tensor::Zeros(DType::kU8, {96, 128, 3}));
  }
  pipeline::PipelineSpec spec;
  spec.source.files = {(dir / "*.jpg").string()};
  spec.ops = {{"read_file", {}}, {"decode_jpeg", {}}, {"random_flip", {}}, {"random_flip", {}}};
  auto files = pipeline::ResolveSource(spec.source);
  ASSERT_TRUE(files.ok()) << files.status();
  const auto shared = std::make_shared<const pipeline::SourceFiles>(std::move(*files));
  const std::vector<policy::CodecCost> codecs = MeasureCodecsAtCuts(spec, shared, 1e-9);
  ASSERT_EQ(codecs.size(), 4u);  // lz4 and zstd at cuts 2 and 3
  for (size_t i = 0; i < codecs.size(); ++i) {
    EXPECT_EQ(codecs[i].measured_at_cut, i < 2 ? 2 : 3);
    EXPECT_EQ(codecs[i].codec, i % 2 == 0 ? Codec::kLz4 : Codec::kZstd);
    EXPECT_GT(codecs[i].ratio, 10);
    EXPECT_GE(codecs[i].trainer_cpu_s_per_byte, 1e-9);
  }
  // A file an op cannot read ends the reading with what was read before it: nothing here.
  std::ofstream(dir / "flat0.jpg", std::ios::binary) << "not a jpeg";
  EXPECT_TRUE(MeasureCodecsAtCuts(spec, shared, 1e-9).empty());
  // Ops that cannot be built, or a pipeline of one op, have no cut before the last.
  pipeline::PipelineSpec unknown = spec;
  unknown.ops[2].name = "no_such_op";
  EXPECT_TRUE(MeasureCodecsAtCuts(unknown, shared, 1e-9).empty());
  pipeline::PipelineSpec one = spec;
  one.ops.resize(1);
  EXPECT_TRUE(MeasureCodecsAtCuts(one, shared, 1e-9).empty());
  std::filesystem::remove_all(dir);
}

TEST(WorkerFromProbeTest, BudgetLinkAndRtt) {
  rpc::LinkProbe p;
  p.info.address = "10.0.0.2:7000";
  p.info.cpu_budget = 3.5;
  p.bytes_per_s = 1.25e8;
  p.rtt_s = 0.0004;
  const policy::WorkerProfile w = WorkerFromProbe(p);
  EXPECT_EQ(w.address, "10.0.0.2:7000");
  EXPECT_DOUBLE_EQ(w.cpu_budget, 3.5);
  EXPECT_DOUBLE_EQ(w.link_bytes_per_s, 1.25e8);
  EXPECT_DOUBLE_EQ(w.rtt_s, 0.0004);
  EXPECT_TRUE(w.has_storage);  // not asked: shared storage assumed
  EXPECT_DOUBLE_EQ(w.storage_bytes_per_s, 0);
  // A worker that cannot read the data, and one whose reads are limited.
  p.can_read = false;
  EXPECT_FALSE(WorkerFromProbe(p).has_storage);
  p.can_read = true;
  p.read_limit_bytes_per_s = 2e6;
  EXPECT_TRUE(WorkerFromProbe(p).has_storage);
  EXPECT_DOUBLE_EQ(WorkerFromProbe(p).storage_bytes_per_s, 2e6);
}

// Costs known to the fit: five ops (0.4 ms in all), batching 0.1 ms a sample, receiving an
// uncompressed byte 2 ns, a received sample 5 us; no engine cost per local sample.
policy::Costs KnownCosts() {
  policy::Costs c;
  for (int i = 0; i < 5; ++i) c.ops.push_back({"op", i, 0.08e-3, 1000});
  c.batch_cpu_s_per_sample = 0.1e-3;
  c.recv_cpu_s_per_sample = 5e-6;
  c.codecs = {{policy::Codec::kNone, 1.0, 0, 2e-9}};
  return c;
}

// 1000 samples out, 900 from a worker, 100 MB received; the process took 1.0 s of CPU,
// its ops 0.4 s.
ReceiveWindow NineHundredOfAThousandReceived() {
  ReceiveWindow w;
  w.process_cpu_s = 1.0;
  w.op_cpu_s = 0.4;
  w.samples_out = 1000;
  w.remote_samples = 900;
  w.bytes = 100e6;
  return w;
}

// Batching 0.1 ms a sample (0.1 s) besides the ops: 0.5 s of the process's 1.0 s is receiving.
TEST(FitReceiveCostTest, PutsTheRestOnTheParameterTheCutTellsApart) {
  ReceiveWindow w = NineHundredOfAThousandReceived();
  policy::Costs known = KnownCosts();
  // Element-wise cut: bytes at the known 2 ns (0.2 s), the other 0.3 s over 900 samples.
  std::optional<ReceiveFit> fit = FitReceiveCost(w, 3, ReadMode::kRemoteRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_FALSE(fit->per_byte.has_value());
  EXPECT_NEAR(*fit->per_element, 0.3 / 900, 1e-12);
  // After batching: 900 / 64 elements at the known 100 us, the rest over the bytes.
  known.recv_cpu_s_per_sample = 100e-6;
  fit = FitReceiveCost(w, policy::kCutAfterBatch, ReadMode::kRemoteRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_FALSE(fit->per_element.has_value());
  EXPECT_NEAR(*fit->per_byte, (0.5 - 900.0 / 64 * 100e-6) / 100e6, 1e-15);
  // Too little received: nothing to say. Nonsense (more ops than process) is clamped.
  w.bytes = 1e6;
  EXPECT_FALSE(FitReceiveCost(w, 3, ReadMode::kRemoteRead, 64, known).has_value());
  w.bytes = 100e6;
  w.op_cpu_s = 5;
  fit = FitReceiveCost(w, 3, ReadMode::kRemoteRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_FALSE(fit->per_element.has_value());
  EXPECT_DOUBLE_EQ(*fit->per_byte, 0.05e-9);
}

// image-7to21 at cut 4 on the bulk channel, as bench/receive_cost.py measured it: a 147 KB
// sample costs the trainer 64 us to receive, where the typical 0.6 ns a byte alone charges
// 88 us. Fitted per element with the bytes at 0.6 ns, the rest is negative and the model kept
// charging 88 us (the planner then saw a half-CPU trainer full at ~4,000 received samples/s
// and gave it no local samples). The window contradicts the rate per byte, so that is fitted:
// each sample pays the known 5 us per element, the bytes the other 59 us.
TEST(FitReceiveCostTest, BytesDearerThanTheWholeWindowRefitTheRatePerByte) {
  policy::Costs known = KnownCosts();
  known.codecs = {{policy::Codec::kNone, 1.0, 0, 0.6e-9}};
  ReceiveWindow w;
  w.remote_samples = 4000;
  w.samples_out = 4000;
  w.bytes = 4000 * 147e3;
  w.op_cpu_s = 0.2;  // the suffix's ops
  w.process_cpu_s = w.op_cpu_s + 4000 * known.batch_cpu_s_per_sample + 4000 * 64e-6;
  std::optional<ReceiveFit> fit = FitReceiveCost(w, 4, ReadMode::kRemoteRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_FALSE(fit->per_element.has_value());
  ASSERT_TRUE(fit->per_byte.has_value());
  EXPECT_NEAR(*fit->per_byte, (64e-6 - 5e-6) / 147e3, 1e-15);
  // What a received sample costs at the fitted figures is what the window measured.
  EXPECT_NEAR(known.recv_cpu_s_per_sample + 147e3 * *fit->per_byte, 64e-6, 1e-12);
  // Where the bytes leave room for it, the rest stays per element (0.6 ns a byte: 88 us).
  w.process_cpu_s += 4000 * 40e-6;  // 104 us a sample
  fit = FitReceiveCost(w, 4, ReadMode::kRemoteRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_FALSE(fit->per_byte.has_value());
  EXPECT_NEAR(*fit->per_element, 104e-6 - 147e3 * 0.6e-9, 1e-12);
}

// The engine's cost per local sample is not receiving: with 0.1 ms of it per sample (0.02 ms
// per stage), the 100 local samples took 10 ms and the 900 offloaded at cut 3 ran 2 stages
// here (36 ms); the rest, 0.3 s - 46 ms, is the 900 samples' receiving.
TEST(FitReceiveCostTest, TheEngineCostOfLocalStagesIsNotReceiving) {
  ReceiveWindow w = NineHundredOfAThousandReceived();
  policy::Costs known = KnownCosts();
  known.local_cpu_s_per_sample = 0.1e-3;
  std::optional<ReceiveFit> fit = FitReceiveCost(w, 3, ReadMode::kRemoteRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(*fit->per_element, (0.3 - 100 * 0.1e-3 - 900 * 0.04e-3) / 900, 1e-12);
  // In local_read the offloaded samples also run read_file's stage here (0.02 ms each).
  fit = FitReceiveCost(w, 3, ReadMode::kLocalRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(*fit->per_element, (0.3 - 100 * 0.1e-3 - 900 * 0.06e-3) / 900, 1e-12);
  // After batching the offloaded samples run no stage here: only the local ones' is taken.
  known.recv_cpu_s_per_sample = 0;
  fit = FitReceiveCost(w, policy::kCutAfterBatch, ReadMode::kRemoteRead, 64, known);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(*fit->per_byte, (0.5 - 100 * 0.1e-3) / 100e6, 1e-15);
}

// The measuring window's op costs leave out the first batch: its ops cost several times their
// steady figure (a cold run of the randomized suite's random-01: normalize 383 us a sample in
// the first batch, 108 us over the window after it), and 64 of ~1,000 samples at that cost
// move the op's mean by a tenth.
TEST(OpStatsSinceTest, TheWindowsCountersWithoutTheStartUpBatch) {
  const std::vector<pipeline::OpStatsSnapshot> was = {Op("decode", 64, 64 * 300'000, 64 * 100),
                                                      Op("normalize", 64, 64 * 383'000, 64 * 600)};
  const std::vector<pipeline::OpStatsSnapshot> now = {
      Op("decode", 976, 64 * 300'000 + 912 * 290'000, 976 * 100),
      Op("normalize", 976, 64 * 383'000 + 912 * 108'000, 976 * 600)};
  const std::vector<policy::OpCost> costs = OpCostsOf(OpStatsSince(was, now));
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_NEAR(costs[0].cpu_s_per_sample, 290e-6, 1e-12);
  EXPECT_NEAR(costs[1].cpu_s_per_sample, 108e-6, 1e-12);
  EXPECT_NEAR(costs[1].bytes_out_per_sample, 600, 1e-9);
  // Since the start, the first batch had read normalize 18 us a sample dearer.
  EXPECT_GT(OpCostsOf(now)[1].cpu_s_per_sample, 125e-6);

  // Under kMinFitSamples in the window: the counters since the start stand.
  const std::vector<pipeline::OpStatsSnapshot> soon = {
      Op("decode", 64 + 100, 64 * 300'000 + 100 * 290'000, 164 * 100),
      Op("normalize", 64 + 100, 64 * 383'000 + 100 * 108'000, 164 * 600)};
  const std::vector<pipeline::OpStatsSnapshot> kept = OpStatsSince(was, soon);
  EXPECT_EQ(kept[0].samples, 164);
  EXPECT_EQ(kept[1].cpu_ns, soon[1].cpu_ns);
  // A snapshot of other ops (another Loader's) is not subtracted.
  const std::vector<pipeline::OpStatsSnapshot> other = {Op("read_file", 10, 10, 10)};
  EXPECT_EQ(OpStatsSince(other, now)[0].samples, 976);
}

// All-local: the process's CPU net of the ops and batching, per sample handed out.
TEST(FitLocalCostTest, TheProcessCpuNetOfOpsAndBatchingPerSample) {
  ReceiveWindow w;
  w.process_cpu_s = 1.0;
  w.op_cpu_s = 0.6;
  w.samples_out = 1000;  // 0.4 ms a sample beyond the ops
  std::optional<LocalFit> fit = FitLocalCost(w, 0.1e-3);
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->batch_cpu_s_per_sample, 0.1e-3, 1e-12);
  EXPECT_NEAR(fit->local_cpu_s_per_sample, 0.3e-3, 1e-12);
  // A batching figure over what the window holds yields to it; the engine's share is 0.
  fit = FitLocalCost(w, 1e-3);
  EXPECT_NEAR(fit->batch_cpu_s_per_sample, 0.4e-3, 1e-12);
  EXPECT_DOUBLE_EQ(fit->local_cpu_s_per_sample, 0);
  // Never negative (ops measured on threads whose CPU the process clock read before).
  w.op_cpu_s = 1.2;
  fit = FitLocalCost(w, 0.1e-3);
  EXPECT_DOUBLE_EQ(fit->batch_cpu_s_per_sample, 0);
  EXPECT_DOUBLE_EQ(fit->local_cpu_s_per_sample, 0);
  w.samples_out = 100;  // too few samples to say
  EXPECT_FALSE(FitLocalCost(w, 0).has_value());
}

TEST(StorageCheckPathTest, FirstMatchWhenTheWorkerWouldReadTheFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sluice-check-" + std::to_string(getpid()));
  fs::create_directories(dir / "a");
  std::ofstream(dir / "a" / "1.jpg") << "x";
  pipeline::PipelineSpec spec;
  spec.source.files = {(dir / "**" / "*.jpg").string()};
  spec.ops = {{"read_file", {}}};
  EXPECT_EQ(StorageCheckPath(spec), (dir / "a" / "1.jpg").string());
  spec.ops = {{"decode_jpeg", {}}};  // nothing reads files: nothing to ask
  EXPECT_EQ(StorageCheckPath(spec), "");
  spec.ops = {{"read_file", {}}};
  spec.source.files = {(dir / "*.png").string()};  // no match
  EXPECT_EQ(StorageCheckPath(spec), "");
  fs::remove_all(dir);
}

TEST(TrainerCpuBudgetTest, NoMoreThanTheThreads) {
  EXPECT_LE(TrainerCpuBudget(1), 1.0);
  EXPECT_GT(TrainerCpuBudget(1), 0.0);
  EXPECT_GE(TrainerCpuBudget(0), TrainerCpuBudget(1));
}

}  // namespace
}  // namespace sluice::runtime
