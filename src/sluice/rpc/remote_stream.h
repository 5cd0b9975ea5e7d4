// RemoteStream: the trainer's side of one session with one worker (see docs/offload.md).
//
// Open() connects, authenticates and opens a session that runs ops [first_op, cut) of the
// spec on the worker. The trainer then sends splits (source elements, or raw file bytes in
// local_read mode) and reads events: chunks of processed elements, split completions,
// in-band metrics, and at most one failure, after which the stream is dead (no more
// events; the caller re-queues its open splits and may Open() a new stream later).
//
// Liveness: the channel pings the worker (HTTP/2 keepalive, grpc_worker_server.h) so a dead
// worker or link fails the stream within 30 s; and while the worker's session has a lease
// (it says so in its Opened), the stream sends a Heartbeat whenever it has sent nothing
// else for a third of the lease, so a live trainer keeps its session however idle it is.
// Deciding that a worker which answers pings but delivers nothing is hung is the caller's
// business (runtime/liveness.h); NextFor() lets it wait with a timeout.
//
// Drain (docs/offload.md, "Drain"): a worker that shuts down gracefully sends kDraining,
// returns each split it will not finish (kSplitReturned: none of its chunks follow; what came
// before stays delivered), and ends the stream once it holds nothing: the stream then fails
// ("drained") after every event received before, which Next() still returns. A worker that is
// draining refuses new streams (Open fails with Unavailable, "draining").
//
// Thread-safety: SendSplit() and Next()/NextFor() may be called from different threads; each
// from one thread at a time. Cancel() from any thread makes a blocked Next() return kFailed
// (Cancelled) promptly. The destructor cancels and joins.
#ifndef SLUICE_RPC_REMOTE_STREAM_H_
#define SLUICE_RPC_REMOTE_STREAM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/core/batch_slots.h"
#include "sluice/core/element.h"
#include "sluice/core/error_kind.h"
#include "sluice/core/placement.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/spec.h"

