// Testbed: an emulated cluster on one Linux host.
//
// Each host (the trainer and every worker) is a network namespace named
// `sluice-tb-<run_id>-<host>` with its own cgroup (same name) that caps its CPU time. Worker i
// is joined to the trainer by a veth pair whose ends live only inside the two namespaces,
// addressed 10.213.<i>.1/30 (trainer side) and 10.213.<i>.2/30 (worker side), and shaped on
// both ends' egress with tc: netem for latency, tbf for bandwidth. (Where the kernel lacks
// netem the latency is left out and warnings() says so.)
//
// The run id is the creating process's pid in hex followed by one hex digit that tells
// testbeds of the same process apart, so a leftover of a crashed run (its pid is gone) can be
// recognised by name and removed by CleanLeftovers() at the next start.
//
// Teardown is idempotent and happens in the destructor at the latest; it kills every process
// left in the hosts' cgroups, deletes the namespaces (with their veths and qdiscs), any veth
// left in the root namespace by an interrupted setup, and the cgroups.
//
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). Create() and Teardown() are called from one
// thread; the const accessors, Spawn() and SetCpus() may be called from any thread.
#ifndef SLUICE_TESTBED_TESTBED_H_
#define SLUICE_TESTBED_TESTBED_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "sluice/core/status.h"

namespace sluice::testbed {

inline constexpr char kNamePrefix[] = "sluice-tb-";  // namespaces and cgroups
inline constexpr char kVethPrefix[] = "stb";         // veth names (15 characters at most)

struct WorkerHostSpec {
  double cpus = 1.0;
  double bandwidth_bps = 0;  // bits per second; 0 = not shaped
  double latency_s = 0;      // one-way delay added on each end's egress (so RTT = 2x)
};

struct TestbedSpec {
  double trainer_cpus = 1.0;
  // Further trainers on the trainer's host (data-parallel ranks on one machine): each is a
  // cgroup of its own with this CPU quota, in the trainer's network namespace, so they share
  // its links to the workers. Named trainer1, trainer2, ...
  std::vector<double> more_trainer_cpus;
  std::vector<WorkerHostSpec> workers;
};

struct CreateOptions {
  // For tests: fail with an Internal error after this many setup steps (-1: never), to show
  // that an interrupted setup leaves nothing behind.
  int fail_after_steps = -1;
};

enum class CgroupVersion { kV1, kV2 };

// Which cgroup interface this machine offers for CPU quotas; FailedPrecondition if neither.
StatusOr<CgroupVersion> DetectCgroupVersion();

// FailedPrecondition with a readable message unless the process runs as root.
Status CheckRoot();

struct Host {
  std::string name;        // "trainer", "w0", "w1", ...
  std::string netns;       // network namespace name
  std::string cgroup_dir;  // absolute path of its cgroup
  std::string address;     // its address on its link(s); the trainer's is per link
  double cpus = 0;
};

class Testbed {
 public:
  static StatusOr<std::unique_ptr<Testbed>> Create(const TestbedSpec& spec,
                                                   const CreateOptions& options = {});
  ~Testbed();
  Testbed(const Testbed&) = delete;
  Testbed& operator=(const Testbed&) = delete;

  // Removes everything this testbed made. Safe to call more than once; returns the first
  // error met but always tries every step.
  Status Teardown();

  const std::string& run_id() const { return run_id_; }
  const Host& trainer() const { return trainer_; }
  // Trainer k (0: trainer(); then the spec's more_trainer_cpus, in order).
  const Host& trainer(int k) const { return k == 0 ? trainer_ : more_trainers_[k - 1]; }
  int num_trainers() const { return 1 + static_cast<int>(more_trainers_.size()); }
  const Host& worker(int i) const { return workers_[i]; }
  int num_workers() const { return static_cast<int>(workers_.size()); }
  const TestbedSpec& spec() const { return spec_; }
  CgroupVersion cgroup_version() const { return cgroup_version_; }
  // False when a latency was asked for but the kernel has no netem qdisc.
  bool latency_emulated() const { return latency_emulated_; }
  // What could not be set up exactly as asked (shown to the user, written to the JSON).
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The trainer's address on worker i's link (where worker i reaches the trainer).
  std::string TrainerAddressFor(int worker) const;
  // The names of worker i's veth ends (trainer side, worker side).
  std::string TrainerVeth(int worker) const;
  std::string WorkerVeth(int worker) const;

