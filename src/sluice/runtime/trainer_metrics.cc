#include "sluice/runtime/trainer_metrics.h"

#include <algorithm>
#include <cmath>

#include "sluice/core/placement.h"
#include "sluice/rpc/worker_metrics.h"

namespace sluice::runtime {
namespace {

// Waits from 50 us to about 13 s, doubling: a fed trainer's wait is tens of microseconds, a
// starved one's up to a step or more.
std::vector<double> WaitBounds() { return metrics::Histogram::ExponentialBounds(50e-6, 2, 19); }

}  // namespace

TrainerMetrics::TrainerMetrics() : wait_(WaitBounds()) {}

void TrainerMetrics::Observe(int64_t wait_ns, int64_t compute_ns, int64_t samples) {
  wait_ns = std::max<int64_t>(0, wait_ns);
  wait_.Observe(static_cast<double>(wait_ns) / 1e9);
  batches_.fetch_add(1, std::memory_order_relaxed);
  samples_.fetch_add(samples, std::memory_order_relaxed);
  wait_ns_.fetch_add(wait_ns, std::memory_order_relaxed);
  if (compute_ns < 0) return;
  compute_ns_.fetch_add(compute_ns, std::memory_order_relaxed);
  // Exponentially weighted over time: each batch's interval decays what came before by
  // exp(-interval / window).
  const double w = static_cast<double>(wait_ns) / 1e9;
  const double total = w + static_cast<double>(compute_ns) / 1e9;
  const double keep = std::exp(-total / kStallWindowS);
  std::lock_guard<std::mutex> lock(mu_);
  window_wait_s_ = window_wait_s_ * keep + w;
  window_total_s_ = window_total_s_ * keep + total;
}

bool TrainerMetrics::ReportDue(int64_t now_ns) {
  int64_t due = next_report_ns_.load(std::memory_order_relaxed);
  if (now_ns < due) return false;
  return next_report_ns_.compare_exchange_strong(
      due, now_ns + static_cast<int64_t>(kReportPeriodS * 1e9), std::memory_order_relaxed);
}

void TrainerMetrics::SetReport(const std::string& policy, const LoaderReport& loader,
                               const std::optional<policy::Plan>& plan,
                               const std::map<std::string, int64_t>& decisions) {
  std::lock_guard<std::mutex> lock(mu_);
  policy_ = policy;
  loader_ = loader;
  plan_ = plan;
  decisions_ = decisions;
}

std::vector<metrics::Family> TrainerMetrics::Families() const {
  using metrics::Family;
  std::vector<Family> out;
  const auto n = [](const std::atomic<int64_t>& v) {
    return static_cast<double>(v.load(std::memory_order_relaxed));
  };
  out.push_back(Family::Counter("sluice_trainer_batches_total", "Batches handed to the consumer.")
                    .Add(n(batches_)));
  out.push_back(Family::Counter("sluice_trainer_samples_total", "Samples handed to the consumer.")
                    .Add(n(samples_)));
  out.push_back(Family::Counter("sluice_trainer_wait_seconds_total",
                                "Time the consumer waited for data.")
                    .Add(n(wait_ns_) / 1e9));
  out.push_back(Family::Counter("sluice_trainer_compute_seconds_total",
                                "Time the consumer spent between batches (its step).")
                    .Add(n(compute_ns_) / 1e9));
  Family wait = Family::Histogram("sluice_trainer_batch_wait_seconds",
                                  "How long the consumer waited for each batch.");
  wait.histograms.push_back(wait_.Snapshot());
  out.push_back(std::move(wait));

  std::lock_guard<std::mutex> lock(mu_);
  out.push_back(Family::Gauge("sluice_trainer_stall_ratio",
                              "Fraction of the last ~10 s the consumer waited for data "
                              "(exponentially weighted).")
                    .Add(window_total_s_ > 0 ? window_wait_s_ / window_total_s_ : 0));
  out.push_back(Family::Counter("sluice_trainer_local_samples_total",
                                "Samples this process prepared itself.")
                    .Add(static_cast<double>(loader_.samples_local)));
  Family received = Family::Counter("sluice_trainer_samples_received_total",
                                    "Samples each worker delivered (accepted by the merge).");
  Family bytes = Family::Counter("sluice_trainer_received_bytes_total",
                                 "Payload bytes received from each worker.");
  Family connected = Family::Gauge("sluice_trainer_worker_connected",
                                   "1 while the stream to the worker is open.");
  Family failures = Family::Counter("sluice_trainer_worker_failures_total",
                                    "Streams to the worker that broke after opening.");
  Family share = Family::Gauge("sluice_trainer_worker_share",
                               "The worker's target fraction of all samples.");
  for (const WorkerReport& w : loader_.workers) {
    const metrics::Labels labels = {{"worker", w.address}};
    received.Add(static_cast<double>(w.samples), labels);
    bytes.Add(static_cast<double>(w.bytes_received), labels);
    connected.Add(w.connected ? 1 : 0, labels);
    failures.Add(static_cast<double>(w.failures), labels);
    share.Add(w.share, labels);
  }
  out.push_back(std::move(received));
  out.push_back(std::move(bytes));
  out.push_back(std::move(connected));
  out.push_back(std::move(failures));
  out.push_back(std::move(share));
  out.push_back(Family::Counter("sluice_trainer_requeued_samples_total",
                                "Samples handed out again after a worker failed or left.")
                    .Add(static_cast<double>(loader_.requeued_samples)));
  out.push_back(Family::Counter("sluice_trainer_duplicate_samples_total",
                                "Samples that arrived twice and were dropped (exactly-once).")
                    .Add(static_cast<double>(loader_.duplicates_dropped)));
  out.push_back(Family::Counter("sluice_trainer_skipped_samples_total",
                                "Samples dropped under on_error: skip.")
                    .Add(static_cast<double>(loader_.skipped)));
  for (Family& f : rpc::OpFamilies("sluice_trainer", "in this process", loader_.local_ops)) {
    out.push_back(std::move(f));
  }

  // The plan as an info metric: 1 on the series whose labels say the plan in force.
  Placement placement;
  placement.cut = loader_.cut;
  placement.ratio = loader_.ratio;
  placement.read_mode = loader_.read_mode;
  placement.codec = loader_.codec;
  const bool offloaded = loader_.offloaded && loader_.ratio > 0;
  out.push_back(
      Family::Gauge("sluice_trainer_plan_info",
                    "The plan in force (always 1): the policy (none, fixed, sluice, auto, fastflow), "
                    "cut, read mode and codec as labels.")
          .Add(1, {{"policy", policy_},
                   {"cut", offloaded ? CutName(placement.cut) : std::string("none")},
                   {"read_mode", offloaded ? ReadModeName(placement.read_mode) : "none"},
                   {"codec", offloaded ? CodecName(placement.codec) : "none"}}));
  out.push_back(Family::Gauge("sluice_trainer_plan_ratio",
                              "Fraction of the samples the plan gives the workers.")
                    .Add(offloaded ? placement.ratio : 0));
  if (plan_.has_value()) {
    out.push_back(Family::Gauge("sluice_trainer_plan_predicted_samples_per_second",
                                "What the planner predicted for the plan in force.")
                      .Add(plan_->predicted_samples_per_s));
  }
  Family decisions = Family::Counter("sluice_trainer_plan_decisions_total",
                                     "The planner's decisions by kind (initial, replan, "
                                     "recalibrate, step, rollback, trial, ...).");
  for (const auto& [kind, count] : decisions_) {
    decisions.Add(static_cast<double>(count), {{"kind", kind}});
  }
  out.push_back(std::move(decisions));
  return out;
}

}  // namespace sluice::runtime
