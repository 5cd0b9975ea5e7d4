#include "sluice/runtime/profiler.h"

#include <algorithm>
#include <mutex>
#include <thread>

#include "sluice/core/clock.h"
#include "sluice/core/cpu_budget.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/map.h"
#include "sluice/pipeline/source.h"
#include "sluice/policy/controller.h"
#include "sluice/rpc/compress.h"

namespace sluice::runtime {

double ConsumerWindow::stall_fraction() const {
  const double busy = wait_s + step_s * static_cast<double>(batches);
  if (!(busy > 0)) return 0;
  return std::clamp(wait_s / busy, 0.0, 1.0);
}

ConsumerWindow Window(const ConsumerCounters& from, const ConsumerCounters& to, double wall_s) {
  ConsumerWindow w;
  w.wall_s = wall_s;
  w.batches = to.batches - from.batches;
  w.samples = to.samples - from.samples;
  w.wait_s = (to.wait_ns - from.wait_ns) / 1e9;
  const int64_t steps = to.steps - from.steps;
  w.step_s = steps > 0 ? (to.step_ns - from.step_ns) / 1e9 / static_cast<double>(steps) : 0;
  return w;
}

void ConsumerMeter::Before(int64_t now_ns) {
  if (last_return_ >= 0) {
    const int64_t step = now_ns - last_return_;
    counters_.step_ns += step;
    ++counters_.steps;
    if (min_step_ns_ == 0 || step < min_step_ns_) min_step_ns_ = step;
  }
  call_start_ = now_ns;
}

int64_t ConsumerMeter::TakeMinStepNs() {
  const int64_t min = min_step_ns_;
  min_step_ns_ = 0;
  return min;
}

void ConsumerMeter::After(int64_t now_ns, int64_t samples) {
  counters_.wait_ns += now_ns - call_start_;
  if (samples > 0) {
    ++counters_.batches;
    counters_.samples += samples;
  }
  last_return_ = now_ns;
}

void ConsumerMeter::ExtendWait(int64_t now_ns) {
  if (last_return_ < 0) return;
  counters_.wait_ns += now_ns - last_return_;
  last_return_ = now_ns;
}

void ConsumerMeter::Exclude(int64_t now_ns) {
  if (last_return_ >= 0) last_return_ = now_ns;
}

std::vector<policy::OpCost> OpCostsOf(const std::vector<pipeline::OpStatsSnapshot>& ops) {
  std::vector<policy::OpCost> out;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].samples <= 0) continue;
    policy::OpCost c;
    c.name = ops[i].name;
    c.position = static_cast<int>(i);
    c.cpu_s_per_sample = ops[i].cpu_ns / 1e9 / static_cast<double>(ops[i].samples);
    c.bytes_out_per_sample = static_cast<double>(ops[i].bytes_out) / ops[i].samples;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<policy::OpCost> OpCostsOf(const std::vector<rpc::WorkerOpMetrics>& metrics) {
  std::vector<policy::OpCost> out;
  for (const rpc::WorkerOpMetrics& m : metrics) {
    if (m.samples <= 0 || m.position < 0) continue;
    policy::OpCost c;
    c.name = m.name;
    c.position = m.position;
    c.cpu_s_per_sample = m.cpu_ns / 1e9 / static_cast<double>(m.samples);
    c.bytes_out_per_sample = static_cast<double>(m.bytes_out) / m.samples;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<pipeline::OpStatsSnapshot> OpStatsSince(
    const std::vector<pipeline::OpStatsSnapshot>& was,
    const std::vector<pipeline::OpStatsSnapshot>& now) {
  std::vector<pipeline::OpStatsSnapshot> out = now;
  for (size_t i = 0; i < out.size() && i < was.size(); ++i) {
    pipeline::OpStatsSnapshot& op = out[i];
    const pipeline::OpStatsSnapshot& before = was[i];
    if (before.name != op.name || op.samples - before.samples < kMinFitSamples) continue;
    op.samples -= before.samples;
    op.cpu_ns -= before.cpu_ns;
    op.bytes_out -= before.bytes_out;
    op.errors -= before.errors;
  }
  return out;
}

policy::Costs CostsFromReport(const pipeline::PipelineSpec& spec,
                              const std::vector<pipeline::OpStatsSnapshot>& local_ops,
                              const std::vector<WorkerReport>& workers,
                              const policy::Costs* fallback, const CostDefaults& defaults) {
  policy::Costs costs;
  const int n = static_cast<int>(spec.ops.size());
  costs.ops.resize(n);
  for (int i = 0; i < n; ++i) {
    policy::OpCost& c = costs.ops[i];
    c.name = spec.ops[i].name;
    c.position = i;
    if (fallback != nullptr && i < static_cast<int>(fallback->ops.size())) {
      c.cpu_s_per_sample = fallback->ops[i].cpu_s_per_sample;
      c.bytes_out_per_sample = fallback->ops[i].bytes_out_per_sample;
    }
  }
  for (const policy::OpCost& m : OpCostsOf(local_ops)) {
    if (m.position >= n) continue;
    costs.ops[m.position].cpu_s_per_sample = m.cpu_s_per_sample;
    costs.ops[m.position].bytes_out_per_sample = m.bytes_out_per_sample;
  }
  // Ops that ran nowhere here (all offloaded): take the workers' figures when they have them.
  for (const WorkerReport& w : workers) {
    for (const policy::OpCost& m : OpCostsOf(w.metrics)) {
      if (m.position >= n) continue;
      policy::OpCost& c = costs.ops[m.position];
      if (c.cpu_s_per_sample <= 0) c.cpu_s_per_sample = m.cpu_s_per_sample;
      if (c.bytes_out_per_sample <= 0) c.bytes_out_per_sample = m.bytes_out_per_sample;
    }
  }
  costs.source_bytes_per_sample = fallback != nullptr && fallback->source_bytes_per_sample > 0
                                      ? fallback->source_bytes_per_sample
                                      : defaults.source_bytes_per_sample;
  if (n > 0 && pipeline::FirstOpReadsSample(spec)) {
    costs.raw_bytes_per_sample = costs.ops[0].bytes_out_per_sample;
  } else if (fallback != nullptr) {
    costs.raw_bytes_per_sample = fallback->raw_bytes_per_sample;
  }
  // Batching: as fitted before (FitLocalCost, carried in `fallback`), else the typical figure.
  const double last_bytes = n > 0 ? costs.ops[n - 1].bytes_out_per_sample : 0;
  costs.batch_cpu_s_per_sample =
      spec.batch.size <= 0  ? 0
      : fallback != nullptr ? fallback->batch_cpu_s_per_sample
                            : last_bytes * defaults.batch_cpu_s_per_byte;
  // Measured over a whole all-local window only (FitLocalCost), not from a report.
  costs.local_cpu_s_per_sample = fallback != nullptr ? fallback->local_cpu_s_per_sample : 0;
  costs.send_cpu_s_per_byte = fallback != nullptr && fallback->send_cpu_s_per_byte > 0
                                  ? fallback->send_cpu_s_per_byte
                                  : defaults.send_cpu_s_per_byte;

  // Receiving: the streams' CPU over the bytes they received (uncompressed streams only: the
  // bytes counted are those on the wire).
  int64_t bytes = 0;
  int64_t cpu_ns = 0;
  int64_t samples = 0;
  for (const WorkerReport& w : workers) {
    bytes += w.bytes_received;
    cpu_ns += w.read_cpu_ns + w.decode_cpu_ns;
    samples += w.samples;
  }
  policy::CodecCost none;
  none.codec = Codec::kNone;
  none.ratio = 1;
  none.trainer_cpu_s_per_byte = defaults.recv_cpu_s_per_byte;
  costs.recv_cpu_s_per_sample = defaults.recv_cpu_s_per_sample;
  if (fallback != nullptr) {
    if (std::optional<policy::CodecCost> known = fallback->CostOf(Codec::kNone)) {
      if (known->trainer_cpu_s_per_byte > 0) none.trainer_cpu_s_per_byte =
          known->trainer_cpu_s_per_byte;
    }
    if (fallback->recv_cpu_s_per_sample > 0) {
      costs.recv_cpu_s_per_sample = fallback->recv_cpu_s_per_sample;
      costs.recv_fit_bytes_per_element = fallback->recv_fit_bytes_per_element;
    }
  }
  if (bytes > (1 << 20) && samples > 0) {
    // What scales with bytes, and the rest per sample: split at the default per-sample cost.
    const double per_byte =
        std::max(0.0, (cpu_ns / 1e9 - samples * defaults.recv_cpu_s_per_sample) / bytes);
    if (per_byte > 0) none.trainer_cpu_s_per_byte = per_byte;
  }
  if (fallback == nullptr) {
    costs.codecs.push_back(none);
    return costs;
  }
  // A codec's entry is the receive of a byte plus its own decompression, read against the
  // fallback's receive cost: set against the one chosen here, each keeps its own part (as a
  // receive reading does, policy::SetReceiveCost). Carried as they were, a fallback whose
  // receive was fitted per element (0 a byte) left lz4 at its decompression alone while the
  // receive went back to the default, and lz4 read cheaper to take in than no codec.
  const double receive = none.trainer_cpu_s_per_byte;
  none.trainer_cpu_s_per_byte = fallback->CostOf(Codec::kNone)->trainer_cpu_s_per_byte;
  costs.codecs.push_back(none);
  for (const policy::CodecCost& c : fallback->codecs) {
    if (c.codec != Codec::kNone) costs.codecs.push_back(c);
  }
  policy::SetReceiveCost(&costs, receive);
  return costs;
}

namespace {

// Appends the bytes of `element`'s tensors (byte strings left out) to `raw`, up to `limit`.
void AppendTensorBytes(const Element& element, size_t limit, std::string* raw) {
  for (const Tensor& t : element.tensors) {
    if (t.dtype() == DType::kBytes || raw->size() >= limit) continue;
    const std::string_view b = t.bytes();
    raw->append(b.substr(0, limit - raw->size()));
  }
}

// lz4's and zstd's ratio and CPU per byte on `raw`, compressed and decompressed once here,
// marked as measured at `cut`. Empty for under 4 KB.
std::vector<policy::CodecCost> CodecCostsOf(const std::string& raw, int cut,
                                            double recv_cpu_s_per_byte) {
  std::vector<policy::CodecCost> out;
  if (raw.size() < 4096) return out;
  for (Codec codec : {Codec::kLz4, Codec::kZstd}) {
    const int64_t t0 = ThreadCpuNanos();
    StatusOr<std::string> packed = rpc::Compress(codec, raw);
    const int64_t t1 = ThreadCpuNanos();
    if (!packed.ok() || packed->empty()) continue;
    std::string back(raw.size(), '\0');
    Status unpacked = rpc::Decompress(codec, *packed, reinterpret_cast<uint8_t*>(back.data()),
                                      back.size());
    const int64_t t2 = ThreadCpuNanos();
    if (!unpacked.ok()) continue;
    policy::CodecCost c;
    c.codec = codec;
    c.ratio = std::max(1.0, static_cast<double>(raw.size()) / packed->size());
    c.measured_at_cut = cut;
    const double n = static_cast<double>(raw.size());
    c.worker_cpu_s_per_byte = (t1 - t0) / 1e9 / n;
    c.trainer_cpu_s_per_byte = recv_cpu_s_per_byte + (t2 - t1) / 1e9 / n;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::vector<policy::CodecCost> MeasureCodecs(const Element& batch, double recv_cpu_s_per_byte) {
  constexpr size_t kMaxBytes = 4 << 20;  // enough for a ratio, cheap to compress
  std::string raw;
  AppendTensorBytes(batch, kMaxBytes, &raw);
  // The output: holds after batching and at the last cut only.
  return CodecCostsOf(raw, kCutAfterBatch, recv_cpu_s_per_byte);
}

std::vector<policy::CodecCost> MeasureCodecsAtCuts(
    const pipeline::PipelineSpec& spec, std::shared_ptr<const pipeline::SourceFiles> files,
    double recv_cpu_s_per_byte, int samples, const ops::Registry& registry) {
  // A ratio from a megabyte is within a few percent of the whole stream's for these codecs
  // (their windows are 64 KiB and a few MiB), and compressing it costs a few milliseconds.
  constexpr size_t kMaxBytes = 1 << 20;
  std::vector<policy::CodecCost> out;
  const int n = static_cast<int>(spec.ops.size());
  if (n < 2 || files == nullptr || samples < 1) return out;
  StatusOr<pipeline::BuiltOps> built =
      pipeline::BuildOps(spec.ops, spec.source.seed, registry,
                         pipeline::SourceSchema(spec.source), 0,
                         pipeline::LocalEnv(spec.options.limits));
  if (!built.ok()) return out;
  const std::vector<pipeline::MapStage> stages = pipeline::MakeStages(*built, nullptr);
  pipeline::SourceOptions so;
  so.seed = spec.source.seed;
  so.take = samples;
  so.epochs = 1;
  so.with_label = pipeline::HasLabel(spec.source);
  pipeline::SourceIterator source(std::move(files), std::move(so));
  // raw[k]: the data crossing cut k (the output of ops[k - 1]), k in 1..n-1.
  std::vector<std::string> raw(static_cast<size_t>(n));
  for (int i = 0; i < samples; ++i) {
    Element e;
    bool end = false;
    if (!source.GetNext(&e, &end).ok() || end) break;
    bool failed = false;
    for (int k = 1; k < n && !failed; ++k) {
      failed = !pipeline::ApplyStages({stages[static_cast<size_t>(k - 1)]}, e).ok();
      if (!failed) AppendTensorBytes(e, kMaxBytes, &raw[static_cast<size_t>(k)]);
    }
    if (failed) break;
  }
  for (int k = 1; k < n; ++k) {
    std::vector<policy::CodecCost> at =
        CodecCostsOf(raw[static_cast<size_t>(k)], k, recv_cpu_s_per_byte);
    out.insert(out.end(), at.begin(), at.end());
  }
  return out;
}

policy::ConsumerProfile ConsumerFrom(const ConsumerWindow& window, int batch_size) {
  policy::ConsumerProfile c;
  c.batch_size = std::max(1, batch_size);
  c.step_s = window.step_s;
  c.stall_fraction = window.stall_fraction();
  return c;
}

double EntitledCpu(const rpc::WorkerInfo& info, double weight) {
  if (!(weight > 0)) weight = 1;
  return info.cpu_budget * weight / (std::max(0.0, info.active_session_weight) + weight);
}

policy::WorkerProfile WorkerFromProbe(const rpc::LinkProbe& probe, double weight) {
  policy::WorkerProfile w;
  w.address = probe.info.address;
  w.cpu_budget = EntitledCpu(probe.info, weight);
  w.link_bytes_per_s = probe.bytes_per_s;
  w.rtt_s = probe.rtt_s;
  w.has_storage = probe.can_read.value_or(true);  // not asked: assume shared storage
  // Its storage's rate: its --read-limit, or what its URL store measured, the lower of the
  // two when both are known (0: neither limits it).
  w.storage_bytes_per_s = probe.read_limit_bytes_per_s;
  if (probe.store_bytes_per_s > 0 &&
      (w.storage_bytes_per_s <= 0 || probe.store_bytes_per_s < w.storage_bytes_per_s)) {
    w.storage_bytes_per_s = probe.store_bytes_per_s;
  }
  return w;
}

std::string StorageCheckPath(const pipeline::PipelineSpec& spec) {
  if (!pipeline::FirstOpReadsSample(spec)) return "";
  // With shards, the first shard (a path or a URL): a worker that can read it reads the
  // members itself.
  StatusOr<std::vector<std::string>> files = std::vector<std::string>();
  if (!spec.source.shards.empty()) {
    files = pipeline::ShardPaths(spec.source);
  } else if (!spec.source.files.empty()) {
    files = pipeline::ExpandGlob(spec.source.files[0]);
  }
  return files.ok() && !files->empty() ? files->front() : "";
}

std::vector<std::optional<rpc::LinkProbe>> ProbeWorkers(
    rpc::Connector& connector, const std::vector<rpc::ConnectOptions>& workers,
    std::vector<std::string>* errors, const std::string& check_path) {
  std::vector<std::optional<rpc::LinkProbe>> out(workers.size());
  std::vector<std::string> why(workers.size());
  std::vector<std::thread> threads;
  // Connected and asked in parallel (an unreachable worker delays no other); the links timed
  // in turn (rpc::ProbeWorker's one_at_a_time says why).
  std::mutex one_at_a_time;
  for (size_t i = 0; i < workers.size(); ++i) {
    threads.emplace_back([&, i] {
      StatusOr<rpc::LinkProbe> p = connector.Probe(workers[i], rpc::kLinkProbeTargetS,
                                                   rpc::kLinkProbeMaxS, check_path, &one_at_a_time);
      if (p.ok()) {
        out[i] = *std::move(p);
      } else {
        why[i] = std::string(p.status().message());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (errors != nullptr) *errors = std::move(why);
  return out;
}

std::optional<ReceiveFit> FitReceiveCost(const ReceiveWindow& w, int cut, ReadMode read_mode,
                                         int batch_size, const policy::Costs& known) {
  constexpr double kMinBytes = 32 << 20;
  if (w.bytes < kMinBytes || w.remote_samples < kMinFitSamples) return std::nullopt;
  const bool after_batch = cut == policy::kCutAfterBatch;
  const int n = static_cast<int>(known.ops.size());
  const int64_t local_samples = std::max<int64_t>(0, w.samples_out - w.remote_samples);
  // The stages an offloaded sample runs here: those after the cut, and read_file in local_read.
  double offloaded_stages = after_batch ? 0 : known.StageCpuSeconds(cut, n);
  if (read_mode == ReadMode::kLocalRead) offloaded_stages += known.StageCpuSeconds(0, 1);
  const double rest = w.process_cpu_s - w.op_cpu_s - w.samples_out * known.batch_cpu_s_per_sample -
                      local_samples * known.StageCpuSeconds(0, n) -
                      w.remote_samples * offloaded_stages;
  const double per_byte = known.CostOf(policy::Codec::kNone)->trainer_cpu_s_per_byte;
  // The rest over the bytes, once each of `elements` paid the known per-element cost.
  const auto per_byte_after = [&](double elements) {
    return std::clamp((rest - elements * known.recv_cpu_s_per_sample) / w.bytes, 0.05e-9, 50e-9);
  };
  ReceiveFit fit;
  if (after_batch) {
    fit.per_byte = per_byte_after(static_cast<double>(w.remote_samples) / std::max(1, batch_size));
  } else {
    // The per-element cost is what an element-wise cut tells apart, unless the bytes alone,
    // at the rate believed, cost more than the window holds: then the window contradicts
    // that rate (on the bulk channel a byte costs a fraction of the typical figure), and the
    // bytes take what is left once each element pays the per-element cost believed, as after
    // batching. The floor is the one this fit had always clamped to: under a microsecond per
    // element is below what the window's clocks, read moments apart, can tell from nothing.
    constexpr double kMinPerElement = 1e-6;
    const double per_element = (rest - w.bytes * per_byte) / w.remote_samples;
    if (per_element >= kMinPerElement) {
      fit.per_element = std::min(per_element, 0.1);
    } else {
      fit.per_byte = per_byte_after(static_cast<double>(w.remote_samples));
    }
  }
  return fit;
}

std::optional<LocalFit> FitLocalCost(const ReceiveWindow& w, double batch_cpu_s_per_sample) {
  if (w.samples_out < kMinFitSamples) return std::nullopt;
  const double beyond_ops = std::max(0.0, (w.process_cpu_s - w.op_cpu_s) / w.samples_out);
  LocalFit fit;
  fit.batch_cpu_s_per_sample = std::min(std::max(0.0, batch_cpu_s_per_sample), beyond_ops);
  fit.local_cpu_s_per_sample = beyond_ops - fit.batch_cpu_s_per_sample;
  return fit;
}

double TrainerCpuBudget(int threads) {
  const double cpus = ProbeCpuBudget().cpus();
  return threads > 0 ? std::min(cpus, static_cast<double>(threads)) : cpus;
}

}  // namespace sluice::runtime
