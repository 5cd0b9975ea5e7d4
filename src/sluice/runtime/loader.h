// Loader: the trainer's data loader. Runs a PipelineSpec in this process, or, given workers
// and a plan (cut, ratio, read mode, compression), partly on `sluice worker` processes
// (docs/offload.md):
//
//   Coordinator ── splits ──► local prefix: ops [0, cut) on a ParallelMap ──┐
//        │                                                                  ├─► Merge ─► suffix
//        └────── splits ──► one RemoteStream per worker: ops [0, cut) ──────┘
//   suffix: ops [cut, end) on a ParallelMap -> [shuffle buffer] -> [batch] -> prefetch
//
// With cut = kCutAfterBatch every op and the batching run where the sample is assigned
// (splits are then multiples of the batch size and batches never mix splits), and the suffix
// is only the prefetch (a shuffle buffer does not apply to whole batches and is left out).
// In local_read mode the trainer runs ops[0] (which must be read_file) for the samples it
// sends and streams the bytes; the worker runs ops [1, cut).
//
// Without workers, or with ratio 0, the Loader is exactly the local pipeline
// (pipeline::LocalExecutor). A worker unreachable at start is reported through `warn` and
// the run goes on with the others (all-local when none is reachable). A stream that fails
// gets its open splits re-queued and its worker is reconnected in the background with
// exponential backoff (0.1 s doubling to 5 s by default; each attempt waits at most 1 s for
// the connection), and used again once back. A worker that holds open splits but delivers
// nothing for longer than a deadline derived from its measured rate (runtime/liveness.h) is
// declared hung: its stream is cancelled and it is treated as failed (warned about as
// "worker A hung: nothing delivered for ...", counted in WorkerReport::hangs). A
// sample that fails remotely under on_error: fail ends the run with the op's error, as it
// would locally. A worker that drains (SIGTERM; docs/offload.md, "Drain") says so: it gets
// no new splits from then on, what it still delivers is taken, the splits it returns and
// whatever it had not delivered when its stream ends are re-queued, and it is counted as
// drained (WorkerReport::drains), not failed; it is then reconnected in the background like a
// failed one (a worker restarted on the same address is used again). With options.deterministic,
// batches come out in the same order, and with the same content, whatever the plan and whichever
// worker fails.
//
// Checkpoints (docs/python.md): Progress() says which samples the consumer has received
// (GetNext() returned them, or they were dropped under on_error: skip or drop_remainder);
// a Loader created with that progress as LoaderOptions::resume delivers exactly the others,
// with the same SampleIds and hence the same augmentations, locally or offloaded. A rank of a
// sharded run resumes its own share from its own progress, or a fresh share of what remains
// from the merged progress of all ranks (pipeline::MergeRankProgress).
//
// Thread-compatible (one consumer calls GetNext()); Cancel(), Report() and Progress() from any
// thread.
// Destruction cancels and joins every thread it started.
#ifndef SLUICE_RUNTIME_LOADER_H_
#define SLUICE_RUNTIME_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/placement.h"
#include "sluice/core/status.h"
#include "sluice/ops/registry.h"
#include "sluice/pipeline/shard.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/stats.h"
#include "sluice/rpc/connector.h"
#include "sluice/rpc/remote_stream.h"
#include "sluice/runtime/liveness.h"

