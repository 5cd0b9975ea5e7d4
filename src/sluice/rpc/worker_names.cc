#include "sluice/rpc/worker_names.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

bool NamesWorkers(const std::vector<ConnectOptions>& workers) {
  for (const ConnectOptions& w : workers) {
    if (absl::StartsWith(w.address, kDnsPrefix) || absl::StartsWith(w.address, kFilePrefix)) {
      return true;
    }
  }
  return false;
}

namespace {

// HOST:PORT with a port in 1..65535 (HOST may be a bracketed IPv6 address).
bool IsHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  return colon != std::string::npos && colon > 0 &&
         absl::SimpleAtoi(address.substr(colon + 1), &port) && port > 0 && port <= 65535;
}

class Expander {
 public:
  explicit Expander(const Resolver& resolve) : resolve_(resolve) {}

  Status Add(const ConnectOptions& w) {
    if (absl::StartsWith(w.address, kDnsPrefix)) return AddName(w);
    if (absl::StartsWith(w.address, kFilePrefix)) return AddFile(w);
    Keep(w);
    return absl::OkStatus();
  }
  ExpandedWorkers Take() { return std::move(out_); }

 private:
  void Keep(ConnectOptions c) {
    if (seen_.insert(c.address).second) out_.workers.push_back(std::move(c));
  }

  Status AddName(const ConnectOptions& w) {
    const std::string rest = w.address.substr(sizeof(kDnsPrefix) - 1);
    const size_t colon = rest.rfind(':');
    if (!IsHostPort(rest)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker '", w.address, "': expected dns:NAME:PORT with a port in 1..65535"));
    }
    const std::string name = rest.substr(0, colon);
    const std::string port = rest.substr(colon + 1);
    StatusOr<std::vector<std::string>> addresses = resolve_(name);
    if (!addresses.ok()) {
      out_.notes.push_back(
          absl::StrCat(w.address, ": no workers (", addresses.status().message(), ")"));
      return absl::OkStatus();
    }
    std::vector<std::string> expanded;
    for (const std::string& a : *addresses) {
      ConnectOptions c = w;
      c.address = a.find(':') != std::string::npos ? absl::StrCat("[", a, "]:", port)
                                                   : absl::StrCat(a, ":", port);
      c.tls_server_name = name;
      expanded.push_back(c.address);
      Keep(std::move(c));
    }
    out_.notes.push_back(absl::StrCat(w.address, ": ", expanded.size(),
                                      expanded.size() == 1 ? " worker (" : " workers (",
                                      absl::StrJoin(expanded, ", "), ")"));
    return absl::OkStatus();
  }

  Status AddFile(const ConnectOptions& w) {
    const std::string path = w.address.substr(sizeof(kFilePrefix) - 1);
    if (path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker '", w.address, "': expected file:PATH"));
    }
    std::ifstream in(path);
    if (!in) {
      out_.notes.push_back(absl::StrCat(w.address, ": no workers (cannot read ", path, ")"));
      return absl::OkStatus();
    }
    const size_t before = out_.workers.size();
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      std::string entry(absl::StripAsciiWhitespace(line.substr(0, line.find('#'))));
      if (entry.empty()) continue;
      const bool name = absl::StartsWith(entry, kDnsPrefix);
      if ((!name && !IsHostPort(entry)) || absl::StartsWith(entry, kFilePrefix)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", number, ": expected HOST:PORT or dns:NAME:PORT, got '",
                         entry, "'"));
      }
      ConnectOptions c = w;
      c.address = entry;
      if (Status s = Add(c); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", s.message()));
      }
    }
    out_.notes.push_back(absl::StrCat(w.address, ": ", out_.workers.size() - before,
                                      out_.workers.size() - before == 1 ? " worker" : " workers"));
    return absl::OkStatus();
  }

  const Resolver& resolve_;
  ExpandedWorkers out_;
  std::set<std::string> seen_;
};

}  // namespace

StatusOr<ExpandedWorkers> ExpandWorkerNames(const std::vector<ConnectOptions>& workers,
                                            const Resolver& resolve) {
  Expander e(resolve);
  for (const ConnectOptions& w : workers) SLUICE_RETURN_IF_ERROR(e.Add(w));
  return e.Take();
}

}  // namespace sluice::rpc
