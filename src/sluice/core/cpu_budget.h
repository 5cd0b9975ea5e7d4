// How many CPUs this process may really use: the smaller of its affinity mask and its
// cgroup CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`). A
// container with 2.5 CPUs on a 64-core host gets 2.5, not 64. Pure parsing functions are
// exposed for tests; Probe() reads the real files.
#ifndef SLUICE_CORE_CPU_BUDGET_H_
#define SLUICE_CORE_CPU_BUDGET_H_

#include <optional>
#include <string>
#include <string_view>

namespace sluice {

struct CpuBudget {
  int affinity_cpus = 1;                 // CPUs in the affinity mask
  std::optional<double> quota_cpus;      // cgroup quota / period, if limited
  std::string source;                    // "affinity", "cgroup v2 /sys/fs/cgroup/...", ...

  // The usable CPUs: min(affinity, quota).
  double cpus() const;
  // Threads to run for CPU-bound work: the budget rounded up, at least 1
  // (2.5 CPUs -> 3 threads; the kernel's quota keeps the total honest).
  int threads() const;
};

// Parses a cgroup v2 `cpu.max` line ("max 100000" or "250000 100000"). nullopt if
// unlimited or malformed.
std::optional<double> ParseCgroupV2CpuMax(std::string_view contents);
// Parses cgroup v1 quota and period files' contents ("-1" means unlimited).
std::optional<double> ParseCgroupV1Quota(std::string_view quota, std::string_view period);
// From /proc/self/cgroup contents, the cgroup v2 path ("0::/a/b" -> "/a/b"), or nullopt.
std::optional<std::string> ParseCgroupV2Path(std::string_view proc_self_cgroup);

// From /proc/self/cgroup contents, the cgroup v1 path of the hierarchy that holds the
// `cpu` controller ("4:cpu,cpuacct:/a/b" -> "/a/b"), or nullopt.
std::optional<std::string> ParseCgroupV1CpuPath(std::string_view proc_self_cgroup);

// Reads affinity and the cgroup files under `cgroup_root` (default /sys/fs/cgroup),
// walking from this process's cgroup (as `proc_self_cgroup` names it, v2 and v1 alike) up
// to the root and taking the tightest quota.
CpuBudget ProbeCpuBudget(const std::string& cgroup_root = "/sys/fs/cgroup",
                         const std::string& proc_self_cgroup = "/proc/self/cgroup");

}  // namespace sluice

#endif  // SLUICE_CORE_CPU_BUDGET_H_
