// Liveness of a worker as the trainer sees it (docs/offload.md, "Liveness"): when is a worker
// that holds open splits but delivers nothing declared hung?
//
// A worker answering HTTP/2 pings is not necessarily working (a wedged pool, a read stuck on
// a network file system); one that is SIGSTOPped or behind a black-holed link is found by
// the transport's keepalive only after 20 to 30 s (rpc/grpc_worker_server.h). The trainer
// therefore also watches deliveries: while the worker holds unresolved samples of open
// splits, the *silence* (time since its last delivery, or since it started holding samples)
// is compared with a deadline derived from the rate it has delivered at:
//
//   deadline = max(floor_s, multiplier * held_samples / rate)     (rate measured)
//   deadline = max(floor_s, unmeasured_s)                          (no delivery seen yet)
//
// HangDeadlineS is that pure function; DeliveryWatch keeps the rate and the silence for one
// worker, with the time passed in by the caller (so tests drive it with made-up clocks).
//
// Thread-compatible: one DeliveryWatch per worker, used by that worker's reader thread.
#ifndef SLUICE_RUNTIME_LIVENESS_H_
#define SLUICE_RUNTIME_LIVENESS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace sluice::runtime {

struct HangPolicy {
  // Silence allowed, as a multiple of the time the held samples should take at the measured
  // rate. 4: the rate may halve twice at once without a false alarm, e.g. a second trainer's
  // session halving the worker's share of its pool (the worker divides it fairly) while the
  // samples in hand cost twice the average (images of different sizes). A false alarm costs
  // one reconnect and re-processing the held samples; a missed hang stalls the run.
  double multiplier = 4;
  // The least silence that counts as a hang, whatever the rate. A live worker can pause for
  // reasons that do not scale with its rate: TCP retransmissions after losses (Linux's
  // minimum RTO is 200 ms and doubles: five losses of one segment in a row take 6.2 s), a
  // host reclaiming memory, a trainer descheduled on a loaded machine. 10 s is above these,
  // and half the keepalive's 20 s timeout, so a stopped worker holding work is reported as
  // hung, with its silence, rather than as a dropped connection.
  double floor_s = 10;
  // The deadline before the worker has delivered anything (no rate to derive it from): its
  // first samples also pay for cold caches and first-touch memory. 3 floors: a worker that
  // delivers nothing for 30 s after its session opened is of no use to the trainer anyway.
  double unmeasured_s = 30;
  // Time constant of the rate's exponential mean, in seconds of holding samples: many splits
  // even for a slow worker (a split of 32 samples at 5 samples/s takes 6.4 s), short enough
  // to follow a worker whose load changes.
  double rate_time_constant_s = 30;
};

// The silence (s) after which a worker holding `held_samples` unresolved samples is hung,
// given its measured rate (samples/s; <= 0: not measured yet). See above.
double HangDeadlineS(const HangPolicy& policy, int64_t held_samples, double samples_per_s);

// What DeliveryWatch::Check found: a hung worker, with the figures for the message.
struct HangVerdict {
  double silence_s = 0;
  double deadline_s = 0;
  int64_t held_samples = 0;
  double samples_per_s = 0;  // 0: not measured yet
  // "nothing delivered for 10.3 s while it held 24 samples (deadline 10.0 s: 4 x the 1.7 s
  // they take at its 14.2 samples/s, at least 10 s)"
  std::string Describe(const HangPolicy& policy) const;
};

class DeliveryWatch {
 public:
  explicit DeliveryWatch(HangPolicy policy = {}) : policy_(policy) {}

  // A new stream to the worker at `now_ns`: the silence counts from here (the rate, a
  // property of the worker, is kept).
  void Restart(int64_t now_ns);
  // The worker delivered `samples` (a chunk; 0 for a split finished without samples) at
  // `now_ns`: progress. Updates the rate and ends the silence.
  void Delivered(int64_t samples, int64_t now_ns);
  // The reader is about to wait for the worker, which holds `held_samples` unresolved
  // samples, at `now_ns`. Holding nothing, the worker cannot be silent: the silence restarts.
  // Returns a verdict when the silence exceeds the deadline.
  std::optional<HangVerdict> Check(int64_t held_samples, int64_t now_ns);

  // The measured rate (samples/s), 0 before the first delivery.
  double samples_per_s() const;
  const HangPolicy& policy() const { return policy_; }

 private:
  HangPolicy policy_;
  int64_t anchor_ns_ = 0;  // the silence counts from here
  bool anchored_ = false;
  double weighted_samples_ = 0;  // exponential means of samples delivered ...
  double weighted_s_ = 0;        // ... and of the time they took
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_LIVENESS_H_
