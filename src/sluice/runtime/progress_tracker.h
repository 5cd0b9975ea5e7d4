// ProgressTracker: a Loader's exactly-once accounting (what the consumer has received, by
// epoch, for Loader::Progress). Internal to the runtime.
#ifndef SLUICE_RUNTIME_PROGRESS_TRACKER_H_
#define SLUICE_RUNTIME_PROGRESS_TRACKER_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/core/element.h"
#include "sluice/pipeline/source.h"

namespace sluice::runtime {

// Which samples the consumer has received (or will never receive: skipped, dropped), by
// epoch, for Loader::Progress(). An epoch is folded into first_epoch once this process's
// share of it is received (the whole epoch unless the run is sharded by rank); a rank keeps
// the bits of the last epoch it folded as `finished`, which a merge of the ranks' progress
// needs (pipeline::MergeRankProgress). Thread-safe.
class ProgressTracker {
 public:
  void Init(uint64_t per_epoch, int64_t epochs, const pipeline::Shard& shard,
            pipeline::EvenRule even, const pipeline::SourceProgress* resume) {
    std::lock_guard<std::mutex> lock(mu_);
    n_ = per_epoch;
    epochs_ = epochs;
    shard_ = shard;
    even_ = even;
    if (resume == nullptr) return;
    first_epoch_ = resume->first_epoch;
    if (shard_.sharded()) finished_ = resume->finished;
    // The samples consumed before the division are known but not this process's to count.
    for (const auto& [epoch, bits] : resume->divided) {
      if (epoch < first_epoch_) continue;
      EpochBits& e = EntryLocked(epoch);
      uint64_t remaining = n_;
      for (uint64_t i = 0; i < bits.size() && i < n_; ++i) {
        if (!bits[i]) continue;
        e.bits[i] = true;
        --remaining;
      }
      e.divided = e.bits;
      e.expected = pipeline::SamplesPerRank(remaining, shard_, even_);
    }
    for (const auto& [epoch, bits] : resume->consumed) {
      if (epoch < first_epoch_) continue;
      for (uint64_t i = 0; i < bits.size() && i < n_; ++i) {
        if (bits[i]) MarkLocked(SampleId{epoch, i});
      }
    }
    for (const SampleId& id : resume->padded) MarkLocked(id);
    FoldLocked();
  }

  void Mark(SampleId id) {
    std::lock_guard<std::mutex> lock(mu_);
    MarkLocked(id);
    FoldLocked();
  }

  // The end of the stream: every epoch of the run is done.
  void Finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (epochs_ < 0) return;
    if (shard_.sharded() && !partial_.empty()) {
      finished_ = {{partial_.rbegin()->first, partial_.rbegin()->second.bits}};
    }
    first_epoch_ = std::max<uint32_t>(first_epoch_, static_cast<uint32_t>(epochs_));
    partial_.clear();
  }

  pipeline::SourceProgress Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    pipeline::SourceProgress p;
    p.first_epoch = first_epoch_;
    for (const auto& [epoch, e] : partial_) {
      p.consumed[epoch] = e.bits;
      if (!e.divided.empty()) p.divided[epoch] = e.divided;
      for (uint64_t index : e.pads) p.padded.insert(SampleId{epoch, index});
    }
    p.finished = finished_;
    return p;
  }

 private:
  struct EpochBits {
    std::vector<bool> bits;     // over the samples of the epoch
    std::vector<bool> divided;  // consumed before the epoch was divided (empty: none)
    std::set<uint64_t> pads;    // padded samples received (index >= n)
    uint64_t count = 0;         // samples of this process's share received
    uint64_t expected = 0;      // the size of that share
  };

  EpochBits& EntryLocked(uint32_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [it, added] = partial_.try_emplace(epoch);
    if (added) {
      it->second.bits.assign(n_, false);
      it->second.expected = pipeline::SamplesPerRank(n_, shard_, even_);
    }
    return it->second;
  }

  void MarkLocked(SampleId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (id.epoch < first_epoch_) return;
    EpochBits& e = EntryLocked(id.epoch);
    if (id.index < n_) {
      if (e.bits[id.index]) return;
      e.bits[id.index] = true;
    } else if (!e.pads.insert(id.index).second) {
      return;
    }
    ++e.count;
  }

  void FoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = partial_.find(first_epoch_);
         it != partial_.end() && it->second.count >= it->second.expected;
         it = partial_.find(first_epoch_)) {
      if (shard_.sharded()) finished_ = {{first_epoch_, std::move(it->second.bits)}};
      partial_.erase(it);
      ++first_epoch_;
    }
  }

  mutable std::mutex mu_;
  uint64_t n_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t epochs_ ABSL_GUARDED_BY(mu_) = 1;
  pipeline::Shard shard_ ABSL_GUARDED_BY(mu_);
  pipeline::EvenRule even_ ABSL_GUARDED_BY(mu_) = pipeline::EvenRule::kDrop;
  uint32_t first_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint32_t, EpochBits> partial_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::vector<bool>> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_PROGRESS_TRACKER_H_