namespace sluice::rpc {

struct ConnectOptions {
  std::string address;        // host:port
  std::string token;          // bearer token; empty: none
  std::string tls_ca_file;    // PEM of the CA that signed the worker's cert; empty: no TLS
  std::string tls_cert_file;  // client cert for mutual TLS (with tls_key_file)
  std::string tls_key_file;
  // The name the worker's TLS certificate must carry; empty: the host of `address`. Set for
  // the workers a "dns:NAME:PORT" entry expands to (worker_names.h).
  std::string tls_server_name;
  double connect_timeout_s = 5;
  size_t max_message_bytes = 64 << 20;
  // Take the chunks' payloads on the worker's bulk data channel where it offers one
  // (rpc/bulk_channel.h); never asked for with TLS.
  bool bulk = true;
  // On the worker's machine (its local socket is in this network namespace), through a
  // shared-memory ring instead of TCP.
  bool bulk_shared_memory = true;
  // With that ring, and a cut at the pipeline's end: shared slots, so the worker writes each
  // sample's largest tensor straight into the batch buffer the batcher will view
  // (rpc/slot_arena.h).
  bool shared_slots = true;
};

// This process's id as a worker's client: random, drawn once per process, sent with GetInfo
// and Open so that a worker does not count this trainer's sessions against each other.
uint64_t ProcessClientId();

// The largest session weight: a thousand to one is more than any sharing policy needs,
// and keeps one session's virtual time from standing still.
inline constexpr double kMaxSessionWeight = 1000;

struct SessionConfig {
  pipeline::PipelineSpec spec;
  int cut = 0;  // ops [first_op, cut) run remotely; kCutAfterBatch: all ops and the batch
  ReadMode read_mode = ReadMode::kRemoteRead;
  Codec compression = Codec::kNone;
  size_t max_inflight_bytes = 64 << 20;  // flow-control window (credit)
  // The session's weight in the worker's division of its CPU between sessions (> 0).
  double weight = 1;
  // Where received tensors land, by field index: a payload on the bulk channel is read
  // straight into the next slot of the batch being assembled (core/batch_slots.h) for the
  // fields given here, so batching it is no copy. Empty: into a buffer of its own. The
  // largest of these fields is the one shared slots are offered for (rpc/slot_arena.h).
  std::map<int, std::shared_ptr<BatchSlots>> land_slots;
};

struct WorkerInfo {
  std::string address;
  std::string version;
  std::vector<std::string> ops;  // the worker's registry
  double cpu_budget = 0;         // CPUs the worker may use
  int threads = 0;               // threads its session runs
  // The weights of the sessions active there now (0: none, or an older worker): a new
  // session of weight w gets cpu_budget * w / (active_session_weight + w).
  double active_session_weight = 0;
};

// Per-op counters of the worker's session since it opened (cumulative).
struct WorkerOpMetrics {
  std::string name;
  int position = -1;  // index in the spec's `ops` (names may repeat)
  int64_t samples = 0;
  int64_t cpu_ns = 0;
  int64_t bytes_out = 0;
  int64_t errors = 0;
};

struct Split {
  uint64_t split_id = 0;
  // Source elements (fields `path`, [`label`]) for remote_read; elements after read_file
  // (with `data`) for local_read. Their SampleIds identify the samples.
  std::vector<Element> elements;
};

// A sample a worker's split did not deliver: why (for messages) and of which kind (what the
// trainer decides by: kData, an op failed on it under on_error: skip; kDropped, a short last
// batch under drop_remainder, which is not a failure).
struct SkippedSample {
  SampleId id;
  std::string reason;
  ErrorKind kind = ErrorKind::kData;
};

struct StreamEvent {
  enum class Kind { kElements, kSplitDone, kMetrics, kFailed, kDraining, kSplitReturned };
  Kind kind = Kind::kFailed;
  uint64_t split_id = 0;
  std::vector<Element> elements;  // kElements: processed samples (or batches after batch)
  // kSplitDone: samples of the split the worker dropped under on_error: skip, and why.
  std::vector<SkippedSample> skipped;
  std::vector<WorkerOpMetrics> metrics;  // kMetrics
  double cpu_share = 0;                  // kMetrics: CPUs the session is entitled to (0: unknown)
  int64_t cpu_ns = 0;                    // kMetrics: the worker's CPU on the session (0: unknown)
  Status status;                         // kFailed: names the worker and the cause
  size_t wire_bytes = 0;                 // kElements: bytes received for them
  double deadline_s = 0;                 // kDraining: seconds until it returns what it holds
  int held_splits = 0;                   // kDraining: splits it holds and goes on with
  std::string reason;                    // kSplitReturned: why it will not finish the split
};

// What a short probe of a worker measured (ProbeWorker).
struct LinkProbe {
  WorkerInfo info;           // from GetInfo
  double rtt_s = 0;          // the fastest empty round trip
  double bytes_per_s = 0;    // worker -> trainer, the best timed reply; 0: none long enough
  int64_t probe_bytes = 0;   // size of that reply
  double probe_s = 0;        // time the whole probe took
  // Over the timed calls, the time the receiving thread waited for a CPU (other threads, or
  // the trainer's CPU quota spent): left out of each call's time.
  double cpu_wait_s = 0;
  // For ProbeWorker's `check_path`: whether the worker can read that file itself (remote
  // reads), and why not; nullopt when not asked (or an older worker).
  std::optional<bool> can_read;
  std::string read_error;
  double read_limit_bytes_per_s = 0;  // the worker's --read-limit (0: none)
  // For a URL `check_path` the worker can read: its store's measured rate (0: not measured).
  double store_bytes_per_s = 0;
};

// The link probe's time per reading and in all. It runs on the trainer's CPU while the
// pipeline starts, so every byte of it delays the first batch:
// - a reading of kLinkProbeTargetS is long against a scheduler slice (4 ms at most on a
//   loaded machine: a few %), against a rate shaper's burst (a 20 ms target had read a
//   1 Gbit link at 199 MB/s) and against a fresh connection's small windows (a 50 ms target
//   read the same link a third lower than 0.1 s did, 43-50 MB/s against 66-77, and the
//   planner then compressed for a link it did not have);
// - kLinkProbeMaxS bounds the whole probe on a slow or contended link.
// The largest reply is repeated once (ProbeWorker); four repeats read no faster and had put
// a 0.5-CPU trainer's first plan 0.15 s later (docs/BENCHMARKS.md).
// Each call's time leaves out what the thread reading the reply spent waiting for a CPU
// (runnable, not running: from /proc/thread-self/schedstat). A small trainer on a fast link
// spends its quota receiving and is throttled: on the demo's 10 Gbit link a 0.5-CPU trainer's
// 16 MiB reply took 58-92 ms, 13-38 ms of it waiting for a CPU, and the reading moved between
// 188 and 1,156 MB/s from run to run; taken as the link's rate, the low ones made the worker
// "link-bound" at half its CPU's capacity. Receiving itself is the trainer's CPU, which the
// model charges per byte; the wait is neither the link nor that charge.
inline constexpr double kLinkProbeTargetS = 0.1;
inline constexpr double kLinkProbeMaxS = 1.0;

// Connects, asks GetInfo, times a few empty Probe calls (RTT) and then replies of growing
// size until one takes at least `target_s` (the bandwidth is its bytes over its time less the
// RTT), within `max_s` in all and the worker's message limit; then repeats that reply once.
// Errors as RemoteStream::Open's.
// `one_at_a_time` (optional, shared by the probes of one trainer): held around the timed
// calls, so probes of several workers time their links in turn. Timed together, the readings
// divided the trainer's CPU for receiving between them (on a 0.5-CPU trainer two 1 Gbit
// links read 59 and 37 MB/s, their sum the trainer's receive rate), and the model, which
// charges receiving to the trainer's CPU per byte, then counted that CPU twice. max_s counts
// from when the lock is taken.
StatusOr<LinkProbe> ProbeWorker(const ConnectOptions& connect,
                                double target_s = kLinkProbeTargetS,
                                double max_s = kLinkProbeMaxS,
                                const std::string& check_path = "",
                                std::mutex* one_at_a_time = nullptr);

class RemoteStream {
 public:
  // Errors (returned, never thrown) name the worker and the cause: unreachable, wrong or
  // missing token, TLS failure, unknown op or bad spec on the worker, version mismatch,
  // too many sessions.
  static StatusOr<std::unique_ptr<RemoteStream>> Open(const ConnectOptions& connect,
                                                      const SessionConfig& session);
  virtual ~RemoteStream() = default;

