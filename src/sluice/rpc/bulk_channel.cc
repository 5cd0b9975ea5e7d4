#include "sluice/rpc/bulk_channel.h"

#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sluice/core/clock.h"

namespace sluice::rpc {
namespace {

std::string ErrnoText(int err) {
  char buf[128];
  // The GNU strerror_r returns the message (perhaps not in buf).
  return std::string(strerror_r(err, buf, sizeof buf));
}

int64_t MillisLeft(int64_t deadline_ns) {
  return std::max<int64_t>(0, (deadline_ns - NowNanos() + 999'999) / 1'000'000);
}

std::string RandomKey() {
  std::string key(kBulkKeyBytes, '\0');
  size_t got = 0;
  while (got < key.size()) {
    const ssize_t r = getrandom(key.data() + got, key.size() - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (errno != EINTR) {
      break;
    }
  }
  if (got < key.size()) {  // no getrandom (an old kernel): the C++ library's device
    std::random_device device;
    for (char& c : key) c = static_cast<char>(device());
  }
  return key;
}

}  // namespace

StatusOr<std::unique_ptr<BulkListener>> BulkListener::Start(const std::string& host, int port) {
  const bool any_v4 = host.empty() || host == "0.0.0.0";
  const std::string shown = absl::StrCat(any_v4 ? "0.0.0.0" : host, ":", port);
  addrinfo hints{};
  hints.ai_family = any_v4 ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(any_v4 ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for bulk data on ", shown, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = ErrnoText(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) break;
    why = ErrnoText(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for bulk data on ", shown, ": ", why));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  std::unique_ptr<BulkListener> l(new BulkListener());
  l->listen_fd_ = fd;
  l->port_ = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (l->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("bulk data listener: eventfd: ", ErrnoText(errno)));
  }
  BulkListener* raw = l.get();
  l->acceptor_ = std::thread([raw] { raw->AcceptLoop(); });
  return l;
}

BulkListener::~BulkListener() {
  if (acceptor_.joinable()) {
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
      // An eventfd write fails only on overflow, which one write cannot reach.
    }
    acceptor_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  for (const auto& [key, fd] : expected_) {
    if (fd >= 0) close(fd);
  }
}

void BulkListener::AcceptLoop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    if ((p[0].revents & POLLIN) == 0) continue;
    const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      // Out of descriptors, or the connection went before it was taken: the next one may do.
      if (errno == EMFILE || errno == ENFILE) usleep(10'000);
      continue;
    }
    Admit(c);
  }
}

void BulkListener::Admit(int fd) {
  char hello[kBulkMagic.size() + kBulkKeyBytes];
  size_t got = 0;
  const int64_t deadline = NowNanos() + static_cast<int64_t>(kBulkHelloTimeoutS * 1e9);
  while (got < sizeof hello) {
    const int64_t left_ms = MillisLeft(deadline);
    if (left_ms <= 0) break;
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = poll(p, 2, static_cast<int>(std::min<int64_t>(left_ms, INT_MAX)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || p[1].revents != 0) break;
    const ssize_t r = recv(fd, hello + got, sizeof hello - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      break;
    }
  }
  bool kept = false;
  if (got == sizeof hello && std::string_view(hello, kBulkMagic.size()) == kBulkMagic) {
    const std::string key(hello + kBulkMagic.size(), kBulkKeyBytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = expected_.find(key);
    if (it != expected_.end() && it->second < 0) {
      it->second = fd;
      kept = true;
      arrived_.notify_all();
    }
  }
  if (!kept) {
    close(fd);
    refused_.fetch_add(1, std::memory_order_relaxed);
  }
}

std::string BulkListener::Expect() {
  std::string key = RandomKey();
  std::lock_guard<std::mutex> lock(mu_);
  expected_[key] = -1;
  return key;
}

int BulkListener::Take(const std::string& key) { return TakeWithin(key, 0); }

int BulkListener::TakeWithin(const std::string& key, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto here = [&] {
    auto it = expected_.find(key);
    return it == expected_.end() || it->second >= 0;
  };
  if (timeout_s > 0) arrived_.wait_for(lock, std::chrono::duration<double>(timeout_s), here);
  auto it = expected_.find(key);
  if (it == expected_.end() || it->second < 0) return -1;
  const int fd = it->second;
  expected_.erase(it);  // once: the same key again is refused
  return fd;
}

void BulkListener::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = expected_.find(key);
  if (it == expected_.end()) return;
  if (it->second >= 0) close(it->second);
  expected_.erase(it);
}

StatusOr<int> ConnectBulk(const std::string& host, int port, std::string_view key,
                          double timeout_s) {
  const std::string shown = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("bulk data channel to ", shown, ": ", gai_strerror(rc)));
  }
  const int64_t deadline = NowNanos() + static_cast<int64_t>(timeout_s * 1e9);
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      why = ErrnoText(errno);
      continue;
    }
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int n;
        do {
          n = poll(&p, 1, static_cast<int>(std::min<int64_t>(MillisLeft(deadline), INT_MAX)));
        } while (n < 0 && errno == EINTR);
        if (n <= 0) {
          err = n == 0 ? ETIMEDOUT : errno;
        } else {
          socklen_t len = sizeof err;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    if (err != 0) {
      why = ErrnoText(err);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("bulk data channel to ", shown, ": ", why));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string hello(kBulkMagic);
  hello.append(key);
  // 40 bytes on a fresh connection: the socket's buffer always takes them.
  if (Status s = SendAll(fd, {{reinterpret_cast<const uint8_t*>(hello.data()), hello.size()}});
      !s.ok()) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("bulk data channel to ", shown, ": ", s.message()));
  }
  return fd;
}

