// Profile: a snapshot of what the profiler measured, the only input of the planners
// (docs/policy.md). Plain values: per-op costs measured on the trainer and on each worker,
// the consumer's demand and stall, each worker's CPUs, link and storage, the trainer's CPU
// budget, and the CPU cost of moving bytes (receive, send, per compression codec).
//
// The policy module is pure and does not depend on rpc/ or runtime/. The read mode, the
// codec and the after-batch cut are the ones every module uses: ReadMode, Codec and
// kCutAfterBatch of sluice/core/placement.h.
//
// Units: seconds, bytes, samples; rates per second. A value <= 0 for a bandwidth means
// "not measured": that constraint is left out of the model.
//
// Thread-safety: plain structs and pure functions; safe to copy and read from any thread.
#ifndef SLUICE_POLICY_PROFILE_H_
#define SLUICE_POLICY_PROFILE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/core/placement.h"
#include "sluice/core/status.h"

namespace sluice::policy {

// The shared names, also spelled policy::Codec etc. by the runtime (the same types).
using ::sluice::Codec;
using ::sluice::kCutAfterBatch;
using ::sluice::ReadMode;

// CodecCost::measured_at_cut for a ratio that holds at every cut.
inline constexpr int kAnyCut = -2;

// The cost of one op, per sample it produces.
struct OpCost {
  std::string name;
  int position = -1;                // index in the spec's `ops`
  double cpu_s_per_sample = 0;      // CPU seconds (thread CPU clock)
  double bytes_out_per_sample = 0;  // payload bytes of its output
};

// What a codec does to the bytes sent back by a worker, per raw (uncompressed) byte.
struct CodecCost {
  Codec codec = Codec::kNone;
  double ratio = 1;                  // raw bytes / bytes on the wire (>= 1)
  double worker_cpu_s_per_byte = 0;  // compressing, on the worker (at speed factor 1)
  // Receiving on the trainer with this codec: wire decode, copies and decompression.
  double trainer_cpu_s_per_byte = 0;
  // Where `ratio` was measured: kCutAfterBatch (the pipeline's output, which is also the
  // last op's), an element-wise cut, or kAnyCut (it holds for every cut). Elsewhere the data is taken to be
  // incompressible (ratio 1): decoded pixels compress very differently from normalized
  // floats, so one cut's ratio does not stand in for another's.
  int measured_at_cut = kAnyCut;
};

// The parts of a profile that depend only on the pipeline and the trainer's host: what the
// metric store keeps between runs.
struct Costs {
  std::vector<OpCost> ops;             // measured on the trainer, in spec order
  double source_bytes_per_sample = 0;  // a source element (path, label): the cut-0 message
  double raw_bytes_per_sample = 0;     // the file size (what local_read streams up)
  double batch_cpu_s_per_sample = 0;   // batching (stacking) on the trainer, per sample
  // The engine's own trainer CPU per sample taken through all the local op stages (queues,
  // hand-offs, allocation, the source), beyond the ops and batching: the process's CPU net of
  // those over an all-local window. Charged per op stage a sample passes here (a sample
  // offloaded at cut c passes n - c of the n), so it is what offloading also saves.
  double local_cpu_s_per_sample = 0;
  // Trainer CPU per sample received from a worker that does not scale with its size
  // (merge, accounting, message handling).
  double recv_cpu_s_per_sample = 0;
  // Where recv_cpu_s_per_sample was fitted on the whole process at an element-wise cut: the
  // bytes per element received there (0: not such a fit). Kept with the fit for reports and
  // the metric store; the model charges the fit per element and the bytes at the per-byte
  // rate at every cut (policy.md, rule 6).
  double recv_fit_bytes_per_element = 0;
  double send_cpu_s_per_byte = 0;  // trainer CPU per raw byte streamed up (local_read)
  // A worker's CPU per byte it sends back (message framing, copies, socket writes), at speed
  // factor 1. Until a worker measures it, the runtime takes the trainer's cost of receiving
  // a byte uncompressed: the same bytes through the same library on the other end.
  double worker_send_cpu_s_per_byte = 0;
  // A worker's own CPU per sample it delivers beyond its ops, compression, sending and
  // batching (request handling, the transport's threads, allocation), at speed factor 1:
  // fitted from the CPU workers report for their sessions (Controller::RecalibrateWorkerCpu):
  // the mean of worker_cpu_readings readings.
  double worker_cpu_s_per_sample = 0;
  int worker_cpu_readings = 0;
  // Whether the receive costs above were measured on this trainer's whole process while it
  // offloaded (a fit, or a reading that confirmed them; in this run or, through the metric
  // store, an earlier one): until then they are defaults, and the closed loop asks a plan
  // resting on them for a larger gain (ControllerOptions::unmeasured_receive_min_gain).
  bool receive_measured = false;
  // The codecs measured, an entry per codec and cut where its ratio was read
  // (CodecCost::measured_at_cut); kNone is receiving without compression. A codec with no
  // entry is not considered by the planner (kNone defaults to ratio 1 and zero cost).
  std::vector<CodecCost> codecs;

