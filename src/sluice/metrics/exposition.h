// The Prometheus text exposition format (version 0.0.4), written from values collected at
// scrape time.
//
// A scrape builds a list of Family values (name, help, type, samples) from counters the
// runtime keeps anyway, and WriteText renders them. Nothing here is on a hot path: a counter
// is whatever the caller already counts, so serving metrics costs only the scrape.
//
// Names follow Prometheus' conventions: `sluice_` prefix, base units (`_seconds`, `_bytes`),
// counters end in `_total`. WriteText escapes label values and help text as the format
// requires, and leaves out a sample whose value is NaN only for counters (a counter that
// cannot be read is absent, not zero).
//
// Histogram keeps a fixed set of upper bounds and is safe to observe from any thread.
#ifndef SLUICE_METRICS_EXPOSITION_H_
#define SLUICE_METRICS_EXPOSITION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class Type { kCounter, kGauge, kHistogram };

struct Sample {
  Labels labels;
  double value = 0;
};

// A histogram's state: counts per bucket (not cumulative; the last bucket is +Inf), the sum
// and the number of observations.
struct HistogramSample {
  Labels labels;
  std::vector<double> bounds;     // upper bounds, ascending, without +Inf
  std::vector<uint64_t> buckets;  // bounds.size() + 1 counts
  double sum = 0;
};

struct Family {
  std::string name;  // without suffixes for histograms (`_bucket`, `_sum`, `_count` added)
  std::string help;
  Type type = Type::kGauge;
  std::vector<Sample> samples;              // counters and gauges
  std::vector<HistogramSample> histograms;  // histograms

  // Builders: `Family::Counter("sluice_x_total", "...").Add(v, {{"op", "decode"}})`.
  static Family Counter(std::string name, std::string help);
  static Family Gauge(std::string name, std::string help);
  static Family Histogram(std::string name, std::string help);
  Family& Add(double value, Labels labels = {});
};

// Renders `families` in the text format: `# HELP`, `# TYPE`, then one line per sample.
std::string WriteText(const std::vector<Family>& families);

// Whether `name` is a valid metric (or label, with `label` true) name.
bool ValidName(const std::string& name, bool label = false);

// A histogram with fixed upper bounds, observed from any thread (relaxed atomics; a scrape
// may see an observation's bucket before its sum, which the format tolerates).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  HistogramSample Snapshot(Labels labels = {}) const;

  // Upper bounds from `start`, each `factor` times the one before.
  static std::vector<double> ExponentialBounds(double start, double factor, int count);

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<int64_t> sum_ns_{0};  // the sum, in billionths of the unit
};

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_EXPOSITION_H_
