// Workers found by name: "dns:NAME:PORT" in a worker list stands for every address NAME
// resolves to (a Kubernetes headless Service answers with one A record per ready pod), and
// "file:PATH" for the workers listed in PATH, one HOST:PORT or dns:NAME:PORT per line
// ('#' starts a comment).
//
// A run opens its workers from one expansion (runtime::PolicyRunner::Open); a planning run
// (`sluice`/`auto`) expands the list again every few seconds while it trains, so that
// addresses that appear join the plan and those that vanish leave it
// (runtime::AutoOptions::worker_names). Each address becomes its own worker; with TLS, its
// certificate is checked against NAME (the pods' certificates name the Service, not the
// pods' addresses).
#ifndef SLUICE_RPC_WORKER_NAMES_H_
#define SLUICE_RPC_WORKER_NAMES_H_

#include <functional>
#include <string>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/rpc/remote_stream.h"

namespace sluice::rpc {

inline constexpr char kDnsPrefix[] = "dns:";
inline constexpr char kFilePrefix[] = "file:";

// Whether `workers` has a "dns:" or "file:" entry: a set that can change during a run.
bool NamesWorkers(const std::vector<ConnectOptions>& workers);

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
// fields copied, tls_server_name set to NAME) and each "file:PATH" by its lines, expanded the
// same way (with the file entry's other fields). A name that resolves to nothing, or a file
// that cannot be read, contributes no worker and a note; a malformed "dns:" entry or line is
// InvalidArgument naming it (a line by file and number). Duplicate addresses are kept once.
StatusOr<ExpandedWorkers> ExpandWorkerNames(const std::vector<ConnectOptions>& workers,
                                            const Resolver& resolve = ResolveHost);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_WORKER_NAMES_H_
