// Verification of a Testbed against its spec: a short timed TCP transfer over each link and
// a busy loop inside each host's cgroup. Both are bounded in time. Call from one thread at a
// time per testbed (the link measurement uses two helper threads that enter the namespaces).
#ifndef SLUICE_TESTBED_VERIFY_H_
#define SLUICE_TESTBED_VERIFY_H_

#include "nlohmann/json.hpp"
#include "sluice/core/status.h"
#include "sluice/testbed/testbed.h"

namespace sluice::testbed {

struct LinkMeasurement {
  double spec_bps = 0;      // 0: the link is not shaped
  double measured_bps = 0;  // line rate (frames with headers) of one TCP stream, worker -> trainer
  double goodput_bps = 0;   // the payload part of it
  int64_t bytes = 0;        // bytes sent in all
  double seconds = 0;       // time the measured part took
  double rtt_s = 0;         // TCP's smoothed round-trip time at the end of the transfer
};

// Sends from worker `worker`'s namespace to the trainer's for about `seconds` (at most
// `max_bytes`), and reports the rate the receiver saw after a warm-up of a quarter of the
// time, up to the end of the stream. The receiver sees payload (goodput); the line rate adds
// the per-segment header bytes that tc's rate counts.
StatusOr<LinkMeasurement> MeasureLink(const Testbed& testbed, int worker, double seconds = 1.5,
                                      int64_t max_bytes = int64_t{2} << 30);

struct CpuMeasurement {
  double spec_cpus = 0;
  double measured_cpus = 0;  // CPU time of the busy loops over wall time
  double seconds = 0;
};

// Runs ceil(cpus) busy processes inside `host`'s cgroup for `seconds` of wall time and
// reports their CPU time over that time. Other load on the machine can only lower it.
StatusOr<CpuMeasurement> MeasureCpu(const Testbed& testbed, const Host& host, double seconds = 2.0);

// Whether `measured` is within `tolerance` (a fraction) of `spec`.
inline bool WithinTolerance(double measured, double spec, double tolerance = 0.10) {
  return measured >= spec * (1 - tolerance) && measured <= spec * (1 + tolerance);
}

// Measures every link and every host's CPU quota; the JSON holds spec, measured and ok per
// item ({"links": [...], "cpus": {"trainer": {...}, "w0": {...}}, "ok": bool}).
StatusOr<nlohmann::json> VerifyTestbed(const Testbed& testbed, double link_seconds = 1.5,
                                       double cpu_seconds = 2.0);

}  // namespace sluice::testbed

#endif  // SLUICE_TESTBED_VERIFY_H_
