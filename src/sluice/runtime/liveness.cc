#include "sluice/runtime/liveness.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace sluice::runtime {

double HangDeadlineS(const HangPolicy& policy, int64_t held_samples, double samples_per_s) {
  if (held_samples <= 0) return std::numeric_limits<double>::infinity();
  if (!(samples_per_s > 0)) return std::max(policy.floor_s, policy.unmeasured_s);
  const double expected_s = static_cast<double>(held_samples) / samples_per_s;
  return std::max(policy.floor_s, policy.multiplier * expected_s);
}

std::string HangVerdict::Describe(const HangPolicy& policy) const {
  std::string why;
  if (samples_per_s > 0) {
    why = absl::StrFormat("%g x the %.3g s they take at its %.1f samples/s, at least %g s",
                          policy.multiplier, held_samples / samples_per_s, samples_per_s,
                          policy.floor_s);
  } else {
    why = absl::StrFormat("no rate measured yet: at least %g s",
                          std::max(policy.floor_s, policy.unmeasured_s));
  }
  return absl::StrFormat(
      "nothing delivered for %.1f s while it held %d samples (deadline %.1f s: %s)", silence_s,
      held_samples, deadline_s, why);
}

void DeliveryWatch::Restart(int64_t now_ns) {
  anchor_ns_ = now_ns;
  anchored_ = true;
}

void DeliveryWatch::Delivered(int64_t samples, int64_t now_ns) {
  if (anchored_ && now_ns > anchor_ns_) {
    const double dt = static_cast<double>(now_ns - anchor_ns_) / 1e9;
    const double decay =
        policy_.rate_time_constant_s > 0 ? std::exp(-dt / policy_.rate_time_constant_s) : 0;
    weighted_samples_ = weighted_samples_ * decay + static_cast<double>(samples);
    weighted_s_ = weighted_s_ * decay + dt;
  } else {
    weighted_samples_ += static_cast<double>(samples);
  }
  anchor_ns_ = now_ns;
  anchored_ = true;
}

std::optional<HangVerdict> DeliveryWatch::Check(int64_t held_samples, int64_t now_ns) {
  if (held_samples <= 0 || !anchored_) {
    // Nothing in hand: nothing is late. The silence starts when samples are handed out.
    anchor_ns_ = now_ns;
    anchored_ = true;
    return std::nullopt;
  }
  HangVerdict v;
  v.silence_s = static_cast<double>(now_ns - anchor_ns_) / 1e9;
  v.held_samples = held_samples;
  v.samples_per_s = samples_per_s();
  v.deadline_s = HangDeadlineS(policy_, held_samples, v.samples_per_s);
  if (v.silence_s > v.deadline_s) return v;
  return std::nullopt;
}

double DeliveryWatch::samples_per_s() const {
  if (weighted_samples_ <= 0) return 0;
  // Deliveries that all arrived at once (no time measured) say only that it is fast.
  if (weighted_s_ <= 0) return std::numeric_limits<double>::infinity();
  return weighted_samples_ / weighted_s_;
}

}  // namespace sluice::runtime
