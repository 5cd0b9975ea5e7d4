// Merge: where the samples processed in different places (the local prefix, each worker)
// meet before the trainer-side suffix (docs/offload.md, "Merge" and "Exactly once").
//
// Producers Push() elements (single samples, or batches whose `members` are the samples)
// and Skip() samples dropped under on_error: skip. Each sample is recorded with the
// Coordinator (MarkDelivered / MarkSkipped) as it enters, which is also the deduplication:
// an element whose samples were all delivered already this epoch (a late duplicate from a
// worker whose split was re-queued) is dropped and counted. (Batches are whole units: a
// batch with at least one new sample is kept.)
//
// Delivery order:
//   first-come (default)  a FIFO bounded by `max_elements` and `max_bytes`; Push() blocks
//                         while it is full, which is how a stalled consumer stops producers;
//   deterministic         a reorder buffer keyed by the coordinator's sequence number (the
//                         position in the epoch order): an element is released once every
//                         sample before it was released or skipped, so the output order does
//                         not depend on where samples were processed. The buffer is bounded
//                         by the coordinator's `window` (Push() never blocks here).
// The stream ends once the coordinator is done and everything was released.
//
// Thread-safe: any number of producers; one consumer calls GetNext() (iterator.h); Cancel()
// and Fail() from any thread.
#ifndef SLUICE_RUNTIME_MERGE_H_
#define SLUICE_RUNTIME_MERGE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/iterator.h"
#include "sluice/runtime/coordinator.h"

namespace sluice::runtime {

struct MergeOptions {
  bool deterministic = false;
  size_t max_elements = 64;     // first-come capacity, >= 1
  size_t max_bytes = 64 << 20;  // first-come byte budget (0: none; one element always fits)
};

struct MergeStats {
  std::vector<int64_t> samples_by_place;  // samples accepted from each place
  int64_t duplicates_dropped = 0;         // samples of dropped duplicate elements
  int64_t skipped = 0;                    // samples recorded by Skip()
  size_t buffered = 0;                    // elements waiting for the consumer
  size_t peak_buffered = 0;
};

class Merge : public pipeline::Iterator {
 public:
  // `coordinator` must outlive the merge. Places are 0..num_places-1.
  Merge(Coordinator* coordinator, Schema schema, int num_places, MergeOptions options);

  // Offers `element`, produced at `place`. Returns true if it was kept, false if dropped as
  // a duplicate (or for samples the coordinator never handed out). Cancelled after Cancel().
  StatusOr<bool> Push(int place, Element element);
  // Push() of each of `elements` in turn, produced at `place` (a chunk from a worker), under
  // one lock and with one wake-up of the consumer, not one per element: before waiting for
  // room, and at the end. Cancelled after Cancel(); the merge's failure after Fail().
  Status PushAll(int place, std::vector<Element> elements);
  // Records a sample dropped under on_error: skip.
  void Skip(SampleId id);
  // Ends the stream with `status` (a failure that on_error: fail makes fatal). The first
  // failure wins.
  void Fail(Status status);

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return schema_; }

  MergeStats Stats() const;
  // The failure given to Fail(), or OK.
  Status failure() const;

 private:
  bool HasRoomLocked(size_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // First-come: waits until `bytes` fit, waking the consumer first where `*unannounced` (this
  // producer added elements since it last did; cleared then). The merge's end or failure.
  Status WaitForRoomLocked(std::unique_lock<std::mutex>& lock, size_t bytes, bool* unannounced)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records `element`'s samples with the coordinator and queues it; false for a duplicate
  // (counted).
  bool AddLocked(int place, Element element, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EmptyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Coordinator* const coordinator_;
  const Schema schema_;
  const MergeOptions options_;

  mutable std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable ready_;
  // First-come.
  std::deque<std::pair<Element, size_t>> fifo_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Deterministic: elements by their first sequence number, with all their sequence numbers.
  struct Held {
    Element element;
    std::vector<uint64_t> seqs;
  };
  std::map<uint64_t, Held> reorder_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> resolved_ahead_ ABSL_GUARDED_BY(mu_);  // skipped or released, > next_
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;

  std::vector<int64_t> samples_by_place_ ABSL_GUARDED_BY(mu_);
  int64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
  size_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  bool coordinator_done_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  Status failure_ ABSL_GUARDED_BY(mu_);
};

// An Iterator that reads a Merge it shares (so producers can keep pushing into the merge
// while the pipeline built on top of it owns only this reader).
class MergeReader : public pipeline::Iterator {
 public:
  explicit MergeReader(std::shared_ptr<Merge> merge) : merge_(std::move(merge)) {}
  Status GetNext(Element* out, bool* end_of_stream) override {
    return merge_->GetNext(out, end_of_stream);
  }
  void Cancel() override { merge_->Cancel(); }
  const Schema& schema() const override { return merge_->schema(); }

 private:
  std::shared_ptr<Merge> merge_;
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_MERGE_H_
