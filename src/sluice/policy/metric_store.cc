#include "sluice/policy/metric_store.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/core/files.h"

namespace sluice::policy {
namespace {

constexpr char kFormat[] = "sluice-costs/1";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool ValidKeyPart(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

double SystemNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string CpuModelFromCpuinfo(std::string_view cpuinfo) {
  size_t pos = 0;
  while (pos < cpuinfo.size()) {
    size_t end = cpuinfo.find('\n', pos);
    if (end == std::string_view::npos) end = cpuinfo.size();
    std::string_view line = cpuinfo.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    if (Trim(line.substr(0, colon)) == "model name") {
      return std::string(Trim(line.substr(colon + 1)));
    }
  }
  return "";
}

std::string HostFingerprint(std::string_view cpu_model, double cpu_budget) {
  // FNV-1a, 64 bits: stable across runs, builds and machines.
  const std::string text = absl::StrCat(Av(cpu_model), "|", absl::StrFormat("%.2f", cpu_budget));
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

std::string ProbeHostFingerprint(double cpu_budget) {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream ss;
  ss << in.rdbuf();
  return HostFingerprint(CpuModelFromCpuinfo(ss.str()), cpu_budget);
}

std::string DefaultMetricStoreDir(const char* xdg_cache_home, const char* home) {
  if (xdg_cache_home != nullptr && xdg_cache_home[0] != '\0') {
    return absl::StrCat(xdg_cache_home, "/sluice");
  }
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/sluice");
  return ".sluice-cache";
}

std::string DefaultMetricStoreDir() {
  return DefaultMetricStoreDir(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
}

MetricStore::MetricStore(MetricStoreOptions options) : options_(std::move(options)) {
  if (options_.dir.empty()) options_.dir = DefaultMetricStoreDir();
  if (!options_.now_unix_s) options_.now_unix_s = SystemNow;
}

std::string MetricStore::PathFor(const MetricKey& key) const {
  return absl::StrCat(options_.dir, "/", key.pipeline_fingerprint, "-", key.host_fingerprint,
                      ".json");
}

Status MetricStore::Save(const MetricKey& key, const Costs& costs,
                         const std::vector<MeasuredPlan>& losses,
                         const std::optional<MeasuredPlan>& ended_on) const {
  if (!ValidKeyPart(key.pipeline_fingerprint) || !ValidKeyPart(key.host_fingerprint)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric store: bad key '", key.pipeline_fingerprint, "-", key.host_fingerprint,
                     "' (letters, digits, '-' and '_' only)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("metric store: cannot create ", options_.dir, ": ", ec.message()));
  }
  nlohmann::json lost = nlohmann::json::array();
  for (const MeasuredPlan& l : losses) lost.push_back(ToJson(l));
  nlohmann::json j{{"format", kFormat},
                   {"pipeline_fingerprint", key.pipeline_fingerprint},
                   {"host_fingerprint", key.host_fingerprint},
                   {"saved_at_unix_s", options_.now_unix_s()},
                   {"costs", ToJson(costs)},
                   {"losses", std::move(lost)}};
  if (ended_on.has_value()) j["ended_on"] = ToJson(*ended_on);
  const std::string path = PathFor(key);
  if (Status s = WriteFileAtomically(path, j.dump(2) + "\n"); !s.ok()) {
    return absl::InternalError(absl::StrCat("metric store: ", s.message()));
  }
  return absl::OkStatus();
}

MetricLoadResult MetricStore::Load(const MetricKey& key) const {
  MetricLoadResult r;
  if (!ValidKeyPart(key.pipeline_fingerprint) || !ValidKeyPart(key.host_fingerprint)) {
    r.warning = absl::StrCat("metric store: bad key '", key.pipeline_fingerprint, "-",
                             key.host_fingerprint, "'; not looked up");
    return r;
  }
  r.path = PathFor(key);
  std::error_code ec;
  if (!std::filesystem::exists(r.path, ec)) return r;
  auto ignore = [&r](const std::string& why) {
    r.warning = absl::StrCat("metric store: ignoring ", r.path, ": ", why);
    r.costs.reset();
    r.losses.clear();
    r.ended_on.reset();
    return r;
  };
  std::ifstream in(r.path, std::ios::binary);
  if (!in) return ignore(absl::StrCat("cannot read it: ", std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return ignore("corrupt (not a JSON object)");
  auto str = [&j](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (str("format") != kFormat) {
    return ignore(absl::StrCat("corrupt (format '", str("format"), "', expected '", kFormat, "')"));
  }
  if (str("pipeline_fingerprint") != key.pipeline_fingerprint ||
      str("host_fingerprint") != key.host_fingerprint) {
    return ignore("corrupt (its key does not match its name)");
  }
  auto saved = j.find("saved_at_unix_s");
  if (saved == j.end() || !saved->is_number()) return ignore("corrupt (no saved_at_unix_s)");
  r.age_s = options_.now_unix_s() - saved->get<double>();
  if (r.age_s > options_.max_age_s) {
    return ignore(absl::StrFormat("stale (saved %.1f days ago, the limit is %.1f days)",
                                  r.age_s / 86400, options_.max_age_s / 86400));
  }
  auto costs_json = j.find("costs");
  if (costs_json == j.end()) return ignore("corrupt (no costs)");
  StatusOr<Costs> costs = CostsFromJson(*costs_json);
  if (!costs.ok()) return ignore(absl::StrCat("corrupt (", costs.status().message(), ")"));
  Profile check;
  check.costs = *costs;
  if (Status valid = ValidateProfile(check); !valid.ok()) {
    return ignore(absl::StrCat("corrupt (", valid.message(), ")"));
  }
  // Absent in entries written before losses were kept: none then.
  if (auto lost = j.find("losses"); lost != j.end()) {
    if (!lost->is_array()) return ignore("corrupt (losses is not a list)");
    for (const nlohmann::json& l : *lost) {
      StatusOr<MeasuredPlan> loss = MeasuredPlanFromJson(l);
      if (!loss.ok()) return ignore(absl::StrCat("corrupt (", loss.status().message(), ")"));
      r.losses.push_back(*std::move(loss));
    }
  }
  // Absent where the run before ended on no measured offload (or before it was kept).
  if (auto ended = j.find("ended_on"); ended != j.end()) {
    StatusOr<MeasuredPlan> plan = MeasuredPlanFromJson(*ended);
    if (!plan.ok()) {
      return ignore(absl::StrCat("corrupt (ended_on: ", plan.status().message(), ")"));
    }
    r.ended_on = *std::move(plan);
  }
  r.costs = std::move(*costs);
  return r;
}

}  // namespace sluice::policy
