#include "sluice/pipeline/stats.h"

namespace sluice::pipeline {

void PipelineStats::Init(const std::vector<std::string>& op_names) {
  names_ = op_names;
  ops_.clear();
  ops_.reserve(op_names.size());
  for (size_t i = 0; i < op_names.size(); ++i) ops_.push_back(std::make_unique<OpCounters>());
}

void PipelineStats::RecordShuffleBuffer(size_t samples, size_t bytes) {
  const auto n = static_cast<int64_t>(samples);
  const auto b = static_cast<int64_t>(bytes);
  shuffle_buffer_samples.store(n, std::memory_order_relaxed);
  shuffle_buffer_bytes.store(b, std::memory_order_relaxed);
  int64_t peak = shuffle_buffer_peak_samples.load(std::memory_order_relaxed);
  while (n > peak && !shuffle_buffer_peak_samples.compare_exchange_weak(peak, n)) {
  }
  peak = shuffle_buffer_peak_bytes.load(std::memory_order_relaxed);
  while (b > peak && !shuffle_buffer_peak_bytes.compare_exchange_weak(peak, b)) {
  }
}

void PipelineStats::RecordSkip(const std::string& description) {
  skipped_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  if (skipped_names_.size() < kMaxSkippedNames) skipped_names_.push_back(description);
}

std::vector<OpStatsSnapshot> PipelineStats::SnapshotOps() const {
  std::vector<OpStatsSnapshot> out;
  out.reserve(ops_.size());
  for (size_t i = 0; i < ops_.size(); ++i) {
    const OpCounters& c = *ops_[i];
    OpStatsSnapshot s;
    s.name = names_[i];
    s.samples = c.samples.load(std::memory_order_relaxed);
    s.cpu_ns = c.cpu_ns.load(std::memory_order_relaxed);
    s.bytes_out = c.bytes_out.load(std::memory_order_relaxed);
    s.errors = c.errors.load(std::memory_order_relaxed);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> PipelineStats::skipped_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_names_;
}

}  // namespace sluice::pipeline
