// The local consumer of an offloading Loader: SplitSource (the samples of the splits the
// coordinator gives it) and SplitBatcher (their batches, per split, at cut = after batch, as
// a worker makes them). Internal to the runtime.
#ifndef SLUICE_RUNTIME_SPLIT_SOURCE_H_
#define SLUICE_RUNTIME_SPLIT_SOURCE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/core/element.h"
#include "sluice/pipeline/batch.h"
#include "sluice/pipeline/iterators.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/split_groups.h"
#include "sluice/runtime/coordinator.h"
#include "sluice/runtime/merge.h"

namespace sluice::runtime {

// Local side of cut = after batch: collects the processed samples of each local split and
// stacks them, in split order, into batches of the batch size (a short last batch of the
// split is kept, or dropped and reported as skipped under drop_remainder), exactly as a
// worker batches a split. Thread-safe.
class SplitBatcher {
 public:
  SplitBatcher(Merge* merge, std::function<void(SampleId)> skip, Schema input,
               pipeline::BatchOptions options)
      : merge_(merge),
        skip_(std::move(skip)),
        input_(std::move(input)),
        options_(std::move(options)) {}

  void Begin(const SplitAssignment& split) {
    std::lock_guard<std::mutex> lock(mu_);
    splits_.try_emplace(split.split_id, split.samples.size(), static_cast<size_t>(options_.size),
                        options_.drop_remainder);
    for (size_t i = 0; i < split.samples.size(); ++i) {
      where_[split.samples[i]] = {split.split_id, i};
    }
  }
  void Add(Element element) {
    const SampleId id = element.id;
    Resolve(id, std::move(element));
  }
  void Skip(SampleId id) { Resolve(id, std::nullopt); }

 private:
  void Resolve(SampleId id, std::optional<Element> element) {
    std::vector<std::vector<Element>> batches;
    std::vector<SampleId> dropped;
    const bool skipped = !element.has_value();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto w = where_.find(id);
      if (w == where_.end()) return;
      const auto [split_id, position] = w->second;
      where_.erase(w);
      pipeline::SplitGroups& groups = splits_.at(split_id);
      pipeline::SplitGroups::Ready ready = groups.Resolve(position, std::move(element));
      batches = std::move(ready.batches);
      for (const Element& e : ready.dropped) dropped.push_back(e.id);
      if (groups.done()) splits_.erase(split_id);
    }
    if (skipped) skip_(id);
    for (const SampleId& d : dropped) skip_(d);
    for (std::vector<Element>& members : batches) {
      StatusOr<Element> batch = pipeline::StackBatch(std::move(members), input_, options_);
      if (!batch.ok()) {
        merge_->Fail(batch.status());
        return;
      }
      if (!merge_->Push(0, *std::move(batch)).ok()) return;
    }
  }

  Merge* const merge_;
  const std::function<void(SampleId)> skip_;
  const Schema input_;
  const pipeline::BatchOptions options_;
  std::mutex mu_;
  std::map<uint64_t, pipeline::SplitGroups> splits_ ABSL_GUARDED_BY(mu_);
  std::map<SampleId, std::pair<uint64_t, size_t>> where_ ABSL_GUARDED_BY(mu_);
};

// The local consumer's source: the samples of the splits the coordinator gives consumer 0,
// as source elements. Cancel() cancels the coordinator (the whole run).
class SplitSource : public pipeline::Iterator {
 public:
  SplitSource(Coordinator* coordinator, std::shared_ptr<const pipeline::SourceFiles> files,
              bool with_label, SplitBatcher* batcher)
      : coordinator_(coordinator),
        files_(std::move(files)),
        with_label_(with_label),
        batcher_(batcher),
        schema_(pipeline::SourceSchema(
            with_label ? pipeline::LabelMode::kParentDir : pipeline::LabelMode::kNone,
            !files_->spans.empty())) {}

  Status GetNext(Element* out, bool* end_of_stream) override {
    if (cancelled_.load()) return absl::CancelledError("pipeline cancelled");
    while (position_ >= split_.samples.size()) {
      position_ = 0;
      switch (coordinator_->Acquire(0, &split_)) {
        case Coordinator::Acquired::kSplit:
          if (batcher_ != nullptr) batcher_->Begin(split_);
          break;
        case Coordinator::Acquired::kDone:
          split_.samples.clear();
          *end_of_stream = true;
          return absl::OkStatus();
        default:
          split_.samples.clear();
          return absl::CancelledError("pipeline cancelled");
      }
    }
    const SampleId id = split_.samples[position_];
    *out = pipeline::MakeSourceElement(*files_, with_label_, id, split_.files[position_]);
    ++position_;
    *end_of_stream = false;
    return absl::OkStatus();
  }
  void Cancel() override {
    cancelled_.store(true);
    coordinator_->Cancel();
  }
  const Schema& schema() const override { return schema_; }

 private:
  Coordinator* const coordinator_;
  const std::shared_ptr<const pipeline::SourceFiles> files_;
  const bool with_label_;
  SplitBatcher* const batcher_;
  const Schema schema_;
  SplitAssignment split_;
  size_t position_ = 0;
  std::atomic<bool> cancelled_{false};
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_SPLIT_SOURCE_H_
