// Workers found by name: "dns:NAME:PORT" in a worker list stands for every address NAME
// resolves to (a Kubernetes headless Service answers with one A record per ready pod).
//
// The expansion happens once, when a run opens its workers (runtime::PolicyRunner::Open).
// Each address becomes its own worker; with TLS, its certificate is checked against NAME
// (the pods' certificates name the Service, not the pods' addresses).
#ifndef SLUICE_RPC_WORKER_NAMES_H_
#define SLUICE_RPC_WORKER_NAMES_H_

#include <functional>
#include <string>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/rpc/remote_stream.h"

namespace sluice::rpc {

inline constexpr char kDnsPrefix[] = "dns:";

// NAME -> its addresses (numeric, without port). NotFound with the resolver's reason when it
// has none.
using Resolver = std::function<StatusOr<std::vector<std::string>>(const std::string& name)>;

// The system's resolver (getaddrinfo: /etc/hosts, then DNS), IPv4 and IPv6, deduplicated and
// sorted so that every trainer numbers the workers alike.
StatusOr<std::vector<std::string>> ResolveHost(const std::string& name);

struct ExpandedWorkers {
  std::vector<ConnectOptions> workers;
  // One line per name: "dns:w:7070: 3 workers (10.0.0.4:7070, ...)" or why it gave none.
  std::vector<std::string> notes;
};

// `workers` with each "dns:NAME:PORT" replaced by one entry per address (the entry's other
// fields copied, tls_server_name set to NAME). A name that resolves to nothing contributes no
// worker and a note; a malformed "dns:" entry is InvalidArgument naming it. Duplicate
// addresses are kept once.
StatusOr<ExpandedWorkers> ExpandWorkerNames(const std::vector<ConnectOptions>& workers,
                                            const Resolver& resolve = ResolveHost);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_WORKER_NAMES_H_
