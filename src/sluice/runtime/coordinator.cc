#include "sluice/runtime/coordinator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "sluice/pipeline/source.h"

namespace sluice::runtime {

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options,
                                                           std::vector<ConsumerConfig> consumers) {
  if (options.split_size == 0) {
    return absl::InvalidArgumentError("coordinator: split_size must be at least 1");
  }
  if (options.epochs == 0 || options.epochs < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator: epochs must be at least 1, or -1; got ", options.epochs));
  }
  if (consumers.empty()) return absl::InvalidArgumentError("coordinator: no consumers");
  double total = 0;
  for (const ConsumerConfig& c : consumers) {
    if (!(c.share >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("coordinator: consumer ", c.name, " has a negative share ", c.share));
    }
    if (c.max_open_splits < 1) {
      return absl::InvalidArgumentError(absl::StrCat("coordinator: consumer ", c.name,
                                                     " needs max_open_splits >= 1, got ",
                                                     c.max_open_splits));
    }
    total += c.share;
  }
  if (total <= 0) return absl::InvalidArgumentError("coordinator: every share is zero");
  SLUICE_RETURN_IF_ERROR(
      pipeline::CheckShard(options.shard, options.even, options.samples_per_epoch));
  for (ConsumerConfig& c : consumers) c.share /= total;
  return std::unique_ptr<Coordinator>(new Coordinator(options, std::move(consumers)));
}

Coordinator::Coordinator(CoordinatorOptions options, std::vector<ConsumerConfig> consumers)
    : options_(std::move(options)),
      base_epoch_(options_.resume != nullptr ? options_.resume->first_epoch : 0) {
  std::lock_guard<std::mutex> lock(mu_);
  for (ConsumerConfig& c : consumers) {
    Consumer consumer;
    consumer.config = std::move(c);
    consumers_.push_back(std::move(consumer));
  }
  epochs_started_ = base_epoch_;
  const uint64_t n = options_.samples_per_epoch;
  if (!options_.split_groups.empty()) {
    group_start_.assign(n, false);
    for (uint64_t g : options_.split_groups) {
      if (g < n) group_start_[g] = true;
    }
  }
  per_epoch_ = pipeline::SamplesPerRank(n, options_.shard, options_.even);
  if (options_.resume == nullptr || n == 0) return;
  const pipeline::SourceProgress& progress = *options_.resume;
  auto in_run = [&](uint32_t epoch) {
    return epoch >= base_epoch_ &&
           (options_.epochs < 0 || static_cast<int64_t>(epoch) < options_.epochs);
  };
  // An epoch divided afresh holds the share of what remained of it: its own length, maybe 0
  // (such an epoch is over before it starts).
  if (!progress.divided.empty() && progress.divided.rbegin()->first >= base_epoch_) {
    for (uint32_t epoch = base_epoch_; epoch <= progress.divided.rbegin()->first; ++epoch) {
      uint64_t length = per_epoch_;
      if (auto it = progress.divided.find(epoch); it != progress.divided.end()) {
        const std::vector<bool>& bits = it->second;
        uint64_t remaining = n;
        for (uint64_t i = 0; i < n && i < bits.size(); ++i) remaining -= bits[i] ? 1 : 0;
        length = pipeline::SamplesPerRank(remaining, options_.shard, options_.even);
      }
      head_.push_back(head_.back() + length);
      if (length == 0 && in_run(epoch)) ++epochs_completed_;
    }
  }
  // Reserve the samples received before (padded ones included) in the partly consumed
  // epochs; every epoch up to the last of them starts now, in order.
  std::set<uint32_t> partial;
  for (const auto& [epoch, bits] : progress.consumed) partial.insert(epoch);
  for (const SampleId& id : progress.padded) partial.insert(id.epoch);
  for (const uint32_t last : partial) {
    if (!in_run(last)) continue;
    for (uint32_t epoch = epochs_started_; epoch <= last; ++epoch) EpochLocked(epoch);
    auto it = epochs_.find(last);
    if (it == epochs_.end()) continue;  // an empty share
    EpochState& e = it->second;
    for (uint64_t pos = 0; pos < e.share.ids.size(); ++pos) {
      const SampleId id{last, e.share.ids[pos]};
      if (progress.Consumed(id)) {
        e.state[pos] = State::kReserved;
        reserved_.push_back(id);
      }
    }
  }
}

uint64_t Coordinator::FirstSeqOf(uint32_t epoch) const {
  const uint64_t i = epoch - base_epoch_;
  const uint64_t k = head_.size() - 1;
  if (i <= k) return head_[i];
  return head_[k] + (i - k) * per_epoch_;
}

