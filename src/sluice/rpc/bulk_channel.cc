#include "sluice/rpc/bulk_channel.h"

#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sluice/core/clock.h"
#include "sluice/core/copy.h"

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

// The address of `name` in the abstract namespace, and its length.
socklen_t AbstractAddress(const std::string& name, sockaddr_un* a) {
  *a = sockaddr_un{};
  a->sun_family = AF_UNIX;
  a->sun_path[0] = '\0';
  std::memcpy(a->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// A Unix socket listening at a random name in the abstract namespace; -1 when none can be
// made (the caller goes without).
int ListenLocal(std::string* name) {
  const std::string raw = RandomKey();
  static constexpr char kHex[] = "0123456789abcdef";
  *name = "sluice-bulk-";
  for (int i = 0; i < 8; ++i) {
    const auto b = static_cast<unsigned char>(raw[i]);
    name->push_back(kHex[b >> 4]);
    name->push_back(kHex[b & 15]);
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a;
  const socklen_t len = AbstractAddress(*name, &a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 64) != 0) {
    close(fd);
    name->clear();
    return -1;
  }
  return fd;
}

constexpr size_t kTcpHelloBytes = kBulkMagic.size() + kBulkKeyBytes;
constexpr size_t kLocalHelloBytes = kBulkRingMagic.size() + kBulkKeyBytes + 8;
constexpr size_t kSlotsHelloBytes = 16;  // after kLocalHelloBytes, with kBulkRingSlotsMagic

}  // namespace

BulkConnection::BulkConnection(int fd, uint8_t* ring, size_t ring_bytes, bool sender)
    : fd_(fd), ring_(ring), ring_bytes_(ring_bytes), room_(sender ? ring_bytes : 0) {}

BulkConnection::~BulkConnection() {
  if (ring_ != nullptr) munmap(ring_, ring_bytes_);
  if (fd_ >= 0) close(fd_);
}

void BulkConnection::Shutdown() { shutdown(fd_, SHUT_RDWR); }

Status BulkConnection::Send(const std::vector<BulkPiece>& pieces) {
  return ring_ != nullptr ? RingSend(pieces) : SendAll(fd_, pieces);
}

Status BulkConnection::Recv(uint8_t* out, size_t n, bool read_later, bool more) {
  return ring_ != nullptr ? RingRecv(out, n, read_later, more) : RecvAll(fd_, out, n);
}

void BulkConnection::EndPayload() {
  // A worker that went away is met at the next read.
  if (ring_ != nullptr) CountBackRead().IgnoreError();
}

Status BulkConnection::CountBackRead() {
  if (unreported_ == 0) return absl::OkStatus();
  const uint64_t n = unreported_;
  unreported_ = 0;
  return SendCount(n);
}

Status BulkConnection::SendCount(uint64_t n) {
  // Host order: both ends are on one machine.
  uint8_t bytes[8];
  std::memcpy(bytes, &n, sizeof bytes);
  ++counts_sent_;
  size_t sent = 0;
  while (sent < sizeof bytes) {
    const ssize_t w = send(fd_, bytes + sent, sizeof bytes - sent, MSG_NOSIGNAL);
    if (w > 0) {
      sent += static_cast<size_t>(w);
    } else if (w < 0 && errno != EINTR) {
      if (errno == EPIPE || errno == ECONNRESET) return absl::UnavailableError("");  // closed
      return absl::UnavailableError(ErrnoText(errno));
    }
  }
  return absl::OkStatus();
}

// An error with an empty message: the peer closed its end.
// SendCount and ReadCounts fail with an empty message where the peer closed its end.
namespace {
Status Described(const Status& s) {
  if (s.code() != absl::StatusCode::kUnavailable) return s;
  return absl::UnavailableError(s.message().empty()
                                    ? std::string("the bulk data channel closed")
                                    : absl::StrCat("the bulk data channel failed: ", s.message()));
}
}  // namespace

Status BulkConnection::ReadCounts(bool wait, uint64_t* sum) {
  uint8_t buf[512];
  bool counted = false;
  for (;;) {
    std::memcpy(buf, partial_, partial_size_);
    const size_t space = sizeof buf - partial_size_;
    const ssize_t r = recv(fd_, buf + partial_size_, space, wait && !counted ? 0 : MSG_DONTWAIT);
    if (r == 0) return absl::UnavailableError("");  // closed
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      return absl::UnavailableError(ErrnoText(errno));
    }
    const size_t have = partial_size_ + static_cast<size_t>(r);
    const size_t whole = have / 8 * 8;
    for (size_t i = 0; i < whole; i += 8) {
      uint64_t v;
      std::memcpy(&v, buf + i, sizeof v);
      if (v > ring_bytes_) {
        return absl::DataLossError(absl::StrCat("the peer counted ", v,
                                                " bytes at once on a shared ring of ",
                                                ring_bytes_));
      }
      *sum += v;
      counted = true;
    }
    partial_size_ = have - whole;
    std::memcpy(partial_, buf + whole, partial_size_);
    // Everything queued was read when the read did not fill the buffer.
    if (static_cast<size_t>(r) < space && (counted || !wait)) return absl::OkStatus();
  }
}

