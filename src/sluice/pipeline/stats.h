// Counters a running pipeline keeps for itself, cheaply (relaxed atomics, thread CPU
// clocks). Written by pipeline threads, read by anyone at any time; a read is a consistent
// enough snapshot for reporting, not a transaction.
#ifndef SLUICE_PIPELINE_STATS_H_
#define SLUICE_PIPELINE_STATS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace sluice::pipeline {

struct OpCounters {
  std::atomic<int64_t> samples{0};    // elements the op produced
  std::atomic<int64_t> cpu_ns{0};     // thread CPU time spent inside Apply()
  std::atomic<int64_t> bytes_out{0};  // payload bytes of the elements it produced
  std::atomic<int64_t> errors{0};     // elements it failed on
};

struct OpStatsSnapshot {
  std::string name;
  int64_t samples = 0;
  int64_t cpu_ns = 0;
  int64_t bytes_out = 0;
  int64_t errors = 0;
  double cpu_ms_per_sample() const { return samples ? cpu_ns / 1e6 / samples : 0; }
  double bytes_per_sample() const { return samples ? static_cast<double>(bytes_out) / samples : 0; }
};

class PipelineStats {
 public:
  static constexpr size_t kMaxSkippedNames = 100;

  // REQUIRES: called once, before the pipeline runs.
  void Init(const std::vector<std::string>& op_names);

  OpCounters& op(int i) { return *ops_[i]; }
  int num_ops() const { return static_cast<int>(ops_.size()); }

  // A sample dropped under on_error: skip. Keeps the first kMaxSkippedNames descriptions.
  void RecordSkip(const std::string& description);

  std::atomic<int64_t> source_samples{0};  // samples the source produced
  std::atomic<int64_t> samples_out{0};     // samples that reached the output (in batches)
  std::atomic<int64_t> batches_out{0};
  // Batches stacked without a copy: their samples were written into their slots
  // (core/batch_slots.h, BatchOptions::in_place).
  std::atomic<int64_t> batches_in_place{0};
  // The trainer-side shuffle buffer (shuffle_buffer), each time it is full: what it holds
  // now and the most it has held, in samples and payload bytes (the memory it costs).
  std::atomic<int64_t> shuffle_buffer_samples{0};
  std::atomic<int64_t> shuffle_buffer_bytes{0};
  std::atomic<int64_t> shuffle_buffer_peak_samples{0};
  std::atomic<int64_t> shuffle_buffer_peak_bytes{0};
  void RecordShuffleBuffer(size_t samples, size_t bytes);

  std::vector<OpStatsSnapshot> SnapshotOps() const;
  int64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }
  std::vector<std::string> skipped_names() const;

 private:
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<OpCounters>> ops_;
  std::atomic<int64_t> skipped_{0};
  mutable std::mutex mu_;
  std::vector<std::string> skipped_names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_STATS_H_