std::optional<std::string> HostOfAddress(const std::string& address) {
  // gRPC targets with a scheme or a path ("unix:/p", "dns:///n:p", "ipv4:a:p") are not tried.
  if (address.empty() || address.find('/') != std::string::npos) return std::nullopt;
  for (const char* scheme : {"unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:"}) {
    if (absl::StartsWith(address, scheme)) return std::nullopt;
  }
  if (address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return std::nullopt;
    }
    return address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= address.size()) return std::nullopt;
  std::string host = address.substr(0, colon);
  if (host.find(':') != std::string::npos) return std::nullopt;  // an IPv6 address unbracketed
  return host;
}

Status SendAll(int fd, const std::vector<BulkPiece>& pieces) {
  std::vector<iovec> iov;
  iov.reserve(pieces.size());
  for (const BulkPiece& p : pieces) {
    if (p.size > 0) iov.push_back({const_cast<uint8_t*>(p.data), p.size});
  }
  size_t i = 0;
  while (i < iov.size()) {
    msghdr m{};
    m.msg_iov = &iov[i];
    m.msg_iovlen = std::min<size_t>(iov.size() - i, IOV_MAX);
    const ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("the bulk data channel failed: ", ErrnoText(errno)));
    }
    size_t left = static_cast<size_t>(w);
    while (left > 0 && i < iov.size()) {
      if (left >= iov[i].iov_len) {
        left -= iov[i].iov_len;
        ++i;
      } else {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
        iov[i].iov_len -= left;
        left = 0;
      }
    }
  }
  return absl::OkStatus();
}

Status RecvAll(int fd, uint8_t* out, size_t n) {
  size_t got = 0;
  int lowat = 0;
  while (got < n) {
    // Woken once this much has arrived, not for every segment: a 38 MB batch had woken the
    // reader about 3.6 times a sample. Never more than what is still to come, so the wake
    // always comes (the end of the stream wakes it too). The wait is a poll, and the read
    // takes what is there without waiting: the kernel wakes a reader only when the bytes
    // queued reach the mark, so a recv that had already copied part of a payload and slept
    // for the rest could sleep forever once less than the mark was left to come (a 38 MB
    // batch's last 161 KB sat queued until the trainer gave the worker up as hung).
    const int want = static_cast<int>(std::min<size_t>(n - got, kBulkWakeBytes));
    if (want != lowat) {
      lowat = want;
      setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("the bulk data channel failed after ", got, " of ",
                                                 n, " bytes: ", ErrnoText(errno)));
    }
    const ssize_t r = recv(fd, out + got, n - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      return absl::UnavailableError(
          absl::StrCat("the bulk data channel closed after ", got, " of ", n, " bytes"));
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("the bulk data channel failed after ", got, " of ",
                                                 n, " bytes: ", ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::rpc
