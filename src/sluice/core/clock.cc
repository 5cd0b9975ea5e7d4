#include "sluice/core/clock.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace sluice {

int64_t PeakRssBytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

int64_t ProcessMinorFaults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_minflt);
}

std::optional<SchedTimes> ThreadSchedTimes() {
  FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
  if (f == nullptr) return std::nullopt;
  long long run = 0, wait = 0;
  const int n = std::fscanf(f, "%lld %lld", &run, &wait);
  std::fclose(f);
  if (n != 2 || run < 0 || wait < 0) return std::nullopt;
  return SchedTimes{static_cast<int64_t>(run), static_cast<int64_t>(wait)};
}

int64_t CurrentRssBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages_total = 0, pages_resident = 0;
  int n = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<int64_t>(pages_resident) * sysconf(_SC_PAGESIZE);
}

}  // namespace sluice
