#include "sluice/testbed/testbed.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sluice/testbed/exec.h"

namespace sluice::testbed {
namespace {

constexpr char kNetnsDir[] = "/run/netns";
constexpr int64_t kCpuPeriodUs = 50000;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

Status WriteFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return absl::InternalError(
        absl::StrCat("write '", text, "' to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// The run id inside a namespace/cgroup name ("sluice-tb-<id>-<host>") or a veth name
// ("stb<id>t3"), or "" if the name is not ours.
std::string RunIdOfName(const std::string& name) {
  std::string rest;
  if (StartsWith(name, kNamePrefix)) {
    rest = name.substr(std::strlen(kNamePrefix));
  } else if (StartsWith(name, kVethPrefix)) {
    rest = name.substr(std::strlen(kVethPrefix));
  } else {
    return "";
  }
  size_t n = 0;
  while (n < rest.size() && IsHex(rest[n])) ++n;
  if (n < 2) return "";
  return rest.substr(0, n);
}

std::string NewRunId() {
  static std::atomic<unsigned> counter{0};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%x%x", static_cast<unsigned>(getpid()),
                counter.fetch_add(1) % 16);
  return buf;
}

// Kills every process in the cgroup at `dir` and waits (up to ~2 s) until it is empty.
void KillCgroupProcesses(const std::string& dir) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const std::string procs = ReadFile(dir + "/cgroup.procs");
    bool any = false;
    for (absl::string_view line : absl::StrSplit(procs, '\n', absl::SkipEmpty())) {
      const pid_t pid = static_cast<pid_t>(std::atol(std::string(line).c_str()));
      if (pid > 0 && pid != getpid()) {
        kill(pid, SIGKILL);
        any = true;
      }
    }
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status RemoveCgroup(const std::string& dir) {
  if (!Exists(dir)) return absl::OkStatus();
  KillCgroupProcesses(dir);
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::InternalError(absl::StrCat("rmdir ", dir, ": ", std::strerror(errno)));
}

Status RemoveNetns(const std::string& name) {
  if (!Exists(absl::StrCat(kNetnsDir, "/", name))) return absl::OkStatus();
  return RunChecked({"ip", "netns", "del", name});
}

Status RemoveLink(const std::string& name) {
  SLUICE_ASSIGN_OR_RETURN(ProgramResult r, RunProgram({"ip", "link", "del", name}));
  if (r.exit_code != 0 && r.output.find("Cannot find device") == std::string::npos) {
    return absl::InternalError(absl::StrCat("ip link del ", name, ": ", r.output));
  }
  return absl::OkStatus();
}

void Keep(Status& first, const Status& s) {
  if (first.ok() && !s.ok()) first = s;
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

// tc shaping on the egress of `dev` inside `netns`: netem for the delay, tbf (under it) for
// the rate. tbf's burst covers 4 ms at the rate (and at least a GSO-sized packet's worth) and
// its queue about 50 ms, so a transfer's tail drains quickly.
Status Shape(const std::string& netns, const std::string& dev, double bps, double latency_s,
             bool have_netem) {
  std::string parent = "root";
  if (latency_s > 0 && have_netem) {
    SLUICE_RETURN_IF_ERROR(
        RunChecked({"tc", "-n", netns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem",
                    "delay", absl::StrCat(Num(latency_s * 1e6), "us"), "limit", "100000"}));
    parent = "1:1";
  }
  if (bps > 0) {
    const double bytes_per_s = bps / 8;
    const double burst = std::max(bytes_per_s * 0.004, 70000.0);
    const double limit = bytes_per_s * 0.05 + burst;
    std::vector<std::string> argv = {"tc", "-n", netns, "qdisc", "add", "dev", dev};
    if (parent == "root") {
      argv.push_back("root");
    } else {
      argv.push_back("parent");
      argv.push_back(parent);
    }
    for (const std::string& w :
         {std::string("handle"), std::string("10:"), std::string("tbf"), std::string("rate"),
          absl::StrCat(Num(bps), "bit"), std::string("burst"), Num(burst), std::string("limit"),
          Num(limit)}) {
      argv.push_back(w);
    }
    SLUICE_RETURN_IF_ERROR(RunChecked(argv));
  }
  return absl::OkStatus();
}

}  // namespace

Status CheckRoot() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "the testbed needs root (network namespaces, tc and cgroups); run as root");
  }
  return absl::OkStatus();
}

