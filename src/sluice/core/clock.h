// Clocks used for profiling: a monotonic wall clock and the calling thread's CPU clock.
// Both are cheap (vDSO) and safe from any thread.
#ifndef SLUICE_CORE_CLOCK_H_
#define SLUICE_CORE_CLOCK_H_

#include <cstdint>
#include <ctime>
#include <optional>

namespace sluice {

inline int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t ProcessCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The calling thread's time on a CPU and waiting for one (runnable but not running: other
// threads, or its cgroup's CPU quota spent), in ns since it started, from
// /proc/thread-self/schedstat; nullopt where the kernel does not keep them.
struct SchedTimes {
  int64_t run_ns = 0;
  int64_t wait_ns = 0;
};
std::optional<SchedTimes> ThreadSchedTimes();

// Peak resident set size of this process in bytes (from getrusage).
int64_t PeakRssBytes();
// Minor page faults of this process so far (from getrusage): each first touch of a fresh page
// of memory, which the kernel zeroes.
int64_t ProcessMinorFaults();
// Current resident set size in bytes (from /proc/self/statm); 0 if unavailable.
int64_t CurrentRssBytes();

}  // namespace sluice

#endif  // SLUICE_CORE_CLOCK_H_
