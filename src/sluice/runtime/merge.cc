#include "sluice/runtime/merge.h"

#include <algorithm>
#include <utility>

namespace sluice::runtime {

Merge::Merge(Coordinator* coordinator, Schema schema, int num_places, MergeOptions options)
    : coordinator_(coordinator),
      schema_(std::move(schema)),
      options_(options),
      samples_by_place_(static_cast<size_t>(std::max(1, num_places)), 0) {
  std::lock_guard<std::mutex> lock(mu_);
  coordinator_done_ = coordinator_->done();
}

bool Merge::HasRoomLocked(size_t bytes) const {
  if (fifo_.empty()) return true;
  if (fifo_.size() >= std::max<size_t>(1, options_.max_elements)) return false;
  return options_.max_bytes == 0 || bytes_ + bytes <= options_.max_bytes;
}

bool Merge::ReadyLocked() const {
  if (options_.deterministic) {
    return !reorder_.empty() && (reorder_.begin()->first == next_seq_ || coordinator_done_);
  }
  return !fifo_.empty();
}

bool Merge::EmptyLocked() const { return fifo_.empty() && reorder_.empty(); }

void Merge::AdvanceLocked() {
  while (!resolved_ahead_.empty() && *resolved_ahead_.begin() <= next_seq_) {
    if (*resolved_ahead_.begin() == next_seq_) ++next_seq_;
    resolved_ahead_.erase(resolved_ahead_.begin());
  }
}

Status Merge::WaitForRoomLocked(std::unique_lock<std::mutex>& lock, size_t bytes,
                                bool* unannounced) {
  if (!options_.deterministic && !HasRoomLocked(bytes)) {
    // The consumer may be asleep on what this producer added without waking it yet.
    if (*unannounced) ready_.notify_all();
    *unannounced = false;
    not_full_.wait(lock, [&] { return cancelled_ || !failure_.ok() || HasRoomLocked(bytes); });
  }
  if (cancelled_) return absl::CancelledError("merge cancelled");
  return failure_;
}

bool Merge::AddLocked(int place, Element element, size_t bytes) {
  std::vector<uint64_t> seqs;
  int64_t dropped = 0;
  auto mark = [&](SampleId id) {
    if (std::optional<uint64_t> seq = coordinator_->MarkDelivered(id)) {
      seqs.push_back(*seq);
    } else {
      ++dropped;
    }
  };
  if (element.members.empty()) {
    mark(element.id);
  } else {
    for (const SampleId& id : element.members) mark(id);
  }
  coordinator_done_ = coordinator_->done();
  if (seqs.empty()) {
    duplicates_ += dropped;
    return false;
  }
  // A batch with some members new is kept; the others were counted by the coordinator.
  samples_by_place_[static_cast<size_t>(place)] += static_cast<int64_t>(seqs.size());
  if (options_.deterministic) {
    const uint64_t key = *std::min_element(seqs.begin(), seqs.end());
    reorder_.emplace(key, Held{std::move(element), std::move(seqs)});
    peak_ = std::max(peak_, reorder_.size());
  } else {
    bytes_ += bytes;
    fifo_.emplace_back(std::move(element), bytes);
    peak_ = std::max(peak_, fifo_.size());
  }
  return true;
}

StatusOr<bool> Merge::Push(int place, Element element) {
  const size_t bytes = element.nbytes();
  std::unique_lock<std::mutex> lock(mu_);
  bool unannounced = false;
  SLUICE_RETURN_IF_ERROR(WaitForRoomLocked(lock, bytes, &unannounced));
  const bool kept = AddLocked(place, std::move(element), bytes);
  ready_.notify_all();  // kept, or the coordinator may be done
  return kept;
}

Status Merge::PushAll(int place, std::vector<Element> elements) {
  std::unique_lock<std::mutex> lock(mu_);
  bool unannounced = false;
  for (Element& element : elements) {
    const size_t bytes = element.nbytes();
    SLUICE_RETURN_IF_ERROR(WaitForRoomLocked(lock, bytes, &unannounced));
    AddLocked(place, std::move(element), bytes);
    unannounced = true;  // kept, or the coordinator may be done
  }
  if (unannounced) ready_.notify_all();
  return absl::OkStatus();
}

void Merge::Skip(SampleId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::optional<uint64_t> seq = coordinator_->MarkSkipped(id)) {
    ++skipped_;
    if (options_.deterministic && *seq >= next_seq_) {
      resolved_ahead_.insert(*seq);
      AdvanceLocked();
    }
  }
  coordinator_done_ = coordinator_->done();
  ready_.notify_all();
}

void Merge::Fail(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.ok() && !status.ok()) failure_ = std::move(status);
  ready_.notify_all();
  not_full_.notify_all();
}

Status Merge::GetNext(Element* out, bool* end_of_stream) {
  std::unique_lock<std::mutex> lock(mu_);
  ready_.wait(lock, [&] {
    return cancelled_ || !failure_.ok() || ReadyLocked() || (coordinator_done_ && EmptyLocked());
  });
  if (cancelled_) return absl::CancelledError("pipeline cancelled");
  if (!failure_.ok()) return failure_;
  if (!ReadyLocked()) {
    *end_of_stream = true;
    return absl::OkStatus();
  }
  if (options_.deterministic) {
    auto it = reorder_.begin();
    *out = std::move(it->second.element);
    for (uint64_t seq : it->second.seqs) {
      if (seq >= next_seq_) resolved_ahead_.insert(seq);
    }
    reorder_.erase(it);
    AdvanceLocked();
  } else {
    *out = std::move(fifo_.front().first);
    bytes_ -= fifo_.front().second;
    fifo_.pop_front();
    not_full_.notify_one();
  }
  *end_of_stream = false;
  return absl::OkStatus();
}

void Merge::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  fifo_.clear();
  reorder_.clear();
  bytes_ = 0;
  ready_.notify_all();
  not_full_.notify_all();
}

Status Merge::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

MergeStats Merge::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MergeStats s;
  s.samples_by_place = samples_by_place_;
  s.duplicates_dropped = duplicates_;
  s.skipped = skipped_;
  s.buffered = fifo_.size() + reorder_.size();
  s.peak_buffered = peak_;
  return s;
}

}  // namespace sluice::runtime
