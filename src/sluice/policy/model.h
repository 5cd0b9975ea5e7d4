// The throughput model (docs/policy.md, "The model"): for one candidate placement — a cut,
// a read mode and a codec — the largest sample rate the trainer and its workers can sustain
// together, the flow each side takes, and which constraint binds on each side.
//
// For cut k, with x_L samples/s processed end to end on the trainer and x_w offloaded to
// worker w (ops [first, k) there; first = 1 in local_read, where the trainer reads):
//   trainer CPU:  a_L * x_L + a_o * sum(x_w) <= C_L
//                 a_L = all ops + batching; a_o = suffix ops [k, n) + batching + receiving
//                 (per sample, per byte for the codec) [+ read and send in local_read]
//   worker CPU:   p_w * x_w <= C_w     (its prefix cost, measured there or scaled by speed,
//                                       plus compression)
//   link:         x_w * bytes_k / codec_ratio <= B_w   (and x_w * file_size <= B_w upstream
//                                                       in local_read)
//   storage:      x_w * file_size <= S_w (remote_read; no storage: x_w = 0)
//   demand:       x_L + sum(x_w) <= G * (1 + headroom)
// Maximise x_L + sum(x_w). Every offloaded sample costs the trainer the same a_o, so the
// small LP is a fractional knapsack with one shared resource: the greedy solution (offload as
// much as the workers take when a_o < a_L, fill the rest of the trainer's CPU locally) is
// optimal. When demand binds, many flows reach it; the model then takes the one with the
// least offloaded (fewest bytes on the wire, fewest remote CPU seconds). Offloaded flow is
// split across workers in proportion to each one's capacity (so unequal workers get unequal
// flows, each equally loaded).
//
// Pure functions; thread-safe.
#ifndef SLUICE_POLICY_MODEL_H_
#define SLUICE_POLICY_MODEL_H_

#include <string>
#include <vector>

#include "sluice/policy/profile.h"

namespace sluice::policy {

// A rate standing in for "unbounded" (no measured limit); keeps the arithmetic finite.
inline constexpr double kUnboundedRate = 1e12;

struct Candidate {
  int cut = 0;  // 0..num_ops, or kCutAfterBatch
  ReadMode read_mode = ReadMode::kRemoteRead;
  Codec codec = Codec::kNone;
};
bool operator==(const Candidate& a, const Candidate& b);

// "cut 3 (after random_resized_crop), remote_read, none"; "cut batch, ...".
std::string CandidateName(const Profile& profile, const Candidate& candidate);

// What limits a flow.
enum class Bound {
  kNone,        // not limited (slack)
  kTrainerCpu,  // the trainer's CPU budget
  kDemand,      // the accelerator's consumption rate
  kWorkerCpu,   // the worker's CPU budget
  kLink,        // the link back from the worker
  kUplink,      // the link to the worker (local_read streams files up)
  kStorage,     // the worker's read bandwidth
  kNoStorage,   // remote_read on a worker that cannot see the data
  kNotUseful,   // offloading costs the trainer as much as processing locally
};
const char* BoundName(Bound bound);

struct ModelOptions {
  // Flows aim at demand * (1 + headroom), so a plan that just meets demand on paper keeps
  // a little slack in practice. The predicted rate never exceeds demand.
  double demand_headroom = 0;
  bool allow_after_batch = true;  // false when the pipeline has no batch
  // The largest message a stream carries (RemoteStreamOptions::max_message_bytes); a
  // candidate whose element (a sample, or a whole batch after batching) is larger, before
  // compression, cannot run. 0: no limit.
  double max_message_bytes = 64 << 20;
};

struct WorkerFlow {
  std::string address;
  double samples_per_s = 0;           // x_w
  double capacity_samples_per_s = 0;  // the most it could take at this candidate
  Bound bound = Bound::kNone;         // what sets its capacity
  double cpu_s_per_sample = 0;        // p_w (prefix and compression, its own CPU speed)
  double cpu_utilisation = 0;         // x_w * p_w / C_w
  double wire_bytes_per_s = 0;        // both directions
};

struct Evaluation {
  Candidate candidate;
  bool feasible = true;  // false: the candidate cannot run (reason says why)
  std::string reason;
  double total_samples_per_s = 0;                 // x_L + sum(x_w) (up to demand * (1 + headroom))
  double predicted_samples_per_s = 0;             // min(total, demand)
  double local_samples_per_s = 0;                 // x_L
  double offloaded_samples_per_s = 0;             // sum(x_w)
  std::vector<WorkerFlow> workers;                // one per profile worker, in order
  Bound trainer_bound = Bound::kNone;             // kTrainerCpu or kDemand
  Bound remote_bound = Bound::kNone;              // kNone when the workers have slack
  double trainer_cpu_s_per_local_sample = 0;      // a_L
  double trainer_cpu_s_per_offloaded_sample = 0;  // a_o
  double trainer_cpu_utilisation = 0;
  double wire_bytes_per_sample = 0;  // back from a worker, after compression
  double wire_bytes_per_s = 0;       // all links, both directions
  double remote_cpu_s_per_s = 0;     // sum(x_w * p_w)
  // Elements the trainer takes off its streams a second: sum(x_w), or sum(x_w) / batch after
  // batching (a received batch is one element). What the per-element receive cost is charged
  // on (Costs::recv_cpu_s_per_sample).
  double received_elements_per_s = 0;

  // sum(x_w) / total (0 when nothing flows).
  double ratio() const;
  // Fraction of all samples for each worker (sums to ratio()).
  std::vector<double> worker_shares() const;
};

// Payload bytes per sample crossing the cut (before compression): the source element at
// cut 0, the output of ops[cut-1] otherwise (the last op's after batch).
double BytesAtCut(const Costs& costs, int cut);

// Trainer CPU seconds per sample processed end to end locally (a_L).
double LocalCpuSecondsPerSample(const Costs& costs);

// The all-local rate: min(C_L / a_L, demand).
double AllLocalSamplesPerS(const Profile& profile);

// Every candidate: cuts 0..n and after batch (if allowed) x {remote_read, local_read where
// ops[0] is read_file and the cut is >= 1} x {none and every codec with costs}.
std::vector<Candidate> EnumerateCandidates(const Profile& profile, const ModelOptions& options);

// The LP's greedy optimum for one candidate.
Evaluation Evaluate(const Profile& profile, const Candidate& candidate,
                    const ModelOptions& options = {});

// The rate a plan with a fixed ratio and worker shares sustains (no re-balancing): the
// largest T with T*(1-ratio) local and T*ratio*share_w on worker w within every constraint.
// `worker_shares` are relative (normalised here); empty: equal.
Evaluation EvaluateFixed(const Profile& profile, const Candidate& candidate, double ratio,
                         const std::vector<double>& worker_shares,
                         const ModelOptions& options = {});

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_MODEL_H_
