#include "sluice/testbed/verify.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

namespace sluice::testbed {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Moves the calling thread into the network namespace `name`.
Status EnterNetns(const std::string& name) {
  const std::string path = absl::StrCat("/run/netns/", name);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(absl::StrCat("open ", path));
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    errno = err;
    return Errno(absl::StrCat("setns ", name));
  }
  return absl::OkStatus();
}

void SetTimeouts(int fd, double seconds) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - tv.tv_sec) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

constexpr int kFrameOverheadBytes = 14 + 20 + 32;

struct SendResult {
  int64_t sent = 0;
  double rtt_s = 0;
  int mss = 0;
};

struct ReceiveResult {
  int64_t counted_bytes = 0;
  double counted_seconds = 0;
  double rtt_s = 0;
};

}  // namespace

StatusOr<LinkMeasurement> MeasureLink(const Testbed& testbed, int worker, double seconds,
                                      int64_t max_bytes) {
  if (worker < 0 || worker >= testbed.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("no worker ", worker));
  }
  const std::string trainer_addr = testbed.TrainerAddressFor(worker);
  const double io_timeout = 5.0 + seconds;
  std::promise<StatusOr<int>> port_promise;
  std::future<StatusOr<int>> port_future = port_promise.get_future();
  std::atomic<bool> port_sent{false};
  auto send_port = [&](StatusOr<int> v) {
    if (!port_sent.exchange(true)) port_promise.set_value(std::move(v));
  };
  const double warmup = seconds / 4;

  // Receiver, in the trainer's namespace.
  auto receiver = std::async(std::launch::async, [&]() -> StatusOr<ReceiveResult> {
    Status s = EnterNetns(testbed.trainer().netns);
    if (!s.ok()) {
      send_port(s);
      return s;
    }
    const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
      s = Errno("socket");
      send_port(s);
      return s;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    inet_pton(AF_INET, trainer_addr.c_str(), &addr.sin_addr);
    socklen_t len = sizeof(addr);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      s = Errno("bind/listen");
      close(lfd);
      send_port(s);
      return s;
    }
    SetTimeouts(lfd, io_timeout);
    send_port(static_cast<int>(ntohs(addr.sin_port)));
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    close(lfd);
    if (fd < 0) return Errno("accept");
    SetTimeouts(fd, io_timeout);
    std::vector<char> buf(1 << 20);
    ReceiveResult result;
    bool started = false;
    bool counting = false;
    Clock::time_point first;
    Clock::time_point count_from;
    for (;;) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        s = Errno("recv");
        close(fd);
        return s;
      }
      if (n == 0) break;
      const Clock::time_point now = Clock::now();
      if (!started) {
        started = true;
        first = now;
      }
      if (counting) {
        result.counted_bytes += n;
      } else if (std::chrono::duration<double>(now - first).count() >= warmup) {
        counting = true;
        count_from = now;
      }
    }
    if (counting) result.counted_seconds = Since(count_from);
    close(fd);
    return result;
  });

  // Sender, in the worker's namespace.
  auto sender = std::async(std::launch::async, [&]() -> StatusOr<SendResult> {
    StatusOr<int> port = port_future.get();
    if (!port.ok()) return port.status();
    SLUICE_RETURN_IF_ERROR(EnterNetns(testbed.worker(worker).netns));
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket");
    SetTimeouts(fd, io_timeout);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(*port));
    inet_pton(AF_INET, trainer_addr.c_str(), &addr.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Status s = Errno(absl::StrCat("connect to ", trainer_addr));
      close(fd);
      return s;
    }
    std::vector<char> buf(256 << 10, 'x');
    int64_t sent = 0;
    const Clock::time_point start = Clock::now();
    while (Since(start) < seconds && sent < max_bytes) {
      const ssize_t n = send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        Status s = Errno("send");
        close(fd);
        return s;
      }
      sent += n;
    }
    tcp_info info{};
    socklen_t len = sizeof(info);
    SendResult r;
    r.sent = sent;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0) {
      r.rtt_s = info.tcpi_rtt / 1e6;
      r.mss = static_cast<int>(info.tcpi_snd_mss);
    }
    close(fd);
    return r;
  });

  StatusOr<SendResult> sent = sender.get();
  if (!sent.ok()) {
    // Unblock a receiver still waiting in accept(): its timeout ends it.
    receiver.wait();
    return sent.status();
  }
  SLUICE_ASSIGN_OR_RETURN(ReceiveResult got, receiver.get());
  LinkMeasurement m;
  m.spec_bps = testbed.spec().workers[worker].bandwidth_bps;
  m.bytes = sent->sent;
  m.rtt_s = sent->rtt_s;
  m.seconds = got.counted_seconds;
  if (got.counted_seconds > 0) m.goodput_bps = got.counted_bytes * 8.0 / got.counted_seconds;
  // tc counts whole frames: each segment of `mss` payload bytes carries Ethernet (14), IPv4
  // (20) and TCP-with-timestamps (32) headers.
  const int mss = sent->mss > 0 ? sent->mss : 1448;
  m.measured_bps = m.goodput_bps * (mss + kFrameOverheadBytes) / mss;
  return m;
}