  struct SpawnOptions {
    std::string stdout_path;  // empty: inherit
    std::string stderr_path;  // empty: inherit
    // false: the child joins only the host's network namespace, not its cgroup: a service
    // beside the host (the store) whose CPU is not the host's quota. Teardown does not find
    // such a child in the cgroup: the caller stops it.
    bool join_cgroup = true;
  };
  // Starts `argv` inside `host`: the child joins the host's cgroup and network namespace
  // before exec, runs in its own process group with no signal blocked, and gets SIGKILL when
  // the calling thread ends (so call it from a thread that outlives the child, normally the
  // main thread): a bench killed with SIGKILL leaves no process behind.
  StatusOr<pid_t> Spawn(const Host& host, const std::vector<std::string>& argv,
                        const SpawnOptions& options) const;
  StatusOr<pid_t> Spawn(const Host& host, const std::vector<std::string>& argv) const {
    return Spawn(host, argv, SpawnOptions{});
  }

  // The store's address (a /32): AddStoreAddress(host) puts it on the host's loopback, for a
  // store serving in that namespace; RouteStoreToTrainer(i) sends worker i's traffic for it
  // to the trainer, over their shaped link. Every host can then name the store by one URL.
  static constexpr char kStoreAddress[] = "10.213.255.1";
  Status AddStoreAddress(const Host& host) const;
  Status RouteStoreToTrainer(int worker) const;

  // Changes a host's CPU quota (for scenario events).
  Status SetCpus(const Host& host, double cpus) const;

 private:
  Testbed(std::string run_id, TestbedSpec spec, CgroupVersion version);
  Status Setup(const CreateOptions& options);

  std::string run_id_;
  TestbedSpec spec_;
  CgroupVersion cgroup_version_;
  Host trainer_;
  std::vector<Host> more_trainers_;  // cgroups of their own in trainer_'s namespace
  std::vector<Host> workers_;
  bool latency_emulated_ = true;
  std::vector<std::string> warnings_;
  bool torn_down_ = false;
};

// The root of the cgroup tree holding CPU controls ("/sys/fs/cgroup/cpu" on v1,
// "/sys/fs/cgroup" on v2).
std::string CgroupRoot(CgroupVersion version);

// Writes a CPU quota of `cpus` (fractional CPUs) into the cgroup at `dir`, with a high
// scheduling weight so the group reaches its quota on a loaded machine.
Status WriteCpuQuota(CgroupVersion version, const std::string& dir, double cpus);

// What exists on this machine with a testbed name: namespaces, veths in the root namespace,
// qdiscs on such veths, cgroups. With a non-empty `run_id`, only that run's.
struct Resources {
  std::vector<std::string> namespaces;
  std::vector<std::string> links;
  std::vector<std::string> qdiscs;
  std::vector<std::string> cgroups;
  bool empty() const {
    return namespaces.empty() && links.empty() && qdiscs.empty() && cgroups.empty();
  }
  std::string ToString() const;
};
StatusOr<Resources> ListResources(const std::string& run_id = "");

// Removes the testbed resources of runs whose creating process no longer exists (all of
// them with `include_live_runs`, never those of this process). Returns what it removed.
StatusOr<Resources> CleanLeftovers(bool include_live_runs = false);

// The pid encoded in a run id, or -1 if the id is not one of ours.
pid_t PidOfRunId(const std::string& run_id);

}  // namespace sluice::testbed

#endif  // SLUICE_TESTBED_TESTBED_H_