namespace sluice::runtime {

// The plan is the Placement (core/placement.h): ops [0, cut) run where each sample is
// assigned, the rest in this process (kCutAfterBatch: all ops and the batching); `ratio` is
// the target fraction of the samples processed by workers (spill-over moves work to
// whichever side is idle, whatever the ratio); `worker_shares` one per worker (empty:
// equal); `local_spill_over` false: the local side keeps to its share (1 - ratio) while a
// worker is up, the workers still spill over (ConsumerConfig::spill_over). Set it with
// WithPlacement.
// What happened to a worker's stream (LoaderOptions::on_worker_event): for programs that
// watch a run, as the warnings are for people.
struct WorkerEvent {
  enum class Kind {
    kFailed,    // the stream broke (the worker died, the link failed, an Error)
    kHung,      // cut because the worker delivered nothing for too long (liveness.h)
    kDraining,  // the worker is shutting down: no new splits; it finishes what it holds
    kDrained,   // ... and its stream ended; what it did not deliver was re-queued
  };
  Kind kind = Kind::kFailed;
  std::string address;
  int64_t requeued_samples = 0;  // kFailed, kHung, kDrained: samples put back in the queue
  double deadline_s = 0;         // kDraining: when the worker returns what it still holds
  std::string message;           // kFailed, kHung: why
};
// "failed", "hung", "draining", "drained".
const char* WorkerEventKindName(WorkerEvent::Kind kind);

struct LoaderOptions : Placement {
  std::vector<rpc::ConnectOptions> workers;
  // false: no spill-over (FastFlow's counters, for the baseline): a side behind its share is
  // waited for (CoordinatorOptions::spill_over).
  bool spill_over = true;
  int threads = 0;          // local threads per map; 0: the spec's, then the CPU budget
  uint64_t split_size = 0;  // 0: 32 (rounded up to a multiple of the batch after batch)
  int max_open_splits = 3;  // per worker
  // This trainer's weight in each worker's division of its CPU between the sessions of the
  // trainers it serves (rpc/fair_share.h; > 0, at most rpc::kMaxSessionWeight).
  double session_weight = 1;
  size_t max_inflight_bytes = 256 << 20;  // per worker stream (flow-control window)
  size_t max_buffered_bytes = 256 << 20;  // budget of the local queues
  double reconnect_initial_s = 0.1;
  double reconnect_max_s = 5.0;
  // When a worker that holds open splits but delivers nothing is declared hung.
  HangPolicy hang;
  // Resume from a checkpoint: the samples it marks consumed are left out (may be null).
  // spec.epochs still counts from epoch 0.
  std::shared_ptr<const pipeline::SourceProgress> resume;
  // This process is rank `shard.rank` of `shard.world_size` data-parallel trainers: it
  // loads only its share of every epoch (pipeline/shard.h, docs/distributed.md), offloads
  // and accounts for exactly that share, and Progress() says what it received over the
  // global sample indices. Not with cut=batch (the batch count must not depend on the plan).
  pipeline::Shard shard;
  // Warnings (unreachable worker, failure, reconnect). Default: "sluice: warning: ..." on
  // stderr. Called from the Loader's threads.
  std::function<void(const std::string&)> warn;
  // Each WorkerEvent as it happens (null: none). Called from the Loader's threads.
  std::function<void(const WorkerEvent&)> on_worker_event;
  // How sessions with the workers are opened and links probed (rpc/connector.h); null: gRPC.
  std::shared_ptr<rpc::Connector> connector;
};

struct WorkerReport {
  std::string address;
  double share = 0;            // target fraction of all samples
  int64_t samples = 0;         // samples it delivered (accepted by the merge)
  int64_t bytes_received = 0;  // payload bytes received from it, over every connection
  // This process's CPU for receiving from it (rpc::RemoteStream): taking messages off the
  // connection, and decoding them and handing the samples on.
  int64_t read_cpu_ns = 0;
  int64_t decode_cpu_ns = 0;
  bool connected = false;          // now
  int64_t connects = 0;            // successful opens
  int64_t failures = 0;            // streams that broke after opening (hangs included)
  // Streams the worker ended by draining (shutting down gracefully): not failures.
  int64_t drains = 0;
  bool draining = false;           // now: its stream says it is draining
  // Its stream's payloads come on a bulk data channel (rpc/bulk_channel.h): now, or when it
  // last had a stream.
  bool bulk = false;
  bool shared_memory = false;      // that channel is a shared-memory ring (a local worker)
  // Samples' tensors it wrote straight into shared slots (rpc/slot_arena.h), over every
  // connection.
  int64_t shared_slots = 0;
  int64_t hangs = 0;               // streams cut because the worker was hung (runtime/liveness.h)
  double last_hang_silence_s = 0;  // the silence that declared the last hang
  std::string last_error;
  std::vector<rpc::WorkerOpMetrics> metrics;  // latest in-band metrics of its session
  // The worker's CPUs this trainer's session is entitled to, as the worker last reported
  // (its budget divided by weight between the trainers it serves); 0: not reported yet.
  double cpu_share = 0;
  // The worker's CPU spent on the session `metrics` belong to, as of those metrics (0: not
  // reported): over the same span as their sample counts.
  int64_t cpu_ns = 0;
};

struct LoaderReport {
  bool offloaded = false;  // false: the plain local pipeline ran
  int cut = 0;
  double ratio = 0;
  // false: the local side keeps to its share (`spill=workers`), as set now.
  bool local_spill_over = true;
  ReadMode read_mode = ReadMode::kRemoteRead;
  Codec codec = Codec::kNone;
  int threads = 0;
  int64_t samples_local = 0;  // samples the local prefix delivered
  std::vector<WorkerReport> workers;
  int64_t duplicates_dropped = 0;
  int64_t requeued_samples = 0;
  int64_t skipped = 0;  // samples dropped under on_error: skip (anywhere)
  int64_t samples_out = 0;
  int64_t batches_out = 0;
  // Batches stacked without a copy: their samples were written into their slots
  // (core/batch_slots.h; the suffix's last op, or the local pipeline's).
  int64_t batches_in_place = 0;
  std::vector<pipeline::OpStatsSnapshot> local_ops;  // what ran in this process
  std::vector<std::string> warnings;                 // the first 100
  // The shuffle buffer's memory (shuffle_buffer): the most samples and payload bytes it
  // held at once; zero without one.
  int64_t shuffle_buffer_peak_samples = 0;
  int64_t shuffle_buffer_peak_bytes = 0;
};

// `sum` += `r`, for a run served by several Loaders in turn: the counters add up (workers by
// address), the plan fields and op stats are `r`'s, the warnings the first 100.
void AddLoaderReport(LoaderReport& sum, const LoaderReport& r);

// `base` with the plan of `placement` (every Placement field): the one conversion from a
// plan (policy::Plan, a parsed `fixed:` policy, a FastFlow run) to a Loader's options.
LoaderOptions WithPlacement(LoaderOptions base, const Placement& placement);

// What ValidatePlacement needs to know of `spec`.
PipelineShape PipelineShapeOf(const pipeline::PipelineSpec& spec);

class Loader {
 public:
  // Validates the plan against the spec (cut in 0..ops or kCutAfterBatch with a batch;
  // local_read needs ops[0] = read_file and a cut past it; ratio in [0, 1]; one share per
  // worker), builds the local ops, connects to the workers and starts.
  static StatusOr<std::unique_ptr<Loader>> Create(
      const pipeline::PipelineSpec& spec, LoaderOptions options,
      const ops::Registry& registry = ops::Registry::Builtin());
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch (or sample, without batching).
  Status GetNext(Element* out, bool* end_of_stream);
  void Cancel();

  // Changes how much goes to the workers without reconnecting: `ratio` in [0, 1] and the
  // workers' relative shares (empty: equal; else one per worker). Applies to the splits
  // handed out from now on. FailedPrecondition for a Loader running the plain local pipeline
  // (created without workers or with ratio 0: offloading needs a new Loader).
  // Thread-safe.
  Status SetShares(double ratio, const std::vector<double>& worker_shares);
  // LoaderOptions::local_spill_over from now on, without a new Loader. FailedPrecondition
  // for a Loader running the local pipeline.
  Status SetLocalSpillOver(bool spill_over);

  const Schema& output_schema() const;
  int64_t samples_per_epoch() const;
  // The files its source visits, resolved once at Create (never null).
  std::shared_ptr<const pipeline::SourceFiles> source_files() const;
  LoaderReport Report() const;
  // What the consumer has received so far (with the resume progress it started from); after
  // the end of the stream, every epoch of the run.
  pipeline::SourceProgress Progress() const;

  struct Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_LOADER_H_