uint32_t Coordinator::EpochOfSeq(uint64_t seq) const {
  const uint64_t k = head_.size() - 1;
  if (seq < head_[k]) {
    // The last epoch of the head that starts at or before `seq` (empty ones are passed).
    auto it = std::upper_bound(head_.begin(), head_.end(), seq);
    return base_epoch_ + static_cast<uint32_t>(it - head_.begin() - 1);
  }
  if (per_epoch_ == 0) return base_epoch_ + static_cast<uint32_t>(k);
  return base_epoch_ + static_cast<uint32_t>(k + (seq - head_[k]) / per_epoch_);
}

uint64_t Coordinator::TotalSeqs() const {
  if (options_.epochs < 0) return std::numeric_limits<uint64_t>::max();
  if (options_.epochs <= static_cast<int64_t>(base_epoch_)) return 0;
  return FirstSeqOf(static_cast<uint32_t>(options_.epochs));
}

bool Coordinator::DoneLocked() const {
  if (options_.samples_per_epoch == 0) return true;
  return options_.epochs >= 0 &&
         epochs_completed_ >= options_.epochs - static_cast<int64_t>(base_epoch_);
}

Coordinator::EpochState* Coordinator::EpochLocked(uint32_t epoch) {
  auto it = epochs_.find(epoch);
  if (it != epochs_.end()) return &it->second;
  if (epoch < epochs_started_) return nullptr;  // finished
  epochs_started_ = std::max(epochs_started_, epoch + 1);
  if (LengthOf(epoch) == 0) return nullptr;  // an empty share: counted as completed
  // Epochs start in order, as fresh splits reach them.
  EpochState& e = epochs_[epoch];
  const uint64_t n = options_.samples_per_epoch;
  e.share = pipeline::EpochShareOf(n, options_.shuffle, options_.seed, epoch, options_.shard,
                                   options_.even, options_.resume.get(), options_.shuffle_groups);
  // Padded samples have indices in [n, n + world_size).
  e.inverse.assign(n + static_cast<uint64_t>(options_.shard.world_size), kNoPosition);
  for (uint64_t pos = 0; pos < e.share.ids.size(); ++pos) e.inverse[e.share.ids[pos]] = pos;
  e.state.assign(e.share.ids.size(), State::kPending);
  return &e;
}

bool Coordinator::StartsGroupLocked(const EpochState& e, uint64_t position) const {
  const uint64_t index = e.share.ids[position];
  return index < group_start_.size() && group_start_[index];
}

std::optional<uint64_t> Coordinator::SeqLocked(SampleId id) const {
  auto it = epochs_.find(id.epoch);
  if (it == epochs_.end() || id.index >= it->second.inverse.size()) return std::nullopt;
  const uint64_t position = it->second.inverse[id.index];
  if (position == kNoPosition) return std::nullopt;  // another rank's sample
  return FirstSeqOf(id.epoch) + position;
}

Coordinator::State& Coordinator::StateLocked(uint64_t seq) {
  const uint32_t epoch = EpochOfSeq(seq);
  return epochs_.at(epoch).state[seq - FirstSeqOf(epoch)];
}

std::optional<uint64_t> Coordinator::SeqOf(SampleId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return SeqLocked(id);
}

std::vector<SampleId> Coordinator::ReservedSamples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

bool Coordinator::EligibleLocked(int consumer, uint64_t size) const {
  const Consumer& c = consumers_[consumer];
  return static_cast<double>(c.assigned - c.assigned_base) <
         c.config.share * static_cast<double>(total_assigned_ - total_assigned_base_ +
                                              static_cast<int64_t>(size));
}

bool Coordinator::OtherBehindLocked(int consumer, uint64_t size) const {
  for (int i = 0; i < static_cast<int>(consumers_.size()); ++i) {
    if (i == consumer) continue;
    const Consumer& c = consumers_[i];
    if (c.config.active && c.config.share > 0 && EligibleLocked(i, size)) return true;
  }
  return false;
}

Status Coordinator::SetShares(const std::vector<double>& shares) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shares.size() != consumers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("coordinator: ", shares.size(),
                                                   " shares for ", consumers_.size(),
                                                   " consumers"));
  }
  double total = 0;
  for (double s : shares) {
    if (!(s >= 0) || !std::isfinite(s)) {
      return absl::InvalidArgumentError(absl::StrCat("coordinator: bad share ", s));
    }
    total += s;
  }
  if (total <= 0) return absl::InvalidArgumentError("coordinator: every share is zero");
  for (size_t i = 0; i < shares.size(); ++i) {
    consumers_[i].config.share = shares[i] / total;
    consumers_[i].assigned_base = consumers_[i].assigned;
  }
  total_assigned_base_ = total_assigned_;
  cv_.notify_all();
  return absl::OkStatus();
}

