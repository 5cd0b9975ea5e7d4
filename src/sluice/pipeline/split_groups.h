// SplitGroups: one split's samples made into batches in split order, whatever order they
// finish in. A worker batches each split it runs at cut = after batch this way, and the
// trainer's local side batches its own splits the same way, so that a batch holds the same
// samples wherever its split ran (runtime/split_source.h, rpc/worker_service.h). Not
// thread-safe: its owner locks.
#ifndef SLUICE_PIPELINE_SPLIT_GROUPS_H_
#define SLUICE_PIPELINE_SPLIT_GROUPS_H_

#include <cstddef>
#include <optional>
#include <vector>

#include "sluice/core/element.h"

namespace sluice::pipeline {

class SplitGroups {
 public:
  // A split of `samples` samples, batches of `batch_size` (>= 1). With `drop_remainder` a
  // short last batch is dropped instead of given out.
  SplitGroups(size_t samples, size_t batch_size, bool drop_remainder);

  struct Ready {
    std::vector<std::vector<Element>> batches;  // the members of each batch now complete
    std::vector<Element> dropped;               // the short last batch, under drop_remainder
  };
  // Sample `position` (< samples) finished with `element`, or failed (nullopt: it is left
  // out of its batch). Returns what is complete now: every batch whose members are the next
  // `batch_size` finished samples in split order, and once every sample is in, the short
  // last batch (or its members as dropped). A position resolved twice is ignored.
  Ready Resolve(size_t position, std::optional<Element> element);

  // Every sample is in and every batch given out (or dropped).
  bool done() const { return resolved_ == results_.size() && next_ == results_.size(); }

 private:
  std::vector<std::optional<Element>> results_;
  std::vector<bool> finished_;
  size_t next_ = 0;      // the first position not yet taken into a batch
  size_t resolved_ = 0;  // positions finished or failed
  size_t batch_size_;
  bool drop_remainder_;
  std::vector<Element> group_;  // the batch being filled
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_SPLIT_GROUPS_H_