StatusOr<CgroupVersion> DetectCgroupVersion() {
  if (Exists("/sys/fs/cgroup/cgroup.controllers")) {
    const std::string controllers = ReadFile("/sys/fs/cgroup/cgroup.controllers");
    for (absl::string_view c : absl::StrSplit(controllers, absl::ByAnyChar(" \n"))) {
      if (c == "cpu") return CgroupVersion::kV2;
    }
  }
  if (Exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")) return CgroupVersion::kV1;
  if (Exists("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")) return CgroupVersion::kV1;
  return absl::FailedPreconditionError(
      "no cgroup CPU controller found (neither v2 cpu.max nor v1 cpu.cfs_quota_us)");
}

std::string CgroupRoot(CgroupVersion version) {
  if (version == CgroupVersion::kV2) return "/sys/fs/cgroup";
  if (Exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")) return "/sys/fs/cgroup/cpu";
  return "/sys/fs/cgroup/cpu,cpuacct";
}

Status WriteCpuQuota(CgroupVersion version, const std::string& dir, double cpus) {
  if (!(cpus > 0)) return absl::InvalidArgumentError("a CPU quota must be positive");
  const int64_t quota = std::max<int64_t>(1000, std::llround(cpus * kCpuPeriodUs));
  // The quota is a cap; a high weight makes sure the host reaches it when the machine has
  // other load (a host of the emulated cluster owns its CPUs).
  if (version == CgroupVersion::kV2) {
    SLUICE_RETURN_IF_ERROR(WriteFile(dir + "/cpu.weight", "1000"));
    return WriteFile(dir + "/cpu.max", absl::StrCat(quota, " ", kCpuPeriodUs));
  }
  SLUICE_RETURN_IF_ERROR(WriteFile(dir + "/cpu.shares", "10240"));
  // The quota must fit the period when the period shrinks, so clear it first.
  SLUICE_RETURN_IF_ERROR(WriteFile(dir + "/cpu.cfs_quota_us", "-1"));
  SLUICE_RETURN_IF_ERROR(WriteFile(dir + "/cpu.cfs_period_us", absl::StrCat(kCpuPeriodUs)));
  return WriteFile(dir + "/cpu.cfs_quota_us", absl::StrCat(quota));
}

pid_t PidOfRunId(const std::string& run_id) {
  if (run_id.size() < 2) return -1;
  for (char c : run_id) {
    if (!IsHex(c)) return -1;
  }
  return static_cast<pid_t>(std::strtol(run_id.substr(0, run_id.size() - 1).c_str(), nullptr, 16));
}

Testbed::Testbed(std::string run_id, TestbedSpec spec, CgroupVersion version)
    : run_id_(std::move(run_id)), spec_(std::move(spec)), cgroup_version_(version) {
  const std::string root = CgroupRoot(version);
  auto make_host = [&](const std::string& host, double cpus) {
    Host h;
    h.name = host;
    h.netns = absl::StrCat(kNamePrefix, run_id_, "-", host);
    h.cgroup_dir = absl::StrCat(root, "/", h.netns);
    h.cpus = cpus;
    return h;
  };
  trainer_ = make_host("trainer", spec_.trainer_cpus);
  trainer_.address = "10.213.0.1";
  for (size_t k = 0; k < spec_.more_trainer_cpus.size(); ++k) {
    Host t = make_host(absl::StrCat("trainer", k + 1), spec_.more_trainer_cpus[k]);
    t.netns = trainer_.netns;
    t.address = trainer_.address;
    more_trainers_.push_back(std::move(t));
  }
  for (size_t i = 0; i < spec_.workers.size(); ++i) {
    Host w = make_host(absl::StrCat("w", i), spec_.workers[i].cpus);
    w.address = absl::StrCat("10.213.", i, ".2");
    workers_.push_back(std::move(w));
  }
}

Status Testbed::AddStoreAddress(const Host& host) const {
  return RunChecked(
      {"ip", "-n", host.netns, "addr", "add", absl::StrCat(kStoreAddress, "/32"), "dev", "lo"});
}

Status Testbed::RouteStoreToTrainer(int worker) const {
  return RunChecked({"ip", "-n", workers_[worker].netns, "route", "add",
                     absl::StrCat(kStoreAddress, "/32"), "via", TrainerAddressFor(worker)});
}

std::string Testbed::TrainerAddressFor(int worker) const {
  return absl::StrCat("10.213.", worker, ".1");
}
std::string Testbed::TrainerVeth(int worker) const {
  return absl::StrCat(kVethPrefix, run_id_, "t", worker);
}
std::string Testbed::WorkerVeth(int worker) const {
  return absl::StrCat(kVethPrefix, run_id_, "w", worker);
}

StatusOr<std::unique_ptr<Testbed>> Testbed::Create(const TestbedSpec& spec,
                                                   const CreateOptions& options) {
  SLUICE_RETURN_IF_ERROR(CheckRoot());
  if (spec.workers.size() > 200) return absl::InvalidArgumentError("at most 200 workers");
  if (!(spec.trainer_cpus > 0)) return absl::InvalidArgumentError("trainer cpus must be > 0");
  if (spec.more_trainer_cpus.size() > 15) return absl::InvalidArgumentError("at most 16 trainers");
  for (double cpus : spec.more_trainer_cpus) {
    if (!(cpus > 0)) return absl::InvalidArgumentError("trainer cpus must be > 0");
  }
  for (const WorkerHostSpec& w : spec.workers) {
    if (!(w.cpus > 0)) return absl::InvalidArgumentError("worker cpus must be > 0");
  }
  SLUICE_ASSIGN_OR_RETURN(CgroupVersion version, DetectCgroupVersion());
  std::unique_ptr<Testbed> tb(new Testbed(NewRunId(), spec, version));
  Status s = tb->Setup(options);
  if (!s.ok()) {
    // The destructor would do it too; doing it here keeps the setup error the one reported.
    tb->Teardown().IgnoreError();
    return s;
  }
  return tb;
}

Status Testbed::Setup(const CreateOptions& options) {
  int steps = 0;
  auto step = [&]() -> Status {
    if (options.fail_after_steps >= 0 && steps++ >= options.fail_after_steps) {
      return absl::InternalError("injected failure during testbed setup");
    }
    return absl::OkStatus();
  };
  if (cgroup_version_ == CgroupVersion::kV2) {
    const std::string control = ReadFile("/sys/fs/cgroup/cgroup.subtree_control");
    if (control.find("cpu") == std::string::npos) {
      SLUICE_RETURN_IF_ERROR(WriteFile("/sys/fs/cgroup/cgroup.subtree_control", "+cpu"));
    }
  }
  std::vector<const Host*> hosts = {&trainer_};
  for (const Host& w : workers_) hosts.push_back(&w);
  for (const Host* h : hosts) {
    SLUICE_RETURN_IF_ERROR(step());
    if (mkdir(h->cgroup_dir.c_str(), 0755) != 0) {
      return absl::InternalError(absl::StrCat("mkdir ", h->cgroup_dir, ": ", std::strerror(errno)));
    }
    SLUICE_RETURN_IF_ERROR(WriteCpuQuota(cgroup_version_, h->cgroup_dir, h->cpus));
    SLUICE_RETURN_IF_ERROR(step());
    SLUICE_RETURN_IF_ERROR(RunChecked({"ip", "netns", "add", h->netns}));
    SLUICE_RETURN_IF_ERROR(RunChecked({"ip", "-n", h->netns, "link", "set", "lo", "up"}));
  }
  for (const Host& t : more_trainers_) {  // a cgroup each, in the trainer's namespace
    SLUICE_RETURN_IF_ERROR(step());
    if (mkdir(t.cgroup_dir.c_str(), 0755) != 0) {
      return absl::InternalError(absl::StrCat("mkdir ", t.cgroup_dir, ": ", std::strerror(errno)));
    }
    SLUICE_RETURN_IF_ERROR(WriteCpuQuota(cgroup_version_, t.cgroup_dir, t.cpus));
  }
  bool want_latency = false;
  for (const WorkerHostSpec& ws : spec_.workers) want_latency = want_latency || ws.latency_s > 0;
  if (want_latency) {
    // Kernels built without sch_netem cannot add delay; the links are then only rate-shaped
    // and the caller is told (the measured round-trip time shows the truth).
    latency_emulated_ = RunChecked({"tc", "-n", trainer_.netns, "qdisc", "add", "dev", "lo", "root",
                                    "netem", "delay", "1us"})
                            .ok();
    if (latency_emulated_) {
      RunProgram({"tc", "-n", trainer_.netns, "qdisc", "del", "dev", "lo", "root"}).IgnoreError();
    } else {
      warnings_.push_back(
          "this kernel has no netem qdisc: link latencies are not emulated (rates are)");
    }
  }
  for (int i = 0; i < num_workers(); ++i) {
    const Host& w = workers_[i];
    const WorkerHostSpec& ws = spec_.workers[i];
    const std::string tv = TrainerVeth(i);
    const std::string wv = WorkerVeth(i);
    SLUICE_RETURN_IF_ERROR(step());
    SLUICE_RETURN_IF_ERROR(RunChecked({"ip", "link", "add", tv, "netns", trainer_.netns, "type",
                                       "veth", "peer", "name", wv, "netns", w.netns}));
    SLUICE_RETURN_IF_ERROR(step());
    SLUICE_RETURN_IF_ERROR(RunChecked({"ip", "-n", trainer_.netns, "addr", "add",
                                       absl::StrCat(TrainerAddressFor(i), "/30"), "dev", tv}));
    SLUICE_RETURN_IF_ERROR(RunChecked(
        {"ip", "-n", w.netns, "addr", "add", absl::StrCat(w.address, "/30"), "dev", wv}));
    SLUICE_RETURN_IF_ERROR(RunChecked({"ip", "-n", trainer_.netns, "link", "set", tv, "up"}));
    SLUICE_RETURN_IF_ERROR(RunChecked({"ip", "-n", w.netns, "link", "set", wv, "up"}));
    SLUICE_RETURN_IF_ERROR(step());
    SLUICE_RETURN_IF_ERROR(
        Shape(trainer_.netns, tv, ws.bandwidth_bps, ws.latency_s, latency_emulated_));
    SLUICE_RETURN_IF_ERROR(Shape(w.netns, wv, ws.bandwidth_bps, ws.latency_s, latency_emulated_));
  }
  return absl::OkStatus();
}

Testbed::~Testbed() { Teardown().IgnoreError(); }

Status Testbed::Teardown() {
  if (torn_down_) return absl::OkStatus();
  torn_down_ = true;
  Status first;
  std::vector<const Host*> hosts = {&trainer_};
  for (const Host& w : workers_) hosts.push_back(&w);
  for (const Host& t : more_trainers_) KillCgroupProcesses(t.cgroup_dir);
  for (const Host* h : hosts) KillCgroupProcesses(h->cgroup_dir);
  for (const Host* h : hosts) Keep(first, RemoveNetns(h->netns));
  // Deleting a namespace deletes the veth ends in it; an end still in the root namespace can
  // only come from a setup cut short, and is looked for by name.
  StatusOr<Resources> left = ListResources(run_id_);
  if (left.ok()) {
    for (const std::string& link : left->links) Keep(first, RemoveLink(link));
  }
  for (const Host* h : hosts) Keep(first, RemoveCgroup(h->cgroup_dir));
  for (const Host& t : more_trainers_) Keep(first, RemoveCgroup(t.cgroup_dir));
  return first;
}

StatusOr<pid_t> Testbed::Spawn(const Host& host, const std::vector<std::string>& argv,
                               const SpawnOptions& options) const {
  if (argv.empty()) return absl::InvalidArgumentError("Spawn: empty command");
  const std::string ns_path = absl::StrCat(kNetnsDir, "/", host.netns);
  const int ns_fd = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0) {
    return absl::InternalError(absl::StrCat("open ", ns_path, ": ", std::strerror(errno)));
  }
  const std::string procs = host.cgroup_dir + "/cgroup.procs";
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    close(ns_fd);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(ns_fd);
    close(report[0]);
    close(report[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    auto fail = [&](int stage) {
      int msg[2] = {stage, errno};
      (void)!write(report[1], msg, sizeof(msg));
      _exit(127);
    };
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    // The caller may block signals to wait for them; the child starts with none blocked.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    char buf[24];
    int n = 0;
    char digits[24];
    for (pid_t p = getpid(); p > 0; p /= 10) digits[n++] = static_cast<char>('0' + p % 10);
    for (int i = 0; i < n; ++i) buf[i] = digits[n - 1 - i];
    if (options.join_cgroup) {
      const int cg = open(procs.c_str(), O_WRONLY);
      if (cg < 0 || write(cg, buf, n) != n) fail(1);
      close(cg);
    }
    if (setns(ns_fd, CLONE_NEWNET) != 0) fail(2);
    if (!options.stdout_path.empty()) {
      const int fd = open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) fail(3);
    }
    if (!options.stderr_path.empty()) {
      const int fd = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) fail(3);
    }
    execvp(cargv[0], cargv.data());
    fail(4);
  }
  close(ns_fd);
  close(report[1]);
  int msg[2] = {0, 0};
  ssize_t got;
  do {
    got = read(report[0], msg, sizeof(msg));
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  if (got == sizeof(msg)) {
    int wstatus;
    waitpid(pid, &wstatus, 0);
    static const char* kStages[] = {"", "join the cgroup", "enter the network namespace",
                                    "open the output file", "exec"};
    return absl::InternalError(absl::StrCat(
        "starting '", JoinArgv(argv), "' in ", host.name, ": cannot ",
        kStages[(msg[0] >= 1 && msg[0] <= 4) ? msg[0] : 4], ": ", std::strerror(msg[1])));
  }
  return pid;
}

Status Testbed::SetCpus(const Host& host, double cpus) const {
  return WriteCpuQuota(cgroup_version_, host.cgroup_dir, cpus);
}

std::string Resources::ToString() const {
  return absl::StrCat("namespaces [", absl::StrJoin(namespaces, ", "), "] links [",
                      absl::StrJoin(links, ", "), "] qdiscs [", absl::StrJoin(qdiscs, ", "),
                      "] cgroups [", absl::StrJoin(cgroups, ", "), "]");
}

StatusOr<Resources> ListResources(const std::string& run_id) {
  Resources r;
  auto mine = [&](const std::string& name) {
    const std::string id = RunIdOfName(name);
    return !id.empty() && (run_id.empty() || id == run_id);
  };
  for (const std::string& name : ListDir(kNetnsDir)) {
    if (StartsWith(name, kNamePrefix) && mine(name)) r.namespaces.push_back(name);
  }
  SLUICE_ASSIGN_OR_RETURN(ProgramResult links, RunProgram({"ip", "-o", "link", "show"}));
  for (absl::string_view line : absl::StrSplit(links.output, '\n', absl::SkipEmpty())) {
    // "7: stb1a2b0t0@if6: <...>"
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(": ", 2));
    if (parts.size() < 2) continue;
    std::string name = parts[1].substr(0, parts[1].find('@'));
    if (StartsWith(name, kVethPrefix) && mine(name)) r.links.push_back(name);
  }
  SLUICE_ASSIGN_OR_RETURN(ProgramResult qdiscs, RunProgram({"tc", "qdisc", "show"}));
  for (absl::string_view line : absl::StrSplit(qdiscs.output, '\n', absl::SkipEmpty())) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      if (words[i] == "dev" && StartsWith(words[i + 1], kVethPrefix) && mine(words[i + 1])) {
        r.qdiscs.push_back(std::string(line));
      }
    }
  }
  StatusOr<CgroupVersion> version = DetectCgroupVersion();
  if (version.ok()) {
    for (const std::string& name : ListDir(CgroupRoot(*version))) {
      if (StartsWith(name, kNamePrefix) && mine(name)) r.cgroups.push_back(name);
    }
  }
  return r;
}