bool Coordinator::OtherWaitingLocked(int consumer, uint64_t size) const {
  for (int i = 0; i < static_cast<int>(consumers_.size()); ++i) {
    if (i == consumer) continue;
    const Consumer& c = consumers_[i];
    // A consumer held to its share (spill=workers) does not hold the others back: its share
    // is a cap on what it takes, set because its CPU is the limit, not a claim on what the
    // others could take beyond theirs (docs/offload.md, "Splits, ratio, spill-over").
    if (!c.config.spill_over) continue;
    if (c.config.active && c.config.share > 0 && c.open < c.config.max_open_splits &&
        EligibleLocked(i, size)) {
      return true;
    }
  }
  return false;
}

bool Coordinator::OtherActiveWithShareLocked(int consumer, bool delivering) const {
  for (int i = 0; i < static_cast<int>(consumers_.size()); ++i) {
    const Consumer& c = consumers_[i];
    if (i != consumer && c.config.active && c.config.share > 0 && (!delivering || c.delivering)) {
      return true;
    }
  }
  return false;
}

bool Coordinator::AnyHeldLocked() const {
  for (const Consumer& c : consumers_) {
    if (!c.config.spill_over) return true;
  }
  return false;
}

std::vector<uint64_t> Coordinator::PeekLocked() {
  while (!requeued_.empty()) {
    std::vector<uint64_t>& front = requeued_.front();
    std::erase_if(front, [&](uint64_t seq) { return StateLocked(seq) != State::kPending; });
    if (!front.empty()) return front;
    requeued_.pop_front();
  }
  const uint64_t n = options_.samples_per_epoch;
  const uint64_t total = TotalSeqs();
  if (n == 0 || next_fresh_ >= total) return {};
  if (options_.window > 0 && next_fresh_ >= oldest_unresolved_ + options_.window) return {};
  // The next `split_size` pending samples of the epoch (reserved ones are passed over);
  // a run never crosses an epoch boundary.
  std::vector<uint64_t> seqs;
  uint64_t s = next_fresh_;
  while (seqs.empty() && s < total) {
    const uint32_t epoch = EpochOfSeq(s);
    const uint64_t epoch_first = FirstSeqOf(epoch);
    const uint64_t epoch_end = FirstSeqOf(epoch + 1);
    EpochState* e = EpochLocked(epoch);  // a fresh run may start an epoch
    if (e == nullptr) {  // already finished (everything left in it was reserved)
      s = epoch_end;
      continue;
    }
    for (; s < epoch_end && seqs.size() < options_.split_size; ++s) {
      if (!seqs.empty() && StartsGroupLocked(*e, s - epoch_first)) break;
      if (e->state[s - epoch_first] == State::kPending) seqs.push_back(s);
    }
  }
  fresh_end_ = s;
  if (seqs.empty()) next_fresh_ = s;  // nothing left to hand out
  return seqs;
}

void Coordinator::TakeLocked() {
  if (!requeued_.empty()) {
    requeued_.pop_front();
    return;
  }
  next_fresh_ = fresh_end_;
}

