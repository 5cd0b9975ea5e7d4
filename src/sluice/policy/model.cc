#include "sluice/policy/model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/policy/format.h"

namespace sluice::policy {
namespace {

constexpr double kEps = 1e-9;

double Clamp(double rate) {
  if (std::isnan(rate)) return 0;
  return std::clamp(rate, 0.0, kUnboundedRate);
}

// budget / cost, with 0 cost meaning unbounded.
double Capacity(double budget, double cost) {
  if (!(cost > 0)) return kUnboundedRate;
  return Clamp(budget / cost);
}

// The per-sample coefficients of one candidate.
struct Coefficients {
  bool feasible = true;
  std::string reason;
  double a_local = 0;    // a_L
  double a_offload = 0;  // a_o
  double bytes_raw = 0;  // at the cut, uncompressed
  double wire_down = 0;  // at the cut, compressed
  double wire_up = 0;    // file bytes streamed to the worker (local_read)
  struct Worker {
    double cpu_s = 0;
    double capacity = 0;
    Bound bound = Bound::kNone;
  };
  std::vector<Worker> workers;
};

Coefficients Compute(const Profile& p, const Candidate& c, const ModelOptions& options) {
  Coefficients k;
  const Costs& costs = p.costs;
  const int n = p.num_ops();
  const bool after_batch = c.cut == kCutAfterBatch;
  if (!after_batch && (c.cut < 0 || c.cut > n)) {
    k.feasible = false;
    k.reason = absl::StrCat("cut ", c.cut, " is outside 0..", n);
  } else if (after_batch && !options.allow_after_batch) {
    k.feasible = false;
    k.reason = "the pipeline has no batch to cut after";
  } else if (c.read_mode == ReadMode::kLocalRead && !p.first_op_reads()) {
    k.feasible = false;
    k.reason = "local_read needs read_file as ops[0]";
  } else if (c.read_mode == ReadMode::kLocalRead && c.cut == 0) {
    k.feasible = false;
    k.reason = "local_read needs a cut past read_file";
  }
  std::optional<CodecCost> codec = costs.CostAt(c.codec, c.cut, n);
  if (k.feasible && !codec) {
    k.feasible = false;
    k.reason = absl::StrCat("no measured cost for codec ", CodecName(c.codec));
  }
  k.a_local = LocalCpuSecondsPerSample(costs);
  if (!k.feasible) return k;

  const bool local_read = c.read_mode == ReadMode::kLocalRead;
  const int first = local_read ? 1 : 0;
  const int end = after_batch ? n : c.cut;
  k.bytes_raw = BytesAtCut(costs, c.cut);
  // The codec's ratio holds where it was measured (Costs::CostAt: the pipeline's output is
  // both the last op's and, stacked, the batch's); other cuts' data counts as incompressible.
  const double element_bytes =
      after_batch ? k.bytes_raw * std::max(1, p.consumer.batch_size) : k.bytes_raw;
  if (options.max_message_bytes > 0 && element_bytes > options.max_message_bytes) {
    k.feasible = false;
    k.reason = absl::StrCat(after_batch ? "a batch" : "a sample", " is ",
                            FormatBytes(element_bytes), ", over the ",
                            FormatBytes(options.max_message_bytes), " message limit");
    return k;
  }
  k.wire_down = k.bytes_raw / std::max(codec->ratio, 1.0);
  k.wire_up = local_read ? costs.raw_bytes_per_sample : 0;
  const double suffix =
      after_batch ? 0 : costs.TrainerCpuSeconds(c.cut, n) + costs.batch_cpu_s_per_sample;
  // Receiving costs per element (a sample, or a whole batch after batching) and per byte.
  // A whole-process fit at an element-wise cut is the part left over once the bytes are
  // charged at the per-byte rate (FitReceiveCost): per element, so after batching it is
  // paid once per batch. Measured on the receive path (bench/receive_cost.py, the image
  // pipeline): 140 us a sample at cut 4 (150 KB elements, the trainer's normalize and batch
  // included) and 123 us after batching (602 KB a sample): about 55 us per element and 0.2
  // ns per byte. Carried per byte instead (the larger of the two readings, as an earlier
  // receive path had suggested), the 55 us had been charged as 220 us to each sample after
  // batching, three times what it costs, and the after-batch cut lost ties it wins.
  const double per_element = after_batch ? costs.recv_cpu_s_per_sample /
                                               std::max(1, p.consumer.batch_size)
                                         : costs.recv_cpu_s_per_sample;
  k.a_offload = suffix + per_element + k.bytes_raw * codec->trainer_cpu_s_per_byte;
  if (local_read) {
    k.a_offload +=
        costs.TrainerCpuSeconds(0, 1) + costs.raw_bytes_per_sample * costs.send_cpu_s_per_byte;
  }
  const bool needs_storage = !local_read && end >= 1;
  for (const WorkerProfile& w : p.workers) {
    Coefficients::Worker kw;
    const double speed = w.speed_factor > 0 ? w.speed_factor : 1;
    for (int i = first; i < end; ++i) kw.cpu_s += w.OpCpuSeconds(costs, i);
    kw.cpu_s += k.bytes_raw * codec->worker_cpu_s_per_byte / speed;
    // Sending the result back: 0.6 MB of floats per sample after batching cost a worker
    // as much CPU as its ops (the demo's worker delivered 1290 of the 1959 samples/s its
    // ops allowed).
    kw.cpu_s += k.wire_down * costs.worker_send_cpu_s_per_byte / speed;
    if (after_batch) kw.cpu_s += costs.batch_cpu_s_per_sample / speed;
    kw.cpu_s += costs.worker_cpu_s_per_sample / speed;
    kw.capacity = kUnboundedRate;
    kw.bound = Bound::kNone;
    auto limit = [&kw](double cap, Bound bound) {
      if (cap < kw.capacity) {
        kw.capacity = cap;
        kw.bound = bound;
      }
    };
    limit(w.cpu_budget > 0 ? Capacity(w.cpu_budget, kw.cpu_s) : 0, Bound::kWorkerCpu);
    if (w.link_bytes_per_s > 0) {
      limit(Capacity(w.link_bytes_per_s, k.wire_down), Bound::kLink);
      if (local_read) limit(Capacity(w.link_bytes_per_s, k.wire_up), Bound::kUplink);
    }
    if (needs_storage) {
      if (!w.has_storage) {
        limit(0, Bound::kNoStorage);
        kw.bound = Bound::kNoStorage;
      } else if (w.storage_bytes_per_s > 0) {
        limit(Capacity(w.storage_bytes_per_s, costs.raw_bytes_per_sample), Bound::kStorage);
      }
    }
    k.workers.push_back(kw);
  }
  return k;
}

void FillWorkerFlows(const Profile& p, const Coefficients& k, const std::vector<double>& flows,
                     Evaluation* e) {
  e->workers.clear();
  e->offloaded_samples_per_s = 0;
  e->remote_cpu_s_per_s = 0;
  e->wire_bytes_per_s = 0;
  for (size_t i = 0; i < p.workers.size(); ++i) {
    WorkerFlow f;
    f.address = p.workers[i].address;
    f.samples_per_s = flows.empty() ? 0 : flows[i];
    if (i < k.workers.size()) {
      f.capacity_samples_per_s = k.workers[i].capacity;
      f.bound = k.workers[i].bound;
      f.cpu_s_per_sample = k.workers[i].cpu_s;
    }
    f.cpu_utilisation = p.workers[i].cpu_budget > 0
                            ? f.samples_per_s * f.cpu_s_per_sample / p.workers[i].cpu_budget
                            : 0;
    f.wire_bytes_per_s = f.samples_per_s * (k.wire_down + k.wire_up);
    e->offloaded_samples_per_s += f.samples_per_s;
    e->remote_cpu_s_per_s += f.samples_per_s * f.cpu_s_per_sample;
    e->wire_bytes_per_s += f.wire_bytes_per_s;
    e->workers.push_back(std::move(f));
  }
  e->received_elements_per_s = e->candidate.cut == kCutAfterBatch
                                   ? e->offloaded_samples_per_s / std::max(1, p.consumer.batch_size)
                                   : e->offloaded_samples_per_s;
}

// The remote side's bound when every worker is at capacity: the bound of the largest
// contributor (kNone while some worker has slack).
Bound RemoteBound(const Evaluation& e) {
  Bound bound = Bound::kNone;
  double best = -1;
  for (const WorkerFlow& w : e.workers) {
    if (w.capacity_samples_per_s <= 0) continue;
    if (w.samples_per_s < w.capacity_samples_per_s * (1 - 1e-6)) return Bound::kNone;
    if (w.capacity_samples_per_s > best) {
      best = w.capacity_samples_per_s;
      bound = w.bound;
    }
  }
  return bound;
}

}  // namespace

bool operator==(const Candidate& a, const Candidate& b) {
  return a.cut == b.cut && a.read_mode == b.read_mode && a.codec == b.codec;
}

std::string CandidateName(const Profile& profile, const Candidate& c) {
  std::string where;
  if (c.cut == kCutAfterBatch) {
    where = "after batch";
  } else if (c.cut == 0) {
    where = "before every op";
  } else if (c.cut <= profile.num_ops()) {
    where = absl::StrCat("after ", profile.costs.ops[c.cut - 1].name);
  } else {
    where = "out of range";
  }
  return absl::StrCat("cut ", CutName(c.cut), " (", where, "), ", ReadModeName(c.read_mode), ", ",
                      CodecName(c.codec));
}

const char* BoundName(Bound bound) {
  switch (bound) {
    case Bound::kNone:
      return "none";
    case Bound::kTrainerCpu:
      return "trainer_cpu";
    case Bound::kDemand:
      return "demand";
    case Bound::kWorkerCpu:
      return "worker_cpu";
    case Bound::kLink:
      return "link";
    case Bound::kUplink:
      return "uplink";
    case Bound::kStorage:
      return "storage";
    case Bound::kNoStorage:
      return "no_storage";
    case Bound::kNotUseful:
      return "not_useful";
  }
  return "none";
}

double Evaluation::ratio() const {
  return total_samples_per_s > 0 ? offloaded_samples_per_s / total_samples_per_s : 0;
}

std::vector<double> Evaluation::worker_shares() const {
  std::vector<double> shares;
  for (const WorkerFlow& w : workers) {
    shares.push_back(total_samples_per_s > 0 ? w.samples_per_s / total_samples_per_s : 0);
  }
  return shares;
}

double BytesAtCut(const Costs& costs, int cut) {
  const int n = static_cast<int>(costs.ops.size());
  const int last = cut == kCutAfterBatch ? n : std::min(cut, n);
  if (last <= 0) return costs.source_bytes_per_sample;
  return costs.ops[last - 1].bytes_out_per_sample;
}

double LocalCpuSecondsPerSample(const Costs& costs) {
  return costs.TrainerCpuSeconds(0, static_cast<int>(costs.ops.size())) +
         costs.batch_cpu_s_per_sample;
}

double AllLocalSamplesPerS(const Profile& p) {
  const double local = Capacity(p.trainer_cpu_budget, LocalCpuSecondsPerSample(p.costs));
  return std::min(local, Clamp(p.consumer.DemandSamplesPerS()));
}

std::vector<Candidate> EnumerateCandidates(const Profile& p, const ModelOptions& options) {
  std::vector<Codec> codecs = {Codec::kNone};
  for (Codec c : {Codec::kLz4, Codec::kZstd}) {
    if (p.costs.CostOf(c)) codecs.push_back(c);
  }
  std::vector<int> cuts;
  for (int k = 0; k <= p.num_ops(); ++k) cuts.push_back(k);
  if (options.allow_after_batch) cuts.push_back(kCutAfterBatch);
  std::vector<Candidate> out;
  for (int cut : cuts) {
    for (ReadMode mode : {ReadMode::kRemoteRead, ReadMode::kLocalRead}) {
      if (mode == ReadMode::kLocalRead && (!p.first_op_reads() || cut == 0)) continue;
      for (Codec codec : codecs) out.push_back(Candidate{cut, mode, codec});
    }
  }
  return out;
}

Evaluation Evaluate(const Profile& p, const Candidate& c, const ModelOptions& options) {
  Evaluation e;
  e.candidate = c;
  const Coefficients k = Compute(p, c, options);
  const double demand = Clamp(p.consumer.DemandSamplesPerS());
  const double target = Clamp(demand * (1 + std::max(options.demand_headroom, 0.0)));
  const double cpu = p.trainer_cpu_budget;
  e.trainer_cpu_s_per_local_sample = k.a_local;
  e.trainer_cpu_s_per_offloaded_sample = k.a_offload;
  e.wire_bytes_per_sample = k.wire_down;
  const double local_only = Capacity(cpu, k.a_local);

  std::vector<double> flows(p.workers.size(), 0.0);
  double x_local = 0;
  double x_off = 0;
  if (!k.feasible) {
    e.feasible = false;
    e.reason = k.reason;
  }
  double capacity = 0;
  for (const auto& w : k.workers) capacity = Clamp(capacity + w.capacity);
  const bool useful = k.feasible && k.a_offload < k.a_local && capacity > 0;
  if (useful) {
    // Offload as much as the workers and the trainer's receive path take.
    x_off = std::min(capacity, Capacity(cpu, k.a_offload));
    x_local =
        k.a_local > 0 ? std::max(0.0, (cpu - k.a_offload * x_off) / k.a_local) : kUnboundedRate;
    if (x_off + x_local >= target) {
      // Demand binds: the least offload that still reaches it.
      const double gain = 1 - k.a_offload / k.a_local;
      x_off = std::clamp((target - local_only) / gain, 0.0, x_off);
      x_local = std::max(0.0, target - x_off);
    }
    for (size_t i = 0; i < flows.size(); ++i) {
      flows[i] = capacity > 0 ? x_off * k.workers[i].capacity / capacity : 0;
    }
  } else {
    x_local = std::min(local_only, target);
  }
  e.local_samples_per_s = x_local;
  e.total_samples_per_s = x_local + x_off;
  e.predicted_samples_per_s = std::min(e.total_samples_per_s, demand);
  FillWorkerFlows(p, k, flows, &e);
  e.trainer_cpu_utilisation = cpu > 0 ? (x_local * k.a_local + x_off * k.a_offload) / cpu : 0;
  e.trainer_bound =
      e.total_samples_per_s >= target * (1 - 1e-9) ? Bound::kDemand : Bound::kTrainerCpu;
  if (!k.feasible) {
    e.remote_bound = Bound::kNone;
  } else if (!(k.a_offload < k.a_local)) {
    e.remote_bound = Bound::kNotUseful;
  } else if (capacity <= 0) {
    e.remote_bound = k.workers.empty() ? Bound::kNone : k.workers.front().bound;
  } else {
    e.remote_bound = RemoteBound(e);
  }
  return e;
}

Evaluation EvaluateFixed(const Profile& p, const Candidate& c, double ratio,
                         const std::vector<double>& worker_shares, const ModelOptions& options) {
  Evaluation e;
  e.candidate = c;
  const Coefficients k = Compute(p, c, options);
  ratio = std::clamp(std::isnan(ratio) ? 0.0 : ratio, 0.0, 1.0);
  if (p.workers.empty()) ratio = 0;
  e.trainer_cpu_s_per_local_sample = k.a_local;
  e.trainer_cpu_s_per_offloaded_sample = k.a_offload;
  e.wire_bytes_per_sample = k.wire_down;
  if (!k.feasible && ratio > 0) {
    e.feasible = false;
    e.reason = k.reason;
    FillWorkerFlows(p, k, {}, &e);
    return e;
  }
  std::vector<double> shares(p.workers.size(), 1.0);
  if (!worker_shares.empty()) {
    for (size_t i = 0; i < shares.size(); ++i) {
      shares[i] = i < worker_shares.size() ? std::max(worker_shares[i], 0.0) : 0.0;
    }
  }
  double sum = 0;
  for (double s : shares) sum += s;
  if (sum <= 0) {
    ratio = 0;
    sum = 1;
  }
  for (double& s : shares) s /= sum;

  const double demand = Clamp(p.consumer.DemandSamplesPerS());
  double total = demand;
  Bound trainer_bound = Bound::kDemand;
  const double per_sample = (1 - ratio) * k.a_local + ratio * k.a_offload;
  if (Capacity(p.trainer_cpu_budget, per_sample) < total) {
    total = Capacity(p.trainer_cpu_budget, per_sample);
    trainer_bound = Bound::kTrainerCpu;
  }
  Bound remote_bound = Bound::kNone;
  for (size_t i = 0; i < shares.size() && ratio > 0; ++i) {
    if (shares[i] <= 0) continue;
    const double cap = k.workers[i].capacity / (ratio * shares[i]);
    if (cap < total) {
      total = cap;
      remote_bound = k.workers[i].bound;
      trainer_bound = Bound::kNone;
    }
  }
  std::vector<double> flows(p.workers.size());
  for (size_t i = 0; i < flows.size(); ++i) flows[i] = total * ratio * shares[i];
  e.local_samples_per_s = total * (1 - ratio);
  e.total_samples_per_s = total;
  e.predicted_samples_per_s = total;
  FillWorkerFlows(p, k, flows, &e);
  e.trainer_cpu_utilisation =
      p.trainer_cpu_budget > 0 ? total * per_sample / p.trainer_cpu_budget : 0;
  e.trainer_bound = trainer_bound;
  e.remote_bound = remote_bound;
  return e;
}

}  // namespace sluice::policy
