#include "sluice/rpc/worker_names.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::rpc {

StatusOr<std::vector<std::string>> ResolveHost(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve '", name, "': ", gai_strerror(rc)));
  }
  std::set<std::string> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
        inet_ntop(a->ai_family, raw, text, sizeof(text)) != nullptr) {
      addresses.insert(text);
    }
  }
  freeaddrinfo(found);
  if (addresses.empty()) {
    return absl::NotFoundError(absl::StrCat("'", name, "' has no IPv4 or IPv6 address"));
  }
  return std::vector<std::string>(addresses.begin(), addresses.end());
}

StatusOr<ExpandedWorkers> ExpandWorkerNames(const std::vector<ConnectOptions>& workers,
                                            const Resolver& resolve) {
  ExpandedWorkers out;
  std::set<std::string> seen;
  const auto add = [&](ConnectOptions c) {
    if (seen.insert(c.address).second) out.workers.push_back(std::move(c));
  };
  for (const ConnectOptions& w : workers) {
    if (w.address.rfind(kDnsPrefix, 0) != 0) {
      add(w);
      continue;
    }
    const std::string rest = w.address.substr(sizeof(kDnsPrefix) - 1);
    const size_t colon = rest.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker '", w.address, "': expected dns:NAME:PORT with a port in 1..65535"));
    }
    const std::string name = rest.substr(0, colon);
    StatusOr<std::vector<std::string>> addresses = resolve(name);
    if (!addresses.ok()) {
      out.notes.push_back(
          absl::StrCat(w.address, ": no workers (", addresses.status().message(), ")"));
      continue;
    }
    std::vector<std::string> expanded;
    for (const std::string& a : *addresses) {
      ConnectOptions c = w;
      c.address = a.find(':') != std::string::npos ? absl::StrCat("[", a, "]:", port)
                                                   : absl::StrCat(a, ":", port);
      c.tls_server_name = name;
      expanded.push_back(c.address);
      add(std::move(c));
    }
    out.notes.push_back(absl::StrCat(w.address, ": ", expanded.size(),
                                     expanded.size() == 1 ? " worker (" : " workers (",
                                     absl::StrJoin(expanded, ", "), ")"));
  }
  return out;
}

}  // namespace sluice::rpc
