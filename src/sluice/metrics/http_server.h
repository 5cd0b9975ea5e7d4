// MetricsServer: a small HTTP server beside a worker or a trainer, for operators.
//
//   GET /metrics  the Prometheus text format of what `collect` returns at that moment;
//   GET /healthz  200 "ok" while the process serves HTTP at all (a liveness probe);
//   GET /readyz   200 "serving" when `ready` says so, else 503 with its reason (a readiness
//                 probe that works where gRPC probes cannot, e.g. behind TLS).
//
// It binds at Start (port 0: any free port, see port()) and serves on its own thread until
// destroyed. `collect` and `ready` run on that thread and must be thread-safe. Plain HTTP: bind
// it to an address only the scraper can reach.
#ifndef SLUICE_METRICS_HTTP_SERVER_H_
#define SLUICE_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/metrics/exposition.h"

namespace httplib {
class Server;
}

namespace sluice::metrics {

// Why a process is not ready (empty: it is).
using ReadyFn = std::function<std::string()>;
using CollectFn = std::function<std::vector<Family>()>;

class MetricsServer {
 public:
  // `listen` is HOST:PORT ([v6]:PORT for IPv6). InvalidArgument for a malformed address,
  // Unavailable naming the address when it cannot be bound.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                        CollectFn collect, ReadyFn ready = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // HOST:PORT as bound.
  std::string address() const;

 private:
  MetricsServer() = default;

  std::string host_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// Splits "HOST:PORT" / "[V6]:PORT". InvalidArgument naming the text otherwise.
Status SplitHostPort(const std::string& text, std::string* host, int* port);

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_HTTP_SERVER_H_
