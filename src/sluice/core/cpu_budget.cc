#include "sluice/core/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sluice/core/files.h"
#include "sluice/core/status.h"

namespace sluice {

double CpuBudget::cpus() const {
  double c = affinity_cpus;
  if (quota_cpus) c = std::min(c, *quota_cpus);
  return c;
}

int CpuBudget::threads() const {
  return std::max(1, static_cast<int>(std::ceil(cpus() - 1e-9)));
}

std::optional<double> ParseCgroupV2CpuMax(std::string_view contents) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(Av(contents)), ' ', absl::SkipEmpty());
  if (parts.empty() || parts[0] == "max") return std::nullopt;
  double quota = 0, period = 100000;
  if (!absl::SimpleAtod(parts[0], &quota)) return std::nullopt;
  if (parts.size() > 1 && !absl::SimpleAtod(parts[1], &period)) return std::nullopt;
  if (quota <= 0 || period <= 0) return std::nullopt;
  return quota / period;
}

std::optional<double> ParseCgroupV1Quota(std::string_view quota, std::string_view period) {
  double q = 0, p = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(Av(quota)), &q)) return std::nullopt;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(Av(period)), &p)) return std::nullopt;
  if (q <= 0 || p <= 0) return std::nullopt;
  return q / p;
}

std::optional<std::string> ParseCgroupV2Path(std::string_view proc_self_cgroup) {
  for (absl::string_view line : absl::StrSplit(Av(proc_self_cgroup), '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) return std::string(absl::StripAsciiWhitespace(line));
  }
  return std::nullopt;
}

std::optional<std::string> ParseCgroupV1CpuPath(std::string_view proc_self_cgroup) {
  for (absl::string_view line : absl::StrSplit(Av(proc_self_cgroup), '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3 || fields[1].empty()) continue;
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller == "cpu") return std::string(absl::StripAsciiWhitespace(fields[2]));
    }
  }
  return std::nullopt;
}

namespace {

// Calls `visit` with `rel` and each of its parents, ending with "/".
template <typename Visit>
void WalkUp(std::string rel, Visit visit) {
  for (;;) {
    visit(rel == "/" ? std::string() : rel);
    if (rel.empty() || rel == "/") break;
    size_t slash = rel.rfind('/');
    rel = slash == 0 || slash == std::string::npos ? "/" : rel.substr(0, slash);
  }
}

}  // namespace

CpuBudget ProbeCpuBudget(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  CpuBudget budget;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    budget.affinity_cpus = std::max(1, CPU_COUNT(&set));
  }
  budget.source = "affinity";

  auto take = [&](std::optional<double> q, const std::string& where) {
    if (q && (!budget.quota_cpus || *q < *budget.quota_cpus)) {
      budget.quota_cpus = q;
      budget.source = where;
    }
  };

  // cgroup v2: walk from our cgroup up to the root; every level's cpu.max applies.
  std::optional<std::string> self = ReadFile(proc_self_cgroup);
  if (std::optional<std::string> v2_path = self ? ParseCgroupV2Path(*self) : std::nullopt) {
    WalkUp(*v2_path, [&](const std::string& rel) {
      const std::string dir = cgroup_root + rel;
      if (auto max = ReadFile(dir + "/cpu.max")) {
        take(ParseCgroupV2CpuMax(*max), "cgroup v2 " + dir + "/cpu.max");
      }
    });
  }
  // cgroup v1: the controller is mounted at cpu, cpu,cpuacct or the root itself; every level
  // from our own cgroup up to the hierarchy's root applies.
  std::optional<std::string> v1_path = self ? ParseCgroupV1CpuPath(*self) : std::nullopt;
  for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu", ""}) {
    WalkUp(v1_path.value_or("/"), [&](const std::string& rel) {
      const std::string dir = cgroup_root + mount + rel;
      auto quota = ReadFile(dir + "/cpu.cfs_quota_us");
      auto period = ReadFile(dir + "/cpu.cfs_period_us");
      if (quota && period) take(ParseCgroupV1Quota(*quota, *period), "cgroup v1 " + dir);
    });
  }
  return budget;
}

}  // namespace sluice