Status BulkConnection::RingSend(const std::vector<BulkPiece>& pieces) {
  // The room the trainer gave back since the last payload (without waiting): it counts
  // back after every payload, and those counts must not pile up in the socket.
  const auto take_freed = [this](bool wait) -> Status {
    uint64_t freed = 0;
    if (Status s = ReadCounts(wait, &freed); !s.ok()) return Described(s);
    if (freed > ring_bytes_ - room_) {
      return absl::DataLossError(absl::StrCat("the trainer freed ", freed,
                                              " bytes of the shared ring where ",
                                              ring_bytes_ - room_, " were in use"));
    }
    room_ += freed;
    return absl::OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(take_freed(false));
  uint64_t written = 0;  // not yet counted to the trainer
  for (const BulkPiece& p : pieces) {
    size_t off = 0;
    while (off < p.size) {
      if (room_ == 0) {
        if (written > 0) {
          if (Status s = SendCount(written); !s.ok()) return Described(s);
        }
        written = 0;
        SLUICE_RETURN_IF_ERROR(take_freed(true));
        continue;
      }
      const size_t c = std::min<size_t>({room_, p.size - off, ring_bytes_ - pos_});
      std::memcpy(ring_ + pos_, p.data + off, c);
      pos_ = (pos_ + c) % ring_bytes_;
      room_ -= c;
      written += c;
      off += c;
    }
  }
  if (written > 0) return Described(SendCount(written));
  return absl::OkStatus();
}

Status BulkConnection::RingRecv(uint8_t* out, size_t n, bool read_later, bool more) {
  // One way for the whole read, and its copies' time for the chooser (core/copy.h).
  const bool past_cache = read_later && landing_.NextPastCache(n);
  const bool timed = read_later && CopyWayChooser::Timed(n);
  int64_t copy_ns = 0;
  size_t got = 0;
  while (got < n) {
    if (room_ == 0) {
      // All that was written is read: say so before waiting (the worker may be waiting for
      // room), then wait for more.
      Status s = CountBackRead();
      uint64_t more = 0;
      if (s.ok()) s = ReadCounts(true, &more);
      if (s.code() == absl::StatusCode::kDataLoss) return s;
      if (!s.ok()) {
        // ReadCounts: an empty message is the peer's end of the stream.
        const bool closed = s.message().empty();
        return absl::UnavailableError(absl::StrCat(
            "the bulk data channel ", closed ? "closed" : "failed", " after ", got, " of ", n,
            " bytes", closed ? "" : absl::StrCat(": ", s.message())));
      }
      if (more > ring_bytes_) {
        return absl::DataLossError(absl::StrCat("the worker counted ", more,
                                                " bytes into a shared ring of ", ring_bytes_));
      }
      room_ += more;
      continue;
    }
    const size_t c = std::min<size_t>({room_, n - got, ring_bytes_ - pos_});
    const int64_t from = timed ? NowNanos() : 0;
    if (past_cache) {
      CopyPastCache(out + got, ring_ + pos_, c);
    } else {
      std::memcpy(out + got, ring_ + pos_, c);
    }
    if (timed) copy_ns += NowNanos() - from;
    pos_ = (pos_ + c) % ring_bytes_;
    room_ -= c;
    unreported_ += c;
    got += c;
  }
  if (timed) landing_.Note(n, copy_ns);
  // The room back at once (unless the payload's next part follows): the worker takes it
  // before its next payload without waiting. The payload is whole either way: a trainer
  // whose worker went away meets it at the next read.
  if (!more) EndPayload();
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<BulkListener>> BulkListener::Start(const std::string& host, int port,
                                                             bool shared_memory,
                                                             bool shared_slots) {
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
  l->shared_slots_ = shared_slots;
  l->port_ = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (l->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("bulk data listener: eventfd: ", ErrnoText(errno)));
  }
  if (shared_memory) l->local_fd_ = ListenLocal(&l->local_name_);
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
  if (local_fd_ >= 0) close(local_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void BulkListener::AcceptLoop() {
  for (;;) {
    pollfd p[3] = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}, {local_fd_, POLLIN, 0}};
    if (poll(p, local_fd_ >= 0 ? 3 : 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[0].revents != 0) return;
    for (int i = 1; i < 3; ++i) {
      if ((p[i].revents & POLLIN) == 0) continue;
      const int c = accept4(p[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        // Out of descriptors, or the connection went before it was taken: the next one may.
        if (errno == EMFILE || errno == ENFILE) usleep(10'000);
        continue;
      }
      if (i == 1) {
        Admit(c);
      } else {
        AdmitLocal(c);
      }
    }
  }
}

bool BulkListener::ReadHello(int fd, char* out, size_t n, std::vector<int>* fds) {
  size_t got = 0;
  const int64_t deadline = NowNanos() + static_cast<int64_t>(kBulkHelloTimeoutS * 1e9);
  while (got < n) {
    const int64_t left_ms = MillisLeft(deadline);
    if (left_ms <= 0) return false;
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int ready = poll(p, 2, static_cast<int>(std::min<int64_t>(left_ms, INT_MAX)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || p[1].revents != 0) return false;
    iovec iov{out + got, n - got};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (fds != nullptr) {
      m.msg_control = control;
      m.msg_controllen = sizeof control;
    }
    const ssize_t r = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r > 0 && fds != nullptr) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int d;
          std::memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof d);
          fds->push_back(d);
        }
      }
    }
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return false;
    }
  }
  return true;
}

