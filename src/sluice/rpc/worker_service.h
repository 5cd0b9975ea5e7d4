// WorkerService: what a `sluice worker` process does, without any transport. The gRPC
// adapter (grpc_worker_server.h) only converts messages to and from these calls; tests
// drive this class directly.
//
// A trainer opens a WorkerSession with a spec and a cut. The session validates the spec
// against the worker's own registry (a worker never runs code it was sent), builds ops
// [first_op, cut) (first_op = 1 in local_read mode, where the trainer ran read_file; the
// batch too for cut = kCutAfterBatch), and then runs the splits it is given on the
// service's thread pool, which serves the open sessions by weighted fair share of the CPU
// (fair_share.h; each session's kMetrics says the share it is entitled to). Each
// session has its own ops, counters and memory budget.
//
// Output is a sequence of WorkerOutputs: chunks of encoded elements (several samples of
// one split, up to WorkerOptions::chunk_bytes), one SplitDone per split after its last
// chunk, per-op Metrics every metrics_interval_s, and at most one Error, after which the
// session is over.
//
// Flow control: the session counts the bytes it has produced and the trainer has not
// credited yet (queued chunks, chunks sent, finished samples not yet chunked). It starts a
// sample only while that count plus an upper estimate of the output of every sample in
// progress stays within the window (`max_inflight_bytes`, capped by the worker's
// per-session memory cap), so a trainer that stops reading stops the worker instead of
// growing its memory; one sample is always admitted when nothing is buffered, so a sample
// larger than the window still passes. The bound is exact for samples of equal output
// size and approximate otherwise (the estimate is the largest output seen so far).
//
// Files (ops/storage.h): every file any op reads on the worker — read_file in remote_read
// mode, a read_file after the cut in either mode, read_box's sidecars — is resolved under
// --data-root: a relative path is taken relative to the root, an absolute path must lie
// under it, and a path or (unless allow_symlinks_out) a symlink that leaves it fails that
// sample with "path ... is outside the worker's data root ...". The path field itself is
// passed on unchanged, so the output is identical to a local run. A worker without a data
// root reads no files: it refuses a session that would run a file-reading op.
//
// Leases (docs/offload.md, "Liveness"): a session is a lease that the trainer renews with
// every message it sends (a split, a credit, or a heartbeat when it has nothing else to
// send). A session whose trainer sends nothing for WorkerOptions::session_lease_s is
// expired by ExpireLeases(): it ends with a DeadlineExceeded error output, its queued work
// and buffered output are dropped and its slot is given back at once; if the transport has
// not ended it by the next ExpireLeases() pass (a trainer that stopped reading leaves the
// transport blocked in a write), the session's expiry hook is called so that the transport
// cancels its call. The service runs ExpireLeases() on its own thread (every quarter of a
// lease, at most every second); tests may inject a clock and call it themselves.
//
// Drain (docs/offload.md, "Drain"): BeginDrain() is how a worker leaves without losing work.
// The service opens no new session; each open one says so to its trainer (a kDraining
// output), refuses every new split with a typed error (IsDrainingRefusal) and returns it to
// the trainer (kSplitReturned), goes on with the splits it holds, and ends with kDrained once
// each is done. HandBack() at the deadline returns what is still held. What a session
// delivered is never taken back, so the trainer re-queues only samples it has not received.
//
// Thread-safety: WorkerService and WorkerSession are thread-safe. The transport typically
// calls AddSplit/AddCredit/CloseInput from a reader thread and NextOutput from a writer
// thread.
#ifndef SLUICE_RPC_WORKER_SERVICE_H_
#define SLUICE_RPC_WORKER_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/core/thread_pool.h"
#include "sluice/ops/registry.h"
#include "sluice/pipeline/batch.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/map.h"
#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/split_groups.h"
#include "sluice/pipeline/stats.h"
#include "sluice/rpc/bulk_channel.h"
#include "sluice/rpc/compress.h"
#include "sluice/rpc/remote_stream.h"
#include "sluice/rpc/wire.h"

