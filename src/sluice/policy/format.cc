#include "sluice/policy/format.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "sluice/policy/model.h"

namespace sluice::policy {

std::string FormatRate(double r) {
  if (r >= kUnboundedRate * 0.999) return "unbounded";
  if (std::fabs(r) < 100) return absl::StrFormat("%.1f", r);
  return absl::StrFormat("%.0f", r);
}

std::string FormatSeconds(double s) {
  if (s >= 1) return absl::StrFormat("%.2f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.2f ms", s * 1e3);
  return absl::StrFormat("%.0f us", s * 1e6);
}

std::string FormatBytes(double b) {
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.1f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.0f KB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

std::string FormatPercent(double f) { return absl::StrFormat("%.1f%%", f * 100); }

}  // namespace sluice::policy