Coordinator::Acquired Coordinator::AcquireLocked(int consumer, SplitAssignment* out) {
  if (cancelled_) return Acquired::kCancelled;
  if (DoneLocked()) return Acquired::kDone;
  Consumer& c = consumers_[consumer];
  if (!c.config.active) return Acquired::kInactive;
  if (c.open >= c.config.max_open_splits) return Acquired::kWait;
  std::vector<uint64_t> seqs = PeekLocked();
  if (seqs.empty()) return Acquired::kWait;
  if (!EligibleLocked(consumer, seqs.size()) &&
      (options_.spill_over ? OtherWaitingLocked(consumer, seqs.size())
                           : OtherBehindLocked(consumer, seqs.size()))) {
    return Acquired::kWait;
  }
  // A share of exactly zero is an explicit "not here" (ratio 1.0 offloads everything): such a
  // consumer spills over only when no consumer with a positive share is active any more,
  // e.g. when every worker is down.
  if (c.config.share <= 0 && OtherActiveWithShareLocked(consumer)) return Acquired::kWait;
  if (!c.config.spill_over && !EligibleLocked(consumer, seqs.size()) &&
      OtherActiveWithShareLocked(consumer, /*delivering=*/true)) {
    return Acquired::kWait;
  }
  TakeLocked();
  const uint64_t split_id = next_split_id_++;
  const uint32_t epoch = EpochOfSeq(seqs.front());
  const uint64_t epoch_first = FirstSeqOf(epoch);
  EpochState* e = EpochLocked(epoch);
  out->split_id = split_id;
  out->epoch = epoch;
  out->samples.clear();
  out->samples.reserve(seqs.size());
  out->files.clear();
  out->files.reserve(seqs.size());
  for (uint64_t seq : seqs) {
    const uint64_t position = seq - epoch_first;
    e->state[position] = State::kAssigned;
    split_of_[seq] = split_id;
    const uint64_t index = e->share.ids[position];
    out->samples.push_back(SampleId{epoch, index});
    out->files.push_back(e->share.FileOf(index));
  }
  out->seqs = seqs;
  OpenSplit& split = open_[split_id];
  split.consumer = consumer;
  split.unresolved = seqs.size();
  split.seqs = std::move(seqs);
  ++c.open;
  ++c.splits;
  c.assigned += static_cast<int64_t>(split.unresolved);
  total_assigned_ += static_cast<int64_t>(split.unresolved);
  cv_.notify_all();  // shares moved: a consumer held back may now be eligible
  return Acquired::kSplit;
}

Coordinator::Acquired Coordinator::Acquire(int consumer, SplitAssignment* out) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Acquired a = AcquireLocked(consumer, out);
    if (a != Acquired::kWait) return a;
    cv_.wait(lock);
  }
}

Coordinator::Acquired Coordinator::TryAcquire(int consumer, SplitAssignment* out) {
  std::lock_guard<std::mutex> lock(mu_);
  return AcquireLocked(consumer, out);
}

std::optional<uint64_t> Coordinator::ResolveLocked(SampleId id, State to) {
  if (epochs_.find(id.epoch) == epochs_.end()) {
    if (id.epoch < epochs_started_) ++duplicates_;  // its epoch already finished
    return std::nullopt;
  }
  std::optional<uint64_t> seq = SeqLocked(id);
  if (!seq.has_value()) return std::nullopt;  // not a sample of the source
  State& state = StateLocked(*seq);
  if (state == State::kDelivered || state == State::kSkipped) {
    ++duplicates_;
    return std::nullopt;
  }
  // A reserved sample was consumed before the resume: only MarkSkipped resolves it.
  if (state == State::kReserved && to != State::kSkipped) return std::nullopt;
  const bool reserved = state == State::kReserved;
  // Whether this changes what a consumer waiting in Acquire (or WaitDone) may do: a split
  // closing (its consumer may open another; others compare open counts), the window moving,
  // an epoch finishing. Most samples change none of these, and waking every waiting consumer
  // for each of them had cost the trainer two idle thread wake-ups per sample delivered.
  bool wake = false;
  // Pending: either never handed out (not ours to accept) or re-queued after a failure
  // (a late delivery from the failed consumer, accepted).
  if (state == State::kPending && *seq >= next_fresh_) return std::nullopt;
  if (state == State::kAssigned) {
    auto it = split_of_.find(*seq);
    if (it != split_of_.end()) {
      auto sit = open_.find(it->second);
      split_of_.erase(it);
      if (sit != open_.end()) {
        Consumer& by = consumers_[sit->second.consumer];
        if (to == State::kDelivered && !by.delivering && by.config.active) {
          by.delivering = true;
          // Its first sample since it became active: from now on a consumer held to its
          // share (another one) is held against it. What that one took while waiting for
          // this one is forgotten, as SetShares forgets the past; else it would be held
          // back until the others caught up with what it did in their place.
          if (by.config.share > 0 && by.config.spill_over && AnyHeldLocked()) {
            for (Consumer& each : consumers_) each.assigned_base = each.assigned;
            total_assigned_base_ = total_assigned_;
            wake = true;
          }
        }
        if (--sit->second.unresolved == 0) {
          --by.open;
          open_.erase(sit);
          wake = true;
        }
      }
    }
  }
  state = to;
  if (reserved) {
    ++resumed_;
  } else if (to == State::kDelivered) {
    ++delivered_;
  } else {
    ++skipped_;
  }
  const uint32_t epoch = EpochOfSeq(*seq);
  EpochState& e = epochs_.at(epoch);
  if (++e.resolved == e.share.ids.size()) {
    epochs_.erase(epoch);
    ++epochs_completed_;
    wake = true;
  }
  // Advance the oldest unresolved sample (finished epochs are skipped whole).
  const uint64_t oldest_before = oldest_unresolved_;
  while (oldest_unresolved_ < next_fresh_) {
    const uint32_t oe = EpochOfSeq(oldest_unresolved_);
    auto it = epochs_.find(oe);
    if (it == epochs_.end()) {
      oldest_unresolved_ = FirstSeqOf(oe + 1);
      continue;
    }
    const State s = it->second.state[oldest_unresolved_ - FirstSeqOf(oe)];
    if (s != State::kDelivered && s != State::kSkipped) break;
    ++oldest_unresolved_;
  }
  if (options_.window > 0 && oldest_unresolved_ != oldest_before) wake = true;
  if (wake) cv_.notify_all();
  return seq;
}

