#include "sluice/metrics/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::metrics {

Status SplitHostPort(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  const auto bad = [&text](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", text, "': ", why, " (expected HOST:PORT)"));
  };
  if (colon == std::string::npos || colon == 0) return bad("no host");
  std::string h = text.substr(0, colon);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') return bad("unclosed [");
    h = h.substr(1, h.size() - 2);
  }
  int p = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return bad("port must be a number in 0..65535");
  }
  *host = h;
  *port = p;
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                              CollectFn collect, ReadyFn ready) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  int port = 0;
  if (Status st = SplitHostPort(listen, &s->host_, &port); !st.ok()) return st;
  s->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *s->server_;
  // One scrape at a time is plenty, and bounds what a burst of requests can cost.
  server.new_task_queue = [] { return new httplib::ThreadPool(1); };
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second process on
  // the same port binds too and the scraper gets either at random.
  server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.Get("/metrics", [collect](const httplib::Request&, httplib::Response& res) {
    res.set_content(WriteText(collect()), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [ready](const httplib::Request&, httplib::Response& res) {
    const std::string why = ready ? ready() : std::string();
    res.status = why.empty() ? 200 : 503;
    res.set_content(why.empty() ? std::string("serving\n") : why + "\n", "text/plain");
  });
  if (port == 0) {
    s->port_ = server.bind_to_any_port(s->host_);
  } else {
    s->port_ = server.bind_to_port(s->host_, port) ? port : -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", listen));
  }
  s->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // stop() is a no-op until the loop runs: wait for it so that the destructor cannot miss it.
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsServer::address() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return absl::StrCat(v6 ? "[" : "", host_, v6 ? "]" : "", ":", port_);
}

}  // namespace sluice::metrics
