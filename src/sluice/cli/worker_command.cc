// `sluice worker`: serves offloaded pipeline work to trainers until SIGINT or SIGTERM, then
// drains (docs/offload.md, "Drain"): no new sessions or splits, the splits held are finished
// (or handed back at --drain-s), the trainers are told, and it exits 0. A second signal
// during the drain stops it at once (exit 0 too).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/core/clock.h"
#include "sluice/core/files.h"
#include "sluice/metrics/http_server.h"
#include "sluice/ops/url_storage.h"
#include "sluice/pipeline/spec.h"
#include "sluice/rpc/grpc_worker_server.h"
#include "sluice/rpc/worker_metrics.h"
#include "sluice/testbed/scenario.h"

namespace sluice::cli {
namespace {

// After the drain deadline, how long the sessions get to send the splits they return and end.
constexpr double kHandBackS = 2;
// How long a drained trainer gets to end its stream before the server cuts it.
constexpr double kCloseGraceS = 3;

const char* SignalName(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

// Waits until no session is open or `deadline_ns` passes, watching `signals` meanwhile;
// returns the signal that came, or 0.
int WaitSessionsEnded(const rpc::WorkerService& service, const sigset_t& signals,
                      int64_t deadline_ns) {
  while (service.open_sessions() > 0) {
    const int64_t left_ns = deadline_ns - NowNanos();
    if (left_ns <= 0) return 0;
    const timespec wait = {0, static_cast<long>(std::min<int64_t>(left_ns, 50000000))};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig > 0) return sig;
  }
  return 0;
}

// The drain after the first SIGTERM or SIGINT (`sig`). Returns the exit status (0).
int Drain(rpc::GrpcWorkerServer& server, const sigset_t& signals, int sig, double drain_s) {
  rpc::WorkerService& service = server.service();
  const int64_t start = NowNanos();
  const int sessions = service.BeginDrain(drain_s);
  std::fprintf(stderr, "sluice worker: %s: draining %d sessions (up to %g s)\n", SignalName(sig),
               sessions, drain_s);
  int again = WaitSessionsEnded(service, signals, start + static_cast<int64_t>(drain_s * 1e9));
  if (again == 0 && service.open_sessions() > 0) {
    const int open = service.open_sessions();
    const size_t returned = service.HandBack();
    std::fprintf(stderr,
                 "sluice worker: drain deadline: %zu splits handed back to the trainers of %d "
                 "sessions\n",
                 returned, open);
    again =
        WaitSessionsEnded(service, signals, NowNanos() + static_cast<int64_t>(kHandBackS * 1e9));
  }
  if (again != 0) {
    std::fprintf(stderr, "sluice worker: %s again: stopping now (%d sessions not drained)\n",
                 SignalName(again), service.open_sessions());
    server.Shutdown(/*grace_s=*/0);
    server.Wait();
    return kExitOk;
  }
  const int left = service.open_sessions();
  if (left == 0) {
    std::fprintf(stderr, "sluice worker: drained in %.1f s\n", (NowNanos() - start) / 1e9);
  } else {
    std::fprintf(stderr, "sluice worker: %d sessions did not end after the drain; closing them\n",
                 left);
  }
  server.Shutdown(kCloseGraceS);
  server.Wait();
  return kExitOk;
}

}  // namespace

bool IsLoopbackListenAddress(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int WorkerCommand(const std::vector<std::string>& args) {
  rpc::ServerOptions options;
  std::string token_file;
  int64_t threads = 0;
  int64_t max_sessions = options.worker.max_sessions;
  int64_t max_message_bytes = static_cast<int64_t>(options.worker.max_message_bytes);
  int64_t max_session_bytes = static_cast<int64_t>(options.worker.max_session_bytes);
  std::string read_limit;
  int64_t max_memory_bytes = 0;
  double session_lease_s = options.worker.session_lease_s;
  int64_t max_pending_streams = options.max_pending_streams;
  FlagParser flags("worker", "[flags]");
  flags.AddString("listen", &options.listen, "HOST:PORT",
                  "address to serve on (port 0: any free port)");
  flags.AddString("data-root", &options.worker.data_root, "DIR",
                  "every file an op reads resolves under DIR; absolute paths must lie in it "
                  "(without it the worker reads no files: read=local only)");
  flags.AddBool("allow-symlinks-out", &options.worker.allow_symlinks_out,
                "follow symlinks under --data-root that lead out of it");
  std::string data_urls;
  flags.AddString("data-url", &data_urls, "PREFIXES",
                  "comma-separated http(s) URL prefixes this worker may read (shards on a web "
                  "server); without it the worker reads no URLs");
  flags.AddString("cache-dir", &options.worker.cache_dir, "DIR",
                  "keep whole remote shards it reads under DIR (shared with other workers)");
  flags.AddInt("cache-max-bytes", &options.worker.cache_max_bytes, "N",
               "the most --cache-dir holds; the least recently read shards go first", 1);
  int64_t max_image_pixels = options.worker.limits.max_image_pixels;
  int64_t max_file_bytes = options.worker.limits.max_file_bytes;
  flags.AddInt("max-image-pixels", &max_image_pixels, "N",
               "largest image a decoder accepts, in pixels (width x height)", 1,
               pipeline::Options::kMaxImagePixelsCap);
  flags.AddInt("max-file-bytes", &max_file_bytes, "N", "largest file an op reads", 1,
               pipeline::Options::kMaxFileBytesCap);
  flags.AddInt("threads", &threads, "N", "worker threads (0: the CPU budget)", 0, 4096);
  flags.AddString("token-file", &token_file, "FILE",
                  "require 'authorization: Bearer <token>' with the token in FILE");
  flags.AddString("tls-cert", &options.tls_cert_file, "FILE", "PEM certificate: serve TLS");
  flags.AddString("tls-key", &options.tls_key_file, "FILE", "PEM private key of --tls-cert");
  flags.AddString("tls-client-ca", &options.tls_client_ca_file, "FILE",
                  "PEM CA: require client certificates it signed (mutual TLS)");
  flags.AddInt("max-sessions", &max_sessions, "N", "concurrent trainer sessions", 1, 100000);
  flags.AddInt("max-message-bytes", &max_message_bytes, "N", "largest message accepted", 4096,
               int64_t{1} << 31);
  flags.AddInt("max-session-bytes", &max_session_bytes, "N",
               "per-session memory cap (flow-control window and queued input)", 1 << 16);
  flags.AddInt("max-memory-bytes", &max_memory_bytes, "N",
               "cap on what all sessions together hold (0: half the process's memory)", 0);
  flags.AddString("read-limit", &read_limit, "BYTES_PER_S",
                  "cap on file reads, e.g. 20000000 or 20MB (a token bucket; empty: none)");
  flags.AddDouble("session-lease-s", &session_lease_s, "S",
                  "close a session whose trainer sends nothing for S seconds (0: never)", 0, 86400);
  flags.AddInt("max-pending-streams", &max_pending_streams, "N",
               "streams connected without their Open message yet; one more is refused", 1, 100000);
  bool no_bulk = false;
  int64_t bulk_port = 0;
  flags.AddBool("no-bulk", &no_bulk,
                "send every payload on the gRPC stream: offer no bulk data channel (a plain TCP "
                "port beside --listen; never offered with TLS)");
  bool no_shared_memory = false;
  flags.AddBool("no-shared-memory", &no_shared_memory,
                "offer trainers on this machine no shared-memory ring: their payloads go on the "
                "bulk data channel's TCP port like everyone's");
  bool no_shared_slots = false;
  flags.AddBool("no-shared-slots", &no_shared_slots,
                "through the shared-memory ring, copy every sample's bytes: take no batch "
                "buffers from trainers to write samples into");
  flags.AddInt("bulk-port", &bulk_port, "PORT",
               "the bulk data channel's port on --listen's host (0: a free one, told to each "
               "trainer)",
               0, 65535);
  std::string metrics_listen;
  double drain_s = 30;
  bool check_flags = false;
  std::string ready_file;
  flags.AddString("ready-file", &ready_file, "FILE",
                  "once serving, write FILE (JSON: address, metrics address, version, threads), "
                  "whole or not at all: what a script or a supervisor waits for, with the port "
                  "chosen under --listen HOST:0");
  flags.AddString("metrics-listen", &metrics_listen, "HOST:PORT",
                  "serve Prometheus metrics on http://HOST:PORT/metrics, and /healthz (alive) "
                  "and /readyz (serving) for probes that cannot speak gRPC");
  flags.AddDouble("drain-s", &drain_s, "S",
                  "on SIGTERM: stop taking splits, finish or hand back the ones held for up to "
                  "S seconds, tell the trainers, exit 0",
                  0, 3600);
  flags.AddBool("check-flags", &check_flags,
                "parse and check the flags, then exit 0 without serving (deployment checks)");
  if (Status s = flags.Parse(args); !s.ok()) {
    return UsageError("worker", std::string(s.message()), flags.Usage());
  }
  if (!read_limit.empty()) {
    StatusOr<double> rate = testbed::ParseByteRate(read_limit);
    if (!rate.ok()) rate = testbed::ParseByteRate(read_limit + "B");  // a plain number
    if (!rate.ok() || *rate < 1) {
      return UsageError("worker",
                        absl::StrCat("--read-limit: expected bytes per second, got '", read_limit,
                                     "'"),
                        flags.Usage());
    }
    options.worker.read_limit_bytes_per_s = *rate;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    return UsageError("worker", "takes no positional arguments", flags.Usage());
  }
  for (absl::string_view prefix : absl::StrSplit(data_urls, ',', absl::SkipEmpty())) {
    if (!ops::IsUrl(std::string_view(prefix.data(), prefix.size()))) {
      return UsageError("worker",
                        absl::StrCat("--data-url: '", ops::RedactUrl(std::string_view(
                                                          prefix.data(), prefix.size())),
                                     "' is not an http:// or https:// URL"),
                        flags.Usage());
    }
    options.worker.data_urls.emplace_back(prefix);
  }
  if (check_flags) {
    // Only what the flags say: the files they name may live on another machine.
    std::printf("sluice worker: flags ok\n");
    return kExitOk;
  }
  options.worker.threads = static_cast<int>(threads);
  options.worker.limits.max_image_pixels = max_image_pixels;
  options.worker.limits.max_file_bytes = max_file_bytes;
  if (!options.worker.data_root.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(options.worker.data_root, ec)) {
      return UsageError("worker",
                        absl::StrCat("--data-root: '", options.worker.data_root,
                                     "' is not a folder this process can see"),
                        flags.Usage());
    }
  }
  options.worker.max_sessions = static_cast<int>(max_sessions);
  options.worker.max_message_bytes = static_cast<size_t>(max_message_bytes);
  options.worker.max_session_bytes = static_cast<size_t>(max_session_bytes);
  options.worker.max_total_bytes = static_cast<size_t>(max_memory_bytes);
  options.worker.session_lease_s = session_lease_s;
  options.max_pending_streams = static_cast<int>(max_pending_streams);
  options.bulk = !no_bulk;
  options.bulk_port = static_cast<int>(bulk_port);
  options.bulk_shared_memory = !no_shared_memory;
  options.shared_slots = !no_shared_slots;
  options.worker.log = [](const std::string& message) {
    std::fprintf(stderr, "sluice worker: %s\n", message.c_str());
  };
  if (!token_file.empty()) {
    auto token = rpc::ReadTokenFile(token_file);
    if (!token.ok()) return ReportError("worker", token.status());
    options.token = *token;
  }

  // Block the signals before any thread starts, then wait for them here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = rpc::GrpcWorkerServer::Start(options);
  if (!server.ok()) return ReportError("worker", server.status());
  rpc::GrpcWorkerServer* grpc_server = server->get();
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (!metrics_listen.empty()) {
    auto started = metrics::MetricsServer::Start(
        metrics_listen,
        [grpc_server] {
          return rpc::WorkerMetricFamilies(grpc_server->service(), grpc_server->NotReadyReason());
        },
        [grpc_server] { return grpc_server->NotReadyReason(); });
    if (!started.ok()) return ReportError("worker", started.status());
    metrics_server = *std::move(started);
  }
  const rpc::WorkerInfo info = (*server)->service().Info();
  // Serving from before the first line a script waits for: whoever reads "listening on" may
  // probe at once.
  (*server)->MarkStarted();
  const std::string bulk = (*server)->bulk_port() > 0
                               ? absl::StrCat(", bulk data on port ", (*server)->bulk_port())
                               : "";
  std::printf("listening on %s (sluice %s, %d threads, %s%s%s)\n", (*server)->address().c_str(),
              info.version.c_str(), info.threads,
              options.tls_cert_file.empty() ? "plaintext" : "TLS",
              options.token.empty() ? "" : ", token required", bulk.c_str());
  if (metrics_server != nullptr) {
    std::printf("metrics on http://%s/metrics\n", metrics_server->address().c_str());
  }
  std::fflush(stdout);
  if (!ready_file.empty()) {
    nlohmann::json ready{{"address", (*server)->address()},
                         {"bulk_port", (*server)->bulk_port()},
                         {"version", info.version},
                         {"threads", info.threads},
                         {"metrics", metrics_server != nullptr ? metrics_server->address() : ""}};
    if (Status s = WriteFileAtomically(ready_file, ready.dump() + "\n"); !s.ok()) {
      (*server)->Shutdown(0);
      return ReportError("worker", Annotate(s, "--ready-file"));
    }
  }
  if (options.worker.data_root.empty()) {
    std::fprintf(stderr,
                 "sluice worker: no --data-root: this worker reads no files; it serves "
                 "read=local sessions only\n");
  }
  if (!IsLoopbackListenAddress(options.listen) && options.token.empty() &&
      options.tls_cert_file.empty()) {
    std::fprintf(stderr,
                 "sluice worker: warning: listening on %s without --token-file or TLS: anyone "
                 "who can reach this address can run pipelines on this worker\n",
                 options.listen.c_str());
  }

  int sig = 0;
  sigwait(&signals, &sig);
  const int status = Drain(**server, signals, sig, drain_s);
  metrics_server.reset();  // its callbacks read the server
  return status;
}

}  // namespace sluice::cli
