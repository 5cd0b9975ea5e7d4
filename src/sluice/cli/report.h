// What `sluice run` reports: the per-op table a human reads and the JSON a script reads.
// RunReport is a plain value filled from a finished run (or by hand in tests); the two
// formatters are pure functions of it.
#ifndef SLUICE_CLI_REPORT_H_
#define SLUICE_CLI_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/pipeline/stats.h"

namespace sluice::cli {

struct RunReport {
  std::vector<pipeline::OpStatsSnapshot> ops;  // in pipeline order
  int64_t source_samples = 0;                  // elements the source produced
  int64_t samples = 0;                         // samples delivered (in batches)
  int64_t batches = 0;
  int64_t batches_in_place = 0;  // stacked without a copy: samples written into their slots
  double wall_s = 0;
  int threads = 0;
  double cpu_budget = 0;  // CPUs this process may use (cgroup/affinity aware)
  int64_t peak_rss_bytes = 0;
  int64_t skipped = 0;
  std::vector<std::string> skipped_names;
  std::string fingerprint;

  double samples_per_s() const { return wall_s > 0 ? samples / wall_s : 0; }
};

// Per-op derived numbers. samples_per_s is the rate one thread sustains on this op alone
// (samples per CPU-second inside the op), so the smallest one is the bottleneck; cpu_share
// is the op's fraction of the CPU time spent in all ops.
struct OpRow {
  std::string name;
  double samples_per_s = 0;
  double cpu_ms_per_sample = 0;
  double bytes_per_sample = 0;
  double cpu_share = 0;
};
std::vector<OpRow> ComputeOpRows(const std::vector<pipeline::OpStatsSnapshot>& ops);

// The human-readable table, ending with a newline.
std::string FormatTable(const RunReport& report);

// The `--json` document (keys documented in docs/CLI.md).
nlohmann::json ToJson(const RunReport& report);

// "1.5 GiB", "312.0 MiB", "17.2 KiB", "12 B".
std::string FormatBytes(double bytes);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_REPORT_H_