namespace sluice::rpc {

// The Sluice version this build reports and requires of its peers ("0.1.0").
const char* SluiceVersion();

struct WorkerOptions {
  std::string data_root;  // empty: this worker reads no files (read=local sessions only)
  bool allow_symlinks_out = false;  // follow symlinks that leave the data root
  // URL prefixes (http:// or https://) this worker may read, e.g. a shard store's
  // "https://data.example/train/"; empty: it reads no URLs (a spec cannot make it fetch
  // from anywhere it chooses).
  std::vector<std::string> data_urls;
  // A local cache of the remote objects (shards) it reads (ops::UrlOptions::cache_dir).
  std::string cache_dir;
  int64_t cache_max_bytes = int64_t{10} << 30;
  ops::InputLimits limits;          // caps on decoded pixels and file sizes (ops/storage.h)
  int threads = 0;        // pool threads; 0: the CPU budget (ProbeCpuBudget)
  int max_sessions = 16;
  size_t max_message_bytes = 64 << 20;   // largest message in either direction
  size_t max_session_bytes = 256 << 20;  // cap on a session's window and on its queued input
  // Cap on what all sessions together may hold: each reserves its window plus its input cap
  // at Open; a session that does not fit whole gets smaller ones (at least kMinReservation),
  // and one that does not fit at all is refused. 0: DefaultMemoryBudget().
  size_t max_total_bytes = 0;
  // Target size of one chunk: half of what the way to the trainer holds ahead of it (the
  // shared ring, sized to the TCP channel's buffers), so the worker writes one chunk while
  // the trainer reads the other, and no smaller, because every chunk costs a message, a
  // credit and hand-offs between threads on each side (docs/offload.md, "Chunk size"). A
  // session's chunk is also at most a quarter of its window, so that four are in flight
  // while credit for the first comes back, and half its message limit.
  size_t chunk_bytes = kBulkRingBytes / 2;
  double metrics_interval_s = 1.0;
  double read_limit_bytes_per_s = 0;  // > 0: a token bucket on read_file reads (read_limiter.h)
  const ops::Registry* registry = nullptr;  // null: ops::Registry::Builtin()
  std::string version;                      // empty: SluiceVersion()
  // A session whose trainer sends nothing (no split, credit or heartbeat) for this long is
  // closed and its slot released (see Leases above); 0: sessions never expire. 30 s: the
  // trainer heartbeats every third of the lease when idle, so a live trainer renews it with
  // two heartbeats to spare, and a dead one holds its memory for half a minute at most.
  double session_lease_s = 30;
  // Where the service says what happens to sessions ("session 3 opened for ...", "session 3
  // closed: ..."); null: nowhere. Called from the service's threads.
  std::function<void(const std::string&)> log;
  // The monotonic clock (nanoseconds) leases are measured with; null: NowNanos().
  std::function<int64_t()> clock;
  // Called once, from BeginDrain's thread, when the drain begins (before the sessions are
  // told): where a health service turns to NOT_SERVING. Null: nothing.
  std::function<void()> on_drain;
};

// Totals since the worker started, for its metrics (rpc/worker_metrics.h): counted where the
// work happens anyway, relaxed atomics, read at scrape time.
struct WorkerCounters {
  std::atomic<int64_t> samples_sent{0};
  std::atomic<int64_t> bytes_sent[3] = {};  // wire bytes of the chunks, by Codec
  std::atomic<int64_t> bytes_received{0};   // payload of the splits trainers sent
  std::atomic<int64_t> splits_received{0};
  std::atomic<int64_t> splits_done{0};
  std::atomic<int64_t> sessions_opened{0};
  std::atomic<int64_t> sessions_failed{0};  // a session ended by an error it reported
  // Opens refused, by cause: capacity (sessions or memory), spec (invalid), version,
  // unavailable (shutting down or draining), unauthenticated (token).
  std::atomic<int64_t> refused_capacity{0};
  std::atomic<int64_t> refused_spec{0};
  std::atomic<int64_t> refused_version{0};
  std::atomic<int64_t> refused_unavailable{0};
  std::atomic<int64_t> refused_unauthenticated{0};
};

// What the trainer asks for when it opens a session (the Open message).
struct OpenRequest {
  std::string spec_json;  // canonical JSON (any spelling ParseSpec accepts)
  int cut = 0;
  ReadMode read_mode = ReadMode::kRemoteRead;
  Codec compression = Codec::kNone;
  size_t max_inflight_bytes = 64 << 20;  // 0: the default
  std::string client_version;
  size_t max_message_bytes = 0;  // the trainer's receive limit; 0: no limit of its own
  std::string peer;              // who asks (the transport's peer address), for the log
  // The session's weight in the division of the worker's CPU (fair_share.h): finite, > 0
  // and at most kMaxSessionWeight.
  double weight = 1;
  // The trainer process it comes from (0: unknown): sessions of one client do not count
  // against each other in the CPU shares.
  uint64_t client_id = 0;
};

// A session counts as active for the division of the CPU while it has work, and for this
// long after it last ran some: three metrics intervals, so that a trainer's share does not
// move with the gaps between its batches, and one that stopped gives its share back within
// a few of its peers' controller periods.
inline constexpr double kActivityWindowS = 3.0;

struct SessionInfo {
  std::string worker_version;
  double cpu_budget = 0;
  int threads = 0;
  size_t max_inflight_bytes = 0;  // the window in force
  double session_lease_s = 0;     // the lease (0: none)
  uint64_t id = 0;                // the service's number for the session (1, 2, ...)
};

struct WorkerOutput {
  enum class Kind { kChunk, kSplitDone, kMetrics, kError, kDraining, kSplitReturned, kDrained };
  Kind kind = Kind::kError;
  uint64_t split_id = 0;
  EncodedElements chunk;   // kChunk
  size_t samples = 0;      // kChunk: samples in the chunk (members of batches included)
  uint64_t delivered = 0;  // kSplitDone
  std::vector<SkippedSample> skipped;     // kSplitDone
  std::vector<WorkerOpMetrics> metrics;  // kMetrics
  double cpu_share = 0;    // kMetrics: CPUs the session is entitled to now (cpu_share())
  int64_t cpu_ns = 0;      // kMetrics: the worker's CPU spent on the session (cpu_ns())
  Status error;                                           // kError
  double deadline_s = 0;   // kDraining: seconds until what is still held is returned
  size_t held_splits = 0;  // kDraining: splits the session holds and goes on with
  std::string reason;      // kSplitReturned: why the worker will not finish the split
};

// The refusal a draining worker gives (a new session, a new split): Unavailable, marked so
// that IsDrainingRefusal() tells it from a failure.
Status DrainingRefusal(std::string_view message);
bool IsDrainingRefusal(const Status& status);

class WorkerService;

// The smallest memory reservation a session is opened with (its window plus its input cap):
// room for a few chunks each way. Below it the worker refuses the session.
inline constexpr size_t kMinReservation = 4 << 20;

// Half the memory this process may use (its cgroup's limit, else the machine's): the rest is
// for the samples being decoded, the code and the OS.
size_t DefaultMemoryBudget();

class WorkerSession : public std::enable_shared_from_this<WorkerSession> {
 public:
  enum class Next { kOutput, kTimeout, kEnd };

  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  const SessionInfo& info() const { return info_; }

