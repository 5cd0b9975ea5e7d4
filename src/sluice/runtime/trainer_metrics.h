// TrainerMetrics: what a training process serves on /metrics (docs/metrics.md): how long the
// consumer waits for data (a histogram per batch, totals and a recent stall ratio), what each
// worker delivered, the plan in force and the planner's decisions by kind.
//
// The consumer's thread records each batch (Observe, a few atomics and one short critical
// section) and, about once a second, the runner's report (SetReport); Families() runs on the
// metrics server's thread. Thread-safe.
#ifndef SLUICE_RUNTIME_TRAINER_METRICS_H_
#define SLUICE_RUNTIME_TRAINER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/metrics/exposition.h"
#include "sluice/policy/plan.h"
#include "sluice/runtime/loader.h"

namespace sluice::runtime {

// The window of sluice_trainer_stall_ratio: a time constant of 10 s follows a plan change
// within a dashboard's refresh while one slow batch moves it by at most its share of 10 s.
inline constexpr double kStallWindowS = 10.0;
// How often the consumer's thread refreshes the report part (workers, plan, decisions): once
// a second is finer than any scrape interval and costs one report a second.
inline constexpr double kReportPeriodS = 1.0;

class TrainerMetrics {
 public:
  TrainerMetrics();

  // One batch: the consumer waited `wait_ns` for it after computing for `compute_ns` since
  // the previous one (< 0: unknown, the first batch).
  void Observe(int64_t wait_ns, int64_t compute_ns, int64_t samples);
  // Whether the report part is due for a refresh at `now_ns` (and takes the turn if so).
  bool ReportDue(int64_t now_ns);
  // The runner's state: what the loaders did, the plan in force, the decisions so far.
  void SetReport(const std::string& policy, const LoaderReport& loader,
                 const std::optional<policy::Plan>& plan,
                 const std::map<std::string, int64_t>& decisions);

  std::vector<metrics::Family> Families() const;

 private:
  metrics::Histogram wait_;
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> samples_{0};
  std::atomic<int64_t> wait_ns_{0};
  std::atomic<int64_t> compute_ns_{0};
  std::atomic<int64_t> next_report_ns_{0};

  mutable std::mutex mu_;
  double window_wait_s_ ABSL_GUARDED_BY(mu_) = 0;
  double window_total_s_ ABSL_GUARDED_BY(mu_) = 0;
  std::string policy_ ABSL_GUARDED_BY(mu_);
  LoaderReport loader_ ABSL_GUARDED_BY(mu_);
  std::optional<policy::Plan> plan_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> decisions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_TRAINER_METRICS_H_