StatusOr<CpuMeasurement> MeasureCpu(const Testbed& testbed, const Host& host, double seconds) {
  const int n = std::max(1, static_cast<int>(std::ceil(host.cpus - 1e-9)));
  const std::string procs = host.cgroup_dir + "/cgroup.procs";
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      Status s = Errno("fork");
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return s;
    }
    if (pid == 0) {
      // Async-signal-safe only: join the cgroup, spin on the clock, exit. A high priority
      // keeps other load on the machine from hiding the quota: the cgroup's cap is what is
      // measured, not the machine's spare time.
      setpriority(PRIO_PROCESS, 0, -15);
      char buf[24];
      char digits[24];
      int len = 0;
      for (pid_t p = getpid(); p > 0; p /= 10) digits[len++] = static_cast<char>('0' + p % 10);
      for (int k = 0; k < len; ++k) buf[k] = digits[len - 1 - k];
      const int fd = open(procs.c_str(), O_WRONLY);
      if (fd < 0 || write(fd, buf, len) != len) _exit(3);
      close(fd);
      timespec start;
      clock_gettime(CLOCK_MONOTONIC, &start);
      for (;;) {
        timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        const double elapsed = (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
        if (elapsed >= seconds) _exit(0);
      }
    }
    pids.push_back(pid);
  }
  double cpu_seconds = 0;
  Status status;
  for (pid_t p : pids) {
    int wstatus = 0;
    rusage usage{};
    while (wait4(p, &wstatus, 0, &usage) < 0) {
      if (errno != EINTR) break;
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      status = absl::InternalError(absl::StrCat("the CPU probe could not join ", host.cgroup_dir));
    }
    cpu_seconds += usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
                   usage.ru_stime.tv_usec / 1e6;
  }
  SLUICE_RETURN_IF_ERROR(status);
  CpuMeasurement m;
  m.spec_cpus = host.cpus;
  m.seconds = seconds;
  m.measured_cpus = cpu_seconds / seconds;
  return m;
}

StatusOr<nlohmann::json> VerifyTestbed(const Testbed& testbed, double link_seconds,
                                       double cpu_seconds) {
  nlohmann::json out;
  bool ok = true;
  out["links"] = nlohmann::json::array();
  for (int i = 0; i < testbed.num_workers(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(LinkMeasurement m, MeasureLink(testbed, i, link_seconds));
    const bool link_ok = m.spec_bps <= 0 || WithinTolerance(m.measured_bps, m.spec_bps);
    ok = ok && link_ok;
    out["links"].push_back({{"worker", i},
                            {"spec_bps", m.spec_bps},
                            {"measured_bps", m.measured_bps},
                            {"goodput_bps", m.goodput_bps},
                            {"bytes", m.bytes},
                            {"seconds", m.seconds},
                            {"rtt_ms", m.rtt_s * 1e3},
                            {"spec_latency_ms", testbed.spec().workers[i].latency_s * 1e3},
                            {"ok", link_ok}});
  }
  std::vector<const Host*> hosts = {&testbed.trainer()};
  for (int i = 0; i < testbed.num_workers(); ++i) hosts.push_back(&testbed.worker(i));
  // One host at a time, so the probes do not compete for the machine's cores.
  for (const Host* h : hosts) {
    SLUICE_ASSIGN_OR_RETURN(CpuMeasurement m, MeasureCpu(testbed, *h, cpu_seconds));
    const bool cpu_ok = WithinTolerance(m.measured_cpus, m.spec_cpus);
    ok = ok && cpu_ok;
    out["cpus"][h->name] = {{"spec_cpus", m.spec_cpus},
                            {"measured_cpus", m.measured_cpus},
                            {"seconds", m.seconds},
                            {"ok", cpu_ok}};
  }
  out["latency_emulated"] = testbed.latency_emulated();
  out["warnings"] = testbed.warnings();
  out["ok"] = ok;
  return out;
}

}  // namespace sluice::testbed