void BulkListener::Keep(const std::string& key, std::unique_ptr<BulkConnection> c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = expected_.find(key);
    if (it != expected_.end() && it->second == nullptr) {
      it->second = std::move(c);
      arrived_.notify_all();
      return;
    }
  }
  refused_.fetch_add(1, std::memory_order_relaxed);  // `c` closes
}

void BulkListener::Admit(int fd) {
  char hello[kTcpHelloBytes];
  if (!ReadHello(fd, hello, sizeof hello, nullptr) ||
      std::string_view(hello, kBulkMagic.size()) != kBulkMagic) {
    close(fd);
    refused_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Keep(std::string(hello + kBulkMagic.size(), kBulkKeyBytes),
       std::make_unique<BulkConnection>(fd));
}

void BulkListener::AdmitLocal(int fd) {
  char hello[kLocalHelloBytes];
  std::vector<int> fds;
  const bool read = ReadHello(fd, hello, sizeof hello, &fds);
  uint8_t* ring = nullptr;
  uint64_t size = 0;
  std::string key;
  const std::string_view magic(hello, kBulkRingMagic.size());
  const bool with_slots = read && magic == kBulkRingSlotsMagic;
  // Shared slots: their layout follows, and their memfd the ring's.
  char slots_hello[kSlotsHelloBytes];
  const bool slots_read =
      with_slots && fds.size() == 2 && ReadHello(fd, slots_hello, sizeof slots_hello, nullptr);
  if (read && ((fds.size() == 1 && magic == kBulkRingMagic) || slots_read)) {
    key.assign(hello + kBulkRingMagic.size(), kBulkKeyBytes);
    std::memcpy(&size, hello + kBulkRingMagic.size() + kBulkKeyBytes, sizeof size);
    bool expected = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = expected_.find(key);
      expected = it != expected_.end() && it->second == nullptr;
    }
    // Mapped only for a key a session holds, and only a memfd of the size announced that
    // its sender can no longer shrink (a shrunk mapping would fault on our writes).
    struct stat st{};
    const int seals = fcntl(fds[0], F_GET_SEALS);
    if (expected && size >= kBulkRingMinBytes && size <= kBulkRingMaxBytes && seals >= 0 &&
        (seals & F_SEAL_SHRINK) != 0 && fstat(fds[0], &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<uint64_t>(st.st_size) == size) {
      void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
      if (m != MAP_FAILED) ring = static_cast<uint8_t*>(m);
    }
  }
  std::shared_ptr<SlotArenaWriter> slots;
  if (ring != nullptr && slots_read && shared_slots_) {
    SlotArenaLayout layout;
    std::memcpy(&layout.regions, slots_hello, 4);
    std::memcpy(&layout.slots, slots_hello + 4, 4);
    std::memcpy(&layout.slot_bytes, slots_hello + 8, 8);
    // Slots that do not map (a layout out of bounds, not a sealed memfd of its size) are left
    // out: the ring carries every byte, as without them.
    StatusOr<std::shared_ptr<SlotArenaWriter>> mapped = SlotArenaWriter::Map(fds[1], layout);
    if (mapped.ok()) slots = *std::move(mapped);
  }
  for (const int d : fds) close(d);  // the mapping keeps the memory
  if (ring == nullptr) {
    close(fd);
    refused_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto conn = std::make_unique<BulkConnection>(fd, ring, size, /*sender=*/true);
  conn->set_slot_writer(std::move(slots));
  Keep(key, std::move(conn));
}

std::string BulkListener::Expect() {
  std::string key = RandomKey();
  std::lock_guard<std::mutex> lock(mu_);
  expected_[key] = nullptr;
  return key;
}

std::unique_ptr<BulkConnection> BulkListener::Take(const std::string& key) {
  return TakeWithin(key, 0);
}

BulkConnection* BulkListener::ArrivedWithin(std::unique_lock<std::mutex>& lock,
                                            const std::string& key, double timeout_s) {
  const auto here = [&] {
    auto it = expected_.find(key);
    return it == expected_.end() || it->second != nullptr;
  };
  if (timeout_s > 0) arrived_.wait_for(lock, std::chrono::duration<double>(timeout_s), here);
  auto it = expected_.find(key);
  return it == expected_.end() ? nullptr : it->second.get();
}

std::unique_ptr<BulkConnection> BulkListener::TakeWithin(const std::string& key,
                                                         double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ArrivedWithin(lock, key, timeout_s) == nullptr) return nullptr;
  auto it = expected_.find(key);
  std::unique_ptr<BulkConnection> c = std::move(it->second);
  expected_.erase(it);  // once: the same key again is refused
  return c;
}

std::shared_ptr<SlotArenaWriter> BulkListener::SlotsWithin(const std::string& key,
                                                           double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  BulkConnection* c = ArrivedWithin(lock, key, timeout_s);
  return c != nullptr ? c->slot_writer() : nullptr;
}

void BulkListener::Forget(const std::string& key) {
  std::unique_ptr<BulkConnection> closing;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = expected_.find(key);
  if (it == expected_.end()) return;
  closing = std::move(it->second);
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

ssize_t SendWithDescriptors(int socket_fd, std::string_view bytes,
                            const std::vector<int>& attached) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (!attached.empty()) {  // at most two: the ring's and the slots'
    const size_t n = std::min<size_t>(attached.size(), 2);
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(n * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    std::memcpy(CMSG_DATA(c), attached.data(), n * sizeof(int));
  }
  ssize_t w;
  do {
    w = sendmsg(socket_fd, &m, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  return w;
}

StatusOr<std::unique_ptr<BulkConnection>> ConnectBulkLocal(const std::string& name,
                                                           std::string_view key,
                                                           size_t ring_bytes,
                                                           std::shared_ptr<SlotArena> slots) {
  const auto fail = [&name](const char* what, int err) {
    return absl::UnavailableError(
        absl::StrCat("local bulk data channel ", name, ": ", what, ": ", ErrnoText(err)));
  };
  sockaddr_un a;
  if (name.empty() || name.size() + 1 > sizeof a.sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("no local bulk data channel is named \"",
                                                   name, "\""));
  }
  // Non-blocking: a listener whose queue is full refuses at once instead of holding the
  // trainer (which then connects over TCP).
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return fail("socket", errno);
  const socklen_t len = AbstractAddress(name, &a);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    const int err = errno;
    close(fd);
    return fail("connect", err);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int ring_fd = memfd_create("sluice-bulk-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (ring_fd < 0) {
    const int err = errno;
    close(fd);
    return fail("memfd_create", err);
  }
  void* ring = MAP_FAILED;
  int err = 0;
  if (ftruncate(ring_fd, static_cast<off_t>(ring_bytes)) != 0 ||
      fcntl(ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    err = errno;
  } else {
    ring = mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ring_fd, 0);
    if (ring == MAP_FAILED) err = errno;
  }
  if (ring == MAP_FAILED) {
    close(ring_fd);
    close(fd);
    return fail("the shared ring", err);
  }
  std::string hello(slots != nullptr ? kBulkRingSlotsMagic : kBulkRingMagic);
  hello.append(key);
  const uint64_t size = ring_bytes;
  hello.append(reinterpret_cast<const char*>(&size), sizeof size);
  std::vector<int> attached = {ring_fd};
  if (slots != nullptr) {
    const SlotArenaLayout& l = slots->layout();
    hello.append(reinterpret_cast<const char*>(&l.regions), 4);
    hello.append(reinterpret_cast<const char*>(&l.slots), 4);
    hello.append(reinterpret_cast<const char*>(&l.slot_bytes), 8);
    attached.push_back(slots->fd());
  }
  // 48 or 64 bytes on a fresh connection: the socket's buffer always takes them whole.
  const ssize_t w = SendWithDescriptors(fd, hello, attached);
  err = errno;
  close(ring_fd);  // the worker got its own descriptor; the mapping keeps ours
  if (slots != nullptr) slots->CloseFd();
  if (w != static_cast<ssize_t>(hello.size())) {
    munmap(ring, ring_bytes);
    close(fd);
    return fail("hello", w < 0 ? err : EPIPE);
  }
  auto conn = std::make_unique<BulkConnection>(fd, static_cast<uint8_t*>(ring), ring_bytes,
                                               /*sender=*/false);
  conn->set_slot_arena(std::move(slots));
  return conn;
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
