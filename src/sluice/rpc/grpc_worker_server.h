// GrpcWorkerServer: the gRPC face of a WorkerService (the `sluice worker` process).
//
// It converts messages and statuses and nothing else: GetInfo answers from
// WorkerService::Info(); each Process stream opens one WorkerSession, feeds it the
// trainer's splits and credits from a reader thread, and writes the session's outputs from
// the handler thread. Security: it listens where told (default 127.0.0.1:7070); with a
// token, every call must carry `authorization: Bearer <token>` (compared in constant
// time; missing or wrong gives UNAUTHENTICATED with a message that says which); with a
// certificate and key it serves TLS, and with a client CA it requires and verifies client
// certificates (mutual TLS). Messages over max_message_bytes are refused by gRPC.
//
// Liveness (docs/offload.md, "Liveness"): HTTP/2 keepalive pings both ways (the worker
// pings every kKeepaliveTimeMs of silence and drops a connection whose peer does not answer
// within kKeepaliveTimeoutMs, and accepts the trainer's pings at that rate even without a
// call in progress); sessions are leases (WorkerOptions::session_lease_s); a Process stream
// that has not sent its Open yet counts against max_pending_streams (the next one gets
// RESOURCE_EXHAUSTED) and is cancelled after open_timeout_s.
//
// Health: the standard gRPC health service (grpc.health.v1) answers for "" and for
// kHealthServiceName. It says NOT_SERVING from Start() until MarkStarted(), while the data
// root cannot be read (checked every kHealthCheckPeriodS, and by UpdateHealth()), and from
// the moment the worker drains or shuts down; SERVING otherwise. NotReadyReason() says why in
// words (the metrics port's /readyz).
//
// Thread-safety: Start() returns a running server; Shutdown() and Wait() may be called from
// any thread (Shutdown is idempotent). The destructor shuts down.
#ifndef SLUICE_RPC_GRPC_WORKER_SERVER_H_
#define SLUICE_RPC_GRPC_WORKER_SERVER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "sluice/core/status.h"
#include "sluice/rpc/worker_service.h"

namespace grpc {
class Server;
}

namespace sluice::rpc {

// The largest reply a Probe call gets (larger requests are cut to it).
inline constexpr uint64_t kMaxProbeBytes = 16 << 20;

// HTTP/2 keepalive, the same on both ends (the trainer's channels and the worker's server):
// a ping after 10 s without traffic, and the connection is dropped when the ping is not
// answered within 20 s more. A ping costs a few dozen bytes, so every 10 s is free; the
// answer comes from the peer's gRPC transport thread, not from its pipeline threads, so a
// busy but live peer answers within milliseconds, and 20 s without an answer means the
// process or the link is gone (stopped, frozen, black-holed). A dead peer is thus found
// within 30 s even when no call is in progress. The timeout is twice the trainer's hang
// floor (runtime/liveness.h): a stopped worker that holds work is first declared hung by
// the trainer, with how long it was silent, and the keepalive is the backstop for idle
// connections and for the worker's side.
inline constexpr int kKeepaliveTimeMs = 10000;
inline constexpr int kKeepaliveTimeoutMs = 20000;
// The server accepts pings this often without data: half the client's period, so that
// timer jitter never makes a well-behaved client look abusive (gRPC closes connections that
// ping more often than the server allows).
inline constexpr int kMinPingIntervalMs = kKeepaliveTimeMs / 2;

// The service name the health service answers for besides "" (the whole server).
inline constexpr char kHealthServiceName[] = "sluice.Worker";
// How often the server re-checks its data root for the health service: a probe period of
// Kubernetes' default (10 s) sees a lost data root at its next probe, and a stat() a second
// costs nothing.
inline constexpr double kHealthCheckPeriodS = 1.0;

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";  // host:port; port 0 picks a free one
  std::string token;                      // empty: no token required
  std::string tls_cert_file;              // PEM; with tls_key_file: serve TLS
  std::string tls_key_file;
  std::string tls_client_ca_file;  // PEM; require client certificates signed by it
  // Process streams connected without an Open yet: at most this many (the next is refused
  // with RESOURCE_EXHAUSTED), each cancelled after open_timeout_s. A trainer sends its Open
  // as its first message, so a live one is pending for one round trip; 64 leaves room for
  // every trainer of a full worker (16 sessions) reconnecting at once several times over,
  // while a flood of idle connections costs at most 64 handler threads.
  int max_pending_streams = 64;
  // 10 s: far above a round trip and a trainer's scheduling delay, yet short enough that
  // idle streams do not pile up.
  double open_timeout_s = 10;
  // The bulk data channel (rpc/bulk_channel.h): offered to trainers that ask, on `bulk_port`
  // of the listen address's host (0: a free port, told in each session's Opened). Never with
  // TLS: its payloads are not encrypted.
  bool bulk = true;
  int bulk_port = 0;
  // With the bulk channel, a local socket too: a trainer on this machine (in this network
  // namespace) takes its payloads through a shared-memory ring instead of TCP.
  bool bulk_shared_memory = true;
  // With the ring, shared slots: a trainer that only batches what it receives hands over
  // batch buffers the last op writes into (rpc/slot_arena.h), so neither side copies the
  // samples' largest tensor.
  bool shared_slots = true;
  WorkerOptions worker;
};

// Reads a whole file; NotFound naming it when it cannot be read.
StatusOr<std::string> ReadTextFile(const std::string& path);
// Reads a token file: its first line, surrounding whitespace removed. InvalidArgument if
// that is empty.
StatusOr<std::string> ReadTokenFile(const std::string& path);
// Constant-time comparison (the time depends only on the lengths).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

class GrpcWorkerServer {
 public:
  // Binds and starts serving. Errors: certificate or key files unreadable, not PEM or not
  // matching (InvalidArgument naming the flag and file, tls_files.h), TLS options given
  // partly, an address that cannot be bound ("cannot listen on ...").
  static StatusOr<std::unique_ptr<GrpcWorkerServer>> Start(ServerOptions options);
  ~GrpcWorkerServer();

  // host:port as bound (the real port when 0 was asked for).
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // The bulk data channel's port; 0 when none is offered (TLS, or turned off).
  int bulk_port() const;
  WorkerService& service() { return *service_; }
  // Process streams connected that have not sent their Open yet (for monitoring and tests).
  int pending_streams() const;

  // Ends every session, then stops the server, letting calls finish for `grace_s`.
  void Shutdown(double grace_s = 2.0);

  // The process is ready to serve (the health service may say SERVING from now on).
  void MarkStarted();
  // Re-checks health now and publishes it; returns why the worker is not serving ("starting",
  // "data root /d: ...", "draining", "shutting down"), empty when it is.
  std::string UpdateHealth();
  // The reason as last checked; empty: serving. Thread-safe.
  std::string NotReadyReason() const;
  // Blocks until the server has shut down.
  void Wait();

 private:
  class Impl;
  GrpcWorkerServer() = default;

  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  mutable std::mutex mu_;
  bool shut_down_ = false;
  bool started_ = false;
  std::string not_ready_ = "starting";
  std::condition_variable health_cv_;
  std::thread health_thread_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_GRPC_WORKER_SERVER_H_
