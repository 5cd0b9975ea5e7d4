// MetricStore: the measured costs of a pipeline on a host (policy::Costs), kept on disk so
// that a repeated run plans from its first step instead of profiling first, and the plans
// that measured no faster than all-local there (MeasuredPlan), so that it does not start on
// one again, and the plan the last run ended on (docs/policy.md, "The metric store").
//
// One JSON file per key in a directory (default $XDG_CACHE_HOME/sluice, else
// ~/.cache/sluice), named <pipeline fingerprint>-<host fingerprint>.json. The pipeline
// fingerprint is pipeline::Fingerprint(spec); the host fingerprint hashes the CPU model
// (/proc/cpuinfo) and the CPU budget, so a different machine or quota misses. Writes are
// atomic (a temporary file in the same directory, then rename): a reader sees the old file
// or the new one, never half of one. Load ignores a stale entry (older than max_age_s) or a
// corrupt one (unreadable, not JSON, wrong format or key) and says why in a warning string
// for the caller to print; a missing entry is a plain miss without a warning.
//
// Thread-safety: the object is immutable after construction; concurrent Save/Load of the
// same key from several processes are safe (last rename wins).
#ifndef SLUICE_POLICY_METRIC_STORE_H_
#define SLUICE_POLICY_METRIC_STORE_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/policy/plan.h"
#include "sluice/policy/profile.h"

namespace sluice::policy {

struct MetricKey {
  std::string pipeline_fingerprint;  // pipeline::Fingerprint(spec)
  std::string host_fingerprint;      // HostFingerprint(...)
};

// The first "model name" value of /proc/cpuinfo contents ("" if there is none).
std::string CpuModelFromCpuinfo(std::string_view cpuinfo);
// 16 hex digits hashing the CPU model and the CPU budget (to 0.01 CPU).
std::string HostFingerprint(std::string_view cpu_model, double cpu_budget);
// HostFingerprint of this machine's /proc/cpuinfo and the given budget.
std::string ProbeHostFingerprint(double cpu_budget);

// $XDG_CACHE_HOME/sluice when set and non-empty, else $HOME/.cache/sluice, else
// ./.sluice-cache. The pure form takes the two variables (nullptr: unset).
std::string DefaultMetricStoreDir(const char* xdg_cache_home, const char* home);
std::string DefaultMetricStoreDir();

struct MetricStoreOptions {
  std::string dir;                      // empty: DefaultMetricStoreDir()
  double max_age_s = 30 * 24 * 3600.0;  // older entries are stale
  std::function<double()> now_unix_s;   // the clock (default: the system clock)
};

struct MetricLoadResult {
  std::optional<Costs> costs;  // set on a hit
  // The plans measured no faster than all-local in earlier runs (Controller::losses), with
  // their workers: a hit may have none.
  std::vector<MeasuredPlan> losses;
  // The plan the last run ended on, where it offloaded and measured faster than all-local
  // (Controller::ended_on): the next run keeps its shape unless the model's best is clearly
  // better (Controller::Remember).
  std::optional<MeasuredPlan> ended_on;
  double age_s = 0;            // of the entry found
  std::string path;
  std::string warning;  // why an existing entry was ignored ("" otherwise)
};

class MetricStore {
 public:
  explicit MetricStore(MetricStoreOptions options = {});

  const std::string& dir() const { return options_.dir; }
  // <dir>/<pipeline>-<host>.json.
  std::string PathFor(const MetricKey& key) const;

  // Creates the directory if needed. InvalidArgument for a key with characters other than
  // letters, digits, '-' and '_'; Internal (with the path and errno text) if writing fails.
  Status Save(const MetricKey& key, const Costs& costs,
              const std::vector<MeasuredPlan>& losses = {},
              const std::optional<MeasuredPlan>& ended_on = std::nullopt) const;
  MetricLoadResult Load(const MetricKey& key) const;

 private:
  MetricStoreOptions options_;
};

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_METRIC_STORE_H_