  // The first entry for `codec`, or nullopt (kNone always has one, defaulted).
  std::optional<CodecCost> CostOf(Codec codec) const;
  // The entry for data crossing `cut` of `num_ops` ops (kCutAfterBatch: after batching): the
  // one measured at that cut; else one that holds at every cut (kAnyCut); else, at the
  // output (the last op's cut or after batching), the one measured there; else the codec's
  // first entry with ratio 1 (its CPU costs; the data counts as incompressible at a cut
  // where nothing was read). nullopt where CostOf is.
  std::optional<CodecCost> CostAt(Codec codec, int cut, int num_ops) const;
  // Sum of ops[begin, end) CPU seconds per sample (clamped to the ops there are).
  double CpuSeconds(int begin, int end) const;
  // The engine's share of local_cpu_s_per_sample for the stages of ops[begin, end) (1/n each).
  double StageCpuSeconds(int begin, int end) const;
  // The trainer's CPU per sample taking ops[begin, end) here: CpuSeconds + StageCpuSeconds.
  double TrainerCpuSeconds(int begin, int end) const;
  // Multiplies what a sample costs taken all-local (every op, batching, the engine's stages)
  // by `factor`; receiving, sending and codecs stay.
  void ScaleLocalCpu(double factor);
};

// The consumer: the training loop that calls next().
struct ConsumerProfile {
  // Time between next() calls not spent waiting in next(): the accelerator's step per
  // batch. 0: not measured (demand unbounded).
  double step_s = 0;
  int batch_size = 1;
  double stall_fraction = 0;  // share of wall time spent waiting inside next()

  // Samples per second the accelerator can consume; +infinity when step_s is 0.
  double DemandSamplesPerS() const;
};

struct WorkerProfile {
  std::string address;
  double cpu_budget = 0;        // CPUs the worker may use
  double link_bytes_per_s = 0;  // each direction; <= 0: not measured (no constraint)
  double rtt_s = 0;
  bool has_storage = true;         // can read the data itself (remote_read)
  double storage_bytes_per_s = 0;  // its read bandwidth; <= 0: not limited
  // Per-op costs measured on this worker (e.g. from a previous session's in-band metrics);
  // an op without an entry costs the trainer's cost divided by speed_factor.
  std::vector<OpCost> ops;
  double speed_factor = 1;  // CPU speed relative to the trainer's (2: twice as fast)
  // The worker's CPU seconds per sample for op `position` (measured, else scaled).
  double OpCpuSeconds(const Costs& costs, int position) const;
};

struct Profile {
  Costs costs;
  ConsumerProfile consumer;
  std::vector<WorkerProfile> workers;
  double trainer_cpu_budget = 1;  // CPUs the trainer process may use (cgroup aware)

  int num_ops() const { return static_cast<int>(costs.ops.size()); }
  // Whether ops[0] is read_file (local_read is possible).
  bool first_op_reads() const;
};

// Checks that numbers are finite and in range (costs >= 0, codec ratio >= 1, batch size
// >= 1, CPU budgets > 0 for the trainer, >= 0 for workers). InvalidArgument naming the field.
Status ValidateProfile(const Profile& profile);

// JSON round trip. Field names are the struct's members; enums as their names.
nlohmann::json ToJson(const OpCost& op);
nlohmann::json ToJson(const CodecCost& codec);
nlohmann::json ToJson(const Costs& costs);
nlohmann::json ToJson(const ConsumerProfile& consumer);
nlohmann::json ToJson(const WorkerProfile& worker);
nlohmann::json ToJson(const Profile& profile);
// Missing fields take their defaults; a wrong type or an unknown enum name is an
// InvalidArgument naming the field.
StatusOr<Costs> CostsFromJson(const nlohmann::json& json);
StatusOr<Profile> ProfileFromJson(const nlohmann::json& json);
// Text forms (pretty-printed JSON).
std::string ProfileToJsonString(const Profile& profile);
StatusOr<Profile> ParseProfileJson(std::string_view text);

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_PROFILE_H_
