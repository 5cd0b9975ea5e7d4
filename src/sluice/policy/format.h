// Number formatting shared by the planners' explanations (internal to the policy module).
#ifndef SLUICE_POLICY_FORMAT_H_
#define SLUICE_POLICY_FORMAT_H_

#include <string>

namespace sluice::policy {

// "920", "12.5", "unbounded" (at or above kUnboundedRate).
std::string FormatRate(double samples_per_s);
// "1.44 ms" / "35 us".
std::string FormatSeconds(double s);
// "147 KB", "36.8 MB".
std::string FormatBytes(double bytes);
// "23.0%".
std::string FormatPercent(double fraction);

}  // namespace sluice::policy

#endif  // SLUICE_POLICY_FORMAT_H_