std::optional<uint64_t> Coordinator::MarkDelivered(SampleId id) {
  std::lock_guard<std::mutex> lock(mu_);
  return ResolveLocked(id, State::kDelivered);
}

std::optional<uint64_t> Coordinator::MarkSkipped(SampleId id) {
  std::lock_guard<std::mutex> lock(mu_);
  return ResolveLocked(id, State::kSkipped);
}

int64_t Coordinator::RequeueLocked(OpenSplit& split) {
  std::vector<uint64_t> back;
  for (uint64_t seq : split.seqs) {
    State& s = StateLocked(seq);
    if (s != State::kAssigned) continue;
    s = State::kPending;
    split_of_.erase(seq);
    back.push_back(seq);
  }
  const int64_t n = static_cast<int64_t>(back.size());
  Consumer& c = consumers_[split.consumer];
  c.assigned -= n;
  total_assigned_ -= n;
  requeued_samples_ += n;
  if (!back.empty()) requeued_.push_front(std::move(back));
  return n;
}

int64_t Coordinator::ConsumerFailed(int consumer) {
  std::lock_guard<std::mutex> lock(mu_);
  consumers_[consumer].config.active = false;
  consumers_[consumer].delivering = false;
  // Newest first, so that after the push_fronts the oldest split is at the very front.
  std::vector<uint64_t> ids;
  for (const auto& [id, split] : open_) {
    if (split.consumer == consumer) ids.push_back(id);
  }
  int64_t total = 0;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    total += RequeueLocked(open_.at(*it));
    open_.erase(*it);
  }
  consumers_[consumer].open = 0;
  cv_.notify_all();
  return total;
}

int64_t Coordinator::ReleaseSplit(uint64_t split_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(split_id);
  if (it == open_.end()) return 0;
  const int64_t n = RequeueLocked(it->second);
  --consumers_[it->second.consumer].open;
  open_.erase(it);
  cv_.notify_all();
  return n;
}

int64_t Coordinator::HeldSamples(int consumer) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t held = 0;
  for (const auto& [id, split] : open_) {
    if (split.consumer == consumer) held += static_cast<int64_t>(split.unresolved);
  }
  return held;
}

void Coordinator::SetActive(int consumer, bool active) {
  std::lock_guard<std::mutex> lock(mu_);
  Consumer& c = consumers_[consumer];
  if (active != c.config.active) c.delivering = false;
  c.config.active = active;
  cv_.notify_all();
}

void Coordinator::SetSpillOver(int consumer, bool spill_over) {
  std::lock_guard<std::mutex> lock(mu_);
  consumers_[consumer].config.spill_over = spill_over;
  cv_.notify_all();  // a consumer held to its share may now take a split
}

void Coordinator::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

bool Coordinator::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return DoneLocked();
}

bool Coordinator::WaitDone() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return cancelled_ || DoneLocked(); });
  return DoneLocked();
}

CoordinatorStats Coordinator::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CoordinatorStats s;
  for (const Consumer& c : consumers_) {
    ConsumerStats cs;
    cs.name = c.config.name;
    cs.share = c.config.share;
    cs.assigned = c.assigned;
    cs.splits = c.splits;
    cs.open_splits = c.open;
    cs.active = c.config.active;
    s.consumers.push_back(std::move(cs));
  }
  s.delivered = delivered_;
  s.skipped = skipped_;
  s.duplicates = duplicates_;
  s.requeued_samples = requeued_samples_;
  s.epochs_completed = epochs_completed_;
  s.resumed = resumed_;
  s.done = DoneLocked();
  return s;
}

}  // namespace sluice::runtime
