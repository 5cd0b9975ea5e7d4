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
// Thread-safety: Start() returns a running server; Shutdown() and Wait() may be called from
// any thread (Shutdown is idempotent). The destructor shuts down.
#ifndef SLUICE_RPC_GRPC_WORKER_SERVER_H_
#define SLUICE_RPC_GRPC_WORKER_SERVER_H_

#include <memory>
#include <string>
#include <string_view>

#include "sluice/core/status.h"
#include "sluice/rpc/worker_service.h"

namespace grpc {
class Server;
}

namespace sluice::rpc {

// The largest reply a Probe call gets (larger requests are cut to it).
inline constexpr uint64_t kMaxProbeBytes = 16 << 20;

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";  // host:port; port 0 picks a free one
  std::string token;                      // empty: no token required
  std::string tls_cert_file;              // PEM; with tls_key_file: serve TLS
  std::string tls_key_file;
  std::string tls_client_ca_file;  // PEM; require client certificates signed by it
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
  // Binds and starts serving. Errors: unreadable certificate files, TLS options given
  // partly, an address that cannot be bound ("cannot listen on ...").
  static StatusOr<std::unique_ptr<GrpcWorkerServer>> Start(ServerOptions options);
  ~GrpcWorkerServer();

  // host:port as bound (the real port when 0 was asked for).
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  WorkerService& service() { return *service_; }

  // Ends every session, then stops the server, letting calls finish for `grace_s`.
  void Shutdown(double grace_s = 2.0);
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
  std::mutex mu_;
  bool shut_down_ = false;
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_GRPC_WORKER_SERVER_H_