StatusOr<Resources> CleanLeftovers(bool include_live_runs) {
  SLUICE_ASSIGN_OR_RETURN(Resources all, ListResources());
  auto stale = [&](const std::string& name) {
    const pid_t pid = PidOfRunId(RunIdOfName(name));
    if (pid <= 0) return false;
    if (pid == getpid()) return false;
    if (include_live_runs) return true;
    return kill(pid, 0) != 0 && errno == ESRCH;
  };
  Resources removed;
  Status first;
  StatusOr<CgroupVersion> version = DetectCgroupVersion();
  const std::string root = version.ok() ? CgroupRoot(*version) : "";
  for (const std::string& c : all.cgroups) {
    if (stale(c)) KillCgroupProcesses(root + "/" + c);
  }
  for (const std::string& ns : all.namespaces) {
    if (!stale(ns)) continue;
    Keep(first, RemoveNetns(ns));
    removed.namespaces.push_back(ns);
  }
  for (const std::string& link : all.links) {
    if (!stale(link)) continue;
    Keep(first, RemoveLink(link));
    removed.links.push_back(link);
  }
  for (const std::string& c : all.cgroups) {
    if (!stale(c)) continue;
    Keep(first, RemoveCgroup(root + "/" + c));
    removed.cgroups.push_back(c);
  }
  SLUICE_RETURN_IF_ERROR(first);
  return removed;
}

}  // namespace sluice::testbed