  virtual const WorkerInfo& info() const = 0;
  // Queues a split for sending. Fails once the stream is dead.
  virtual Status SendSplit(Split split) = 0;
  // The next event; blocks. After a kFailed event, returns kFailed again.
  StreamEvent Next() { return *NextFor(-1); }
  // The same, waiting at most `timeout_ms` (< 0: forever); nullopt when nothing came.
  virtual std::optional<StreamEvent> NextFor(int64_t timeout_ms) = 0;
  virtual void Cancel() = 0;
  // Totals since Open (for profiling): payload bytes received, messages.
  virtual int64_t bytes_received() const = 0;
  // CPU time of the receiving thread since Open (thread CPU clock): taking messages off the
  // connection (gRPC and the protobuf parse, which copies each payload once), and decoding
  // the wire format and handing the elements on (no copy of tensor bytes).
  virtual int64_t read_cpu_ns() const = 0;
  virtual int64_t decode_cpu_ns() const = 0;
  // The worker's session lease (0: none) and the heartbeats sent so far.
  virtual double session_lease_s() const = 0;
  virtual int64_t heartbeats_sent() const = 0;
  // Whether the payloads come on a bulk data channel (rpc/bulk_channel.h).
  virtual bool bulk() const { return false; }
  // Whether that channel is a shared-memory ring (the worker on this machine).
  virtual bool bulk_shared_memory() const { return false; }
  // Of bytes_received(), the payload bytes read from the bulk data channel.
  virtual int64_t bulk_bytes_received() const { return 0; }
  // Samples' tensors the worker wrote straight into shared slots (rpc/slot_arena.h).
  virtual int64_t shared_slots_received() const { return 0; }
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_REMOTE_STREAM_H_
