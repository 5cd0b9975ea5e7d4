#include "sluice/cli/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::cli {

std::vector<OpRow> ComputeOpRows(const std::vector<pipeline::OpStatsSnapshot>& ops) {
  int64_t total_cpu_ns = 0;
  for (const auto& op : ops) total_cpu_ns += op.cpu_ns;
  std::vector<OpRow> rows;
  rows.reserve(ops.size());
  for (const auto& op : ops) {
    OpRow row;
    row.name = op.name;
    row.cpu_ms_per_sample = op.cpu_ms_per_sample();
    row.samples_per_s = op.cpu_ns > 0 ? op.samples * 1e9 / static_cast<double>(op.cpu_ns) : 0;
    row.bytes_per_sample = op.bytes_per_sample();
    row.cpu_share = total_cpu_ns > 0 ? static_cast<double>(op.cpu_ns) / total_cpu_ns : 0;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f B", bytes);
  return absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
}

std::string FormatTable(const RunReport& report) {
  const std::vector<OpRow> rows = ComputeOpRows(report.ops);
  size_t name_width = 2;
  for (const OpRow& row : rows) name_width = std::max(name_width, row.name.size());
  const int nw = static_cast<int>(name_width);

  std::string out = absl::StrFormat("%-*s %12s %14s %17s %10s\n", nw, "op", "samples/s",
                                    "CPU ms/sample", "bytes out/sample", "CPU share");
  for (const OpRow& row : rows) {
    absl::StrAppendFormat(&out, "%-*s %12.1f %14.3f %17s %9.1f%%\n", nw, row.name,
                          row.samples_per_s, row.cpu_ms_per_sample,
                          FormatBytes(row.bytes_per_sample), 100 * row.cpu_share);
  }
  const double source_rate = report.wall_s > 0 ? report.source_samples / report.wall_s : 0;
  absl::StrAppendFormat(&out, "source: %d samples, %.1f samples/s\n", report.source_samples,
                        source_rate);
  absl::StrAppendFormat(&out,
                        "total:  %d samples in %d batches, %.1f samples/s, wall %.2f s, "
                        "%d threads (CPU budget %.1f), peak RSS %s\n",
                        report.samples, report.batches, report.samples_per_s(), report.wall_s,
                        report.threads, report.cpu_budget,
                        FormatBytes(static_cast<double>(report.peak_rss_bytes)));
  if (report.batches_in_place > 0) {
    absl::StrAppendFormat(&out,
                          "batches stacked in place: %d of %d (samples written into their slots)\n",
                          report.batches_in_place, report.batches);
  }
  absl::StrAppendFormat(&out, "skipped: %d\n", report.skipped);
  constexpr size_t kShown = 5;
  const size_t shown = std::min(kShown, report.skipped_names.size());
  for (size_t i = 0; i < shown; ++i) absl::StrAppend(&out, "  ", report.skipped_names[i], "\n");
  if (report.skipped > static_cast<int64_t>(shown) && shown > 0) {
    absl::StrAppendFormat(&out, "  ... and %d more\n",
                          report.skipped - static_cast<int64_t>(shown));
  }
  return out;
}

nlohmann::json ToJson(const RunReport& report) {
  nlohmann::json ops = nlohmann::json::array();
  const std::vector<OpRow> rows = ComputeOpRows(report.ops);
  for (size_t i = 0; i < rows.size(); ++i) {
    ops.push_back({
        {"name", rows[i].name},
        {"samples", report.ops[i].samples},
        {"samples_per_s", rows[i].samples_per_s},
        {"cpu_ms_per_sample", rows[i].cpu_ms_per_sample},
        {"bytes_per_sample", rows[i].bytes_per_sample},
        {"cpu_share", rows[i].cpu_share},
        {"cpu_s", report.ops[i].cpu_ns / 1e9},
        {"errors", report.ops[i].errors},
    });
  }
  // No consumer and no offloading here: the plan is the local one, decided instantly.
  nlohmann::json plan = {{"policy", "none"},      {"cut", nullptr},
                         {"read_mode", nullptr},  {"ratio", 0.0},
                         {"compression", "none"}, {"workers", nlohmann::json::array()}};
  return {
      {"samples_per_s", report.samples_per_s()},
      {"batches", report.batches},
      {"samples", report.samples},
      {"source_samples", report.source_samples},
      {"wall_s", report.wall_s},
      {"threads", report.threads},
      {"cpu_budget", report.cpu_budget},
      {"peak_rss_bytes", report.peak_rss_bytes},
      {"stall_fraction", 0.0},
      {"plan", plan},
      {"time_to_plan_s", 0.0},
      {"ops", ops},
      {"batches_in_place", report.batches_in_place},
      {"skipped", report.skipped},
      {"skipped_names", report.skipped_names},
      {"fingerprint", report.fingerprint},
  };
}

}  // namespace sluice::cli