  // Queues a split's elements (source elements for remote_read, elements after read_file
  // for local_read). InvalidArgument if an element does not fit the expected schema or the
  // split id is already open; ResourceExhausted if the queued input would exceed the
  // per-session memory cap; FailedPrecondition after CloseInput/Cancel or a failure; while
  // draining, a DrainingRefusal (and a kSplitReturned output for the split, so that the
  // trainer learns it in band).
  Status AddSplit(uint64_t split_id, std::vector<Element> elements);
  // The same from the wire format (decoded without copying the payload).
  Status AddEncodedSplit(uint64_t split_id, std::string_view header, std::string payload);
  // The trainer consumed `bytes` of chunks (header + payload).
  void AddCredit(uint64_t bytes);
  // The transport took `seconds` to send a chunk of `bytes` (its message and payload): the
  // session's chunks become what the way to the trainer carries in kChunkCrossingS (its
  // send time per byte smoothed over the last few chunks), between kMinChunkBytes and the
  // session's chunk size. On a 50 Mbit link a 4 MiB chunk takes 0.7 s: a worker's
  // deliveries in a trainer's one-second period would then come in one or two lumps, and
  // its measured rate would swing by half from one period to the next.
  void NoteChunkSent(size_t bytes, double seconds);
  // The size at which a split's finished samples are flushed as a chunk now.
  size_t chunk_target() const { return chunk_target_.load(std::memory_order_relaxed); }
  // A fiftieth of the trainer's one-second measurement period: a link-bound worker sends
  // at least 50 chunks in a period, so their granularity moves its count by 2% at most.
  static constexpr double kChunkCrossingS = 0.02;
  // How far one send held up (a trainer paused, a preempted thread) can shrink the chunks
  // of a fast way while the smoothing recovers: the smallest write the shared ring takes.
  // On a slow link the crossing time already bounds the per-chunk costs (at most 50 chunks a
  // second); a sample larger than the floor is still one chunk.
  static constexpr size_t kMinChunkBytes = kBulkRingMinBytes;
  // The trainer handed over shared slots with its local bulk connection (rpc/slot_arena.h):
  // from now on the last op writes the samples' largest tensor into their regions, and the
  // chunks name those slots instead of carrying the bytes. Only where the session runs to
  // the pipeline's end without batching or compression, and the slots are of its largest
  // field's size and a batch a region; returns whether they are used.
  bool AttachSharedSlots(std::shared_ptr<SlotArenaWriter> writer);
  // The trainer is alive and has nothing to send: renews the lease (as every call above does).
  void Heartbeat();
  // Called (once, from the service's lease thread) when the lease expired and the transport
  // still has not ended the session by the next ExpireLeases() pass: it should cancel its
  // call. Set by the transport after OpenSession.
  void SetExpiryHook(std::function<void()> hook);
  // True once the lease expired.
  bool expired() const;

