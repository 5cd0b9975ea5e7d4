#include "sluice/pipeline/split_groups.h"

#include <algorithm>
#include <utility>

namespace sluice::pipeline {

SplitGroups::SplitGroups(size_t samples, size_t batch_size, bool drop_remainder)
    : results_(samples),
      finished_(samples, false),
      batch_size_(std::max<size_t>(1, batch_size)),
      drop_remainder_(drop_remainder) {}

SplitGroups::Ready SplitGroups::Resolve(size_t position, std::optional<Element> element) {
  Ready ready;
  if (position >= results_.size() || finished_[position]) return ready;
  results_[position] = std::move(element);
  finished_[position] = true;
  ++resolved_;
  while (next_ < results_.size() && finished_[next_]) {
    std::optional<Element>& r = results_[next_++];
    if (!r.has_value()) continue;
    group_.push_back(std::move(*r));
    r.reset();
    if (group_.size() == batch_size_) {
      ready.batches.push_back(std::move(group_));
      group_.clear();
    }
  }
  if (resolved_ == results_.size() && !group_.empty()) {
    if (drop_remainder_) {
      ready.dropped = std::move(group_);
    } else {
      ready.batches.push_back(std::move(group_));
    }
    group_.clear();
  }
  return ready;
}

}  // namespace sluice::pipeline