  // How much the session holds now (for metrics).
  struct Depths {
    int64_t open_splits = 0;
    int64_t queued_inputs = 0;   // samples waiting for a thread
    int64_t queued_outputs = 0;  // chunks waiting for the transport
    int64_t buffered_bytes = 0;
  };
  Depths depths() const;
  // Heartbeats received (for monitoring and tests).
  int64_t heartbeats() const;
  // No more splits: the session ends once every split is done and its output taken.
  void CloseInput();
  // Stops at once: queued work is dropped, NextOutput returns kEnd. Idempotent. The
  // transport calls it when the stream ends, which gives the session's slot back.
  void Cancel();
  // Ends the session with `status` (for protocol errors the transport finds): the next
  // output is kError, then kEnd.
  void Fail(Status status);
  // The worker drains (WorkerService::BeginDrain): queues a kDraining output (with
  // `deadline_s` and the splits held); new splits are refused from now on; the session ends
  // (a last kMetrics, kDrained, then kEnd) once every split it holds is done. Idempotent.
  void BeginDrain(double deadline_s);
  // The drain's deadline: each split still held is returned (a kSplitReturned with `reason`;
  // its queued and running samples are dropped, what was delivered of it stays delivered) and
  // the session ends as above. Returns how many splits. Only while draining (0 otherwise).
  size_t HandBack(std::string_view reason);
  bool draining() const;
  // Splits returned so far (refused while draining, or handed back), for monitoring and tests.
  int64_t returned_splits() const;

  // Waits up to `timeout_ms` (< 0: forever) for the next output. kEnd when the session is
  // over: cancelled, failed (after the kError output was taken), or input closed and all
  // of it done (after a last kMetrics).
  Next NextOutput(WorkerOutput* out, int64_t timeout_ms = -1);

  // Produced bytes the trainer has not credited yet, and their peak since Open.
  size_t buffered_bytes() const;
  size_t peak_buffered_bytes() const;
  // Snapshot of the per-op counters of ops [first_op, cut).
  std::vector<WorkerOpMetrics> Metrics() const;
  // The CPUs of the worker this session is entitled to now: the budget times its weight
  // over the weights of the active sessions (its own counted). Sent with every kMetrics.
  double cpu_share() const;
  // The worker process's CPU since the session opened that this session used: all of it
  // (its threads, the transport's sending, the runtime's own work) in proportion to the CPU
  // of the session's tasks among every session's. 0 before its first task ends. Sent with
  // every kMetrics: the trainer's model of a worker's CPU per sample is checked against it.
  int64_t cpu_ns() const;

 private:
  friend class WorkerService;
  struct Shared;
  struct WorkItem {
    uint64_t split_id = 0;
    size_t position = 0;  // in the split
    Element element;
    size_t bytes = 0;
  };
  struct SplitState {
    size_t total = 0;
    size_t resolved = 0;  // finished or skipped
    size_t running = 0;
    size_t encoding = 0;  // chunks being encoded outside the lock
    uint64_t delivered = 0;
    std::vector<SkippedSample> skipped;
    // Per-sample output: finished samples not yet in a chunk.
    std::vector<Element> pending;
    size_t pending_estimate = 0;
    // Batch output: the split's batches in split order (after batch only).
    std::optional<pipeline::SplitGroups> groups;
  };
  // A unit of encoding work taken out of the lock.
  struct FlushJob {
    uint64_t split_id = 0;
    std::vector<Element> elements;  // samples, or the members of one batch
    size_t estimate = 0;
    bool batch = false;
    size_t dropped_samples = 0;
  };

  WorkerSession(std::shared_ptr<Shared> shared, SessionInfo info);

  void MaybeScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AdmissibleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t BufferedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return unacked_bytes_ + pending_bytes_;
  }
  void NotePeakLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunOne();
  // A task of RunOne ends: its CPU since `cpu_start` is charged to the session's fair share,
  // then it no longer counts as running.
  void EndTaskLocked(int64_t cpu_start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Process(Element& element) const;
  // What `element` adds to a chunk on the wire at most (WireBytesUpperBound), less its
  // tensors in shared slots: the flushes, the window and the buffered bytes count what is
  // sent, so a chunk of named slots is as many samples as its bytes allow (counting the
  // slots' bytes had made every sample a chunk of its own once the send-time sizing shrank
  // the chunks to the few bytes each carries).
  // `writer`: the session's shared slots (SlotWriter(), taken once by the caller); null: none.
  static size_t WireEstimate(const Element& element, const SlotArenaWriter* writer);
  // The shared slots attached (null: none).
  std::shared_ptr<SlotArenaWriter> SlotWriter() const;
  // Per sample: flushes the split's finished samples as a chunk when it is time to.
  void CollectFlushesLocked(uint64_t split_id, SplitState& split, std::vector<FlushJob>* jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After batch: resolves sample `position` of the split (nullopt: it failed) and turns the
  // batches now complete into encoding jobs; a short last batch dropped under drop_remainder
  // is reported as skipped.
  void ResolveBatchLocked(uint64_t split_id, SplitState& split, size_t position,
                          std::optional<Element> element, std::vector<FlushJob>* jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the next task this session runs (called from a task about to end) is a sample of
  // `split_id`: it is first in the work queue and the window admits it.
  bool NextRunsSplitLocked(uint64_t split_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Flush(FlushJob job);
  void MaybeFinishSplitLocked(uint64_t split_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FinishedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSlot();
  void TouchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WorkerService::ExpireLeases for this session at `now`: expires it if its trainer has
  // been silent for `lease_ns` (true, and the silence in *silence_s), or fires the expiry
  // hook into *hook if it expired on an earlier pass and the transport still holds it.
  bool ExpireIfSilent(int64_t now, int64_t lease_ns, double* silence_s,
                      std::function<void()>* hook);

  std::shared_ptr<Shared> shared_;
  SessionInfo info_;
  // cpu_ns(): the process's CPU and every session's task CPU when the session opened, and its
  // own tasks' CPU since (the last two under shared_->mu).
  const int64_t open_process_cpu_ns_;
  int64_t open_task_cpu_ns_ = 0;
  int64_t own_task_cpu_ns_ = 0;

  // Set once by WorkerService::OpenSession before the session is shared.
  pipeline::PipelineSpec spec_;
  pipeline::BuiltOps built_;
  std::unique_ptr<pipeline::PipelineStats> stats_;
  std::vector<pipeline::MapStage> stages_;  // ops [first_op, end_op)
  Schema input_schema_;
  int first_op_ = 0;
  int end_op_ = 0;
  bool batch_ = false;
  pipeline::BatchOptions batch_options_;
  Codec codec_ = Codec::kNone;
  size_t window_ = 0;
  size_t max_input_bytes_ = 0;
  size_t message_limit_ = 0;
  size_t chunk_bytes_ = 0;  // the largest chunk: options, message limit and window
  int64_t metrics_interval_ns_ = 0;
  std::atomic<size_t> chunk_target_{0};  // chunk_bytes_ until NoteChunkSent says otherwise
  // The last op's slots for the largest field, whose buffers are regions of the trainer's
  // shared slots once attached (null where the session cannot use them; set at Open).
  std::shared_ptr<BatchSlots> shared_slots_;
  mutable std::mutex slot_writer_mu_;
  std::shared_ptr<SlotArenaWriter> slot_writer_ ABSL_GUARDED_BY(slot_writer_mu_);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  double send_s_per_byte_ ABSL_GUARDED_BY(mu_) = 0;  // NoteChunkSent's smoothed figure
  std::deque<WorkItem> work_ ABSL_GUARDED_BY(mu_);
  size_t input_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, SplitState> splits_ ABSL_GUARDED_BY(mu_);
  std::deque<WorkerOutput> outputs_ ABSL_GUARDED_BY(mu_);
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  size_t unacked_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // chunks queued or sent, not credited
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // estimate of finished, unchunked output
  size_t max_estimate_ ABSL_GUARDED_BY(mu_) = 0;   // largest per-sample output estimate
  size_t peak_buffered_ ABSL_GUARDED_BY(mu_) = 0;
  bool input_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool final_metrics_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool drained_sent_ ABSL_GUARDED_BY(mu_) = false;
  int64_t returned_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_metrics_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // True until the session takes a slot in OpenSession (and again once it gave it back).
  bool slot_released_ ABSL_GUARDED_BY(mu_) = true;
  // Its op counters were added to the service's totals (guarded by Shared::mu).
  bool retired_ = false;
  size_t reservation_ = 0;  // of the worker's memory budget, given back with the slot
  int64_t last_heard_ns_ ABSL_GUARDED_BY(mu_) = 0;  // the last message from the trainer
  int64_t heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  bool expired_ ABSL_GUARDED_BY(mu_) = false;
  bool hook_fired_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> expiry_hook_ ABSL_GUARDED_BY(mu_);
};

class WorkerService {
 public:
  explicit WorkerService(WorkerOptions options);
  ~WorkerService();
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  // What GetInfo answers (address left empty); `client_id`'s own sessions are left out of
  // active_session_weight, and so are the trainers that left before it had a session here
  // (FairShare::ActiveWeight).
  WorkerInfo Info(uint64_t client_id = 0) const;
  // ops::MeasureReadRate on the worker's storage (its data root and --data-url prefixes).
  StatusOr<double> MeasureReadRate(std::string_view path) const;
  const WorkerOptions& options() const { return options_; }
  size_t max_message_bytes() const { return options_.max_message_bytes; }

  // Validates and builds a session. Errors: InvalidArgument (bad spec, unknown op naming
  // it, bad cut or read mode), FailedPrecondition (version mismatch, naming both),
  // ResourceExhausted ("worker at capacity: 16 sessions"), Unavailable (shutting down).
  StatusOr<std::shared_ptr<WorkerSession>> OpenSession(const OpenRequest& request);

  int open_sessions() const;
  // Whether a file-reading op on this worker could read `path` (the trainer's probe asks
  // before it plans remote_read): OK, or the error a sample would get.
  Status CheckReadable(std::string_view path) const;
  // The sessions currently open (for monitoring and tests).
  std::vector<std::shared_ptr<WorkerSession>> Sessions() const;
  // Expires the sessions whose trainer has been silent for the lease (see Leases above);
  // returns how many expired in this pass. The service calls it on its own thread; tests
  // with an injected clock may call it directly.
  int ExpireLeases();
  // Sessions expired since the start.
  int64_t expired_sessions() const;
  // The counters since the start (the transport adds the opens it refuses: CountRefused).
  const WorkerCounters& counters() const;
  // Counts a refused open by its status: ResourceExhausted (capacity), InvalidArgument (spec),
  // FailedPrecondition (version), Unavailable, Unauthenticated.
  void CountRefused(const Status& status) const;
  // Per op (by name, in first-seen order), what every session ran here since the start: the
  // closed sessions' totals plus the open ones' counters.
  std::vector<pipeline::OpStatsSnapshot> OpTotals() const;
  // Cancels every open session and refuses new ones.
  void Shutdown();

  // Begins the drain (see Drain above): OpenSession refuses from now on (a DrainingRefusal),
  // WorkerOptions::on_drain is called, and every open session is told, with `deadline_s`
  // (the caller calls HandBack() then). Returns how many sessions were told; a second call
  // does nothing and returns 0.
  int BeginDrain(double deadline_s);
  // True once BeginDrain() was called: the hook for a health service (NOT_SERVING).
  bool draining() const;
  // The deadline: every open session returns the splits it still holds and ends
  // (WorkerSession::HandBack). Returns how many splits were returned.
  size_t HandBack();

 private:
  void Log(const std::string& message) const;

  WorkerOptions options_;
  double cpu_budget_ = 0;
  std::shared_ptr<WorkerSession::Shared> shared_;
  std::unique_ptr<ThreadPool> pool_;

  std::mutex lease_mu_;
  std::condition_variable lease_cv_;
  bool lease_stop_ ABSL_GUARDED_BY(lease_mu_) = false;
  std::thread lease_thread_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_WORKER_SERVICE_H_
