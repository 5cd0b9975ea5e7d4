// Coordinator: hands out each epoch's samples in splits to the consumers of a Loader (the
// local prefix and one remote stream per worker) and keeps exactly-once accounting
// (docs/offload.md, "Splits, ratio, spill-over" and "Exactly once").
//
// Every epoch's visiting order is the source's: pipeline::EpochShareOf, the epoch's
// permutation, or in a run sharded by rank this rank's share of it (pipeline/shard.h; the
// coordinator never sees the other ranks' samples). Every sample has a *sequence number*: the
// samples of the epochs before its own plus its position in its epoch's order. Fresh splits
// are consecutive runs of `split_size` sequence numbers that never cross an epoch boundary.
// Consumers pull splits. A consumer gets one when it is *eligible* (after taking it, its
// samples would still be below its target share of all samples handed out so far), or when
// no other consumer is *waiting* for work: active, eligible, with a positive share, room
// for another open split and spill-over of its own (spill-over: an idle consumer never waits
// for a busy one, nor for one held to its share). Each
// consumer holds at most `max_open_splits` splits that are not finished.
//
// A split is finished when each of its samples was delivered (MarkDelivered) or skipped
// (MarkSkipped), by whichever consumer. ConsumerFailed() takes a consumer out of service and
// puts the unresolved samples of its open splits back at the front of the queue (one split
// for each); they are handed out again before any fresh split. An epoch ends when each of
// its samples was delivered or skipped; the run ends when the last epoch ends (never with
// epochs = -1).
//
// Resume (CoordinatorOptions::resume, docs/checkpoint.md): the run starts at
// resume->first_epoch, and the samples the progress marks consumed are never handed out.
// They are *reserved*: each must be resolved once with MarkSkipped() before the run can end
// (the Loader does that through the merge, so that an in-order merge counts them as
// released). Sequence numbers then count from the first resumed epoch: the first sample of
// epoch first_epoch has sequence number 0. An epoch that the progress divided afresh
// (SourceProgress::divided) holds only the share of what remained, so it can be shorter than
// the others, or empty.
//
// With `window` > 0 a fresh split is handed out only while its first sequence number is
// less than `window` past the oldest unresolved sample, which bounds what an in-order merge
// has to hold back.
//
// Thread-safe: every method may be called from any thread. Acquire() blocks; Cancel() wakes
// every blocked call.
#ifndef SLUICE_RUNTIME_COORDINATOR_H_
#define SLUICE_RUNTIME_COORDINATOR_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/source.h"

namespace sluice::runtime {

struct CoordinatorOptions {
  uint64_t samples_per_epoch = 0;
  bool shuffle = false;  // per-epoch permutation seeded by (seed, epoch), as the source does
  uint64_t seed = 0;
  int64_t epochs = 1;        // >= 1, or -1 for forever
  uint64_t split_size = 32;  // >= 1
  uint64_t window = 0;       // 0: unbounded (see above)
  // Samples a previous run already delivered (may be null; see above). `epochs` still
  // counts from epoch 0.
  std::shared_ptr<const pipeline::SourceProgress> resume;
  // false: no spill-over (FastFlow's counters): a consumer behind its share is waited for
  // even when it has no room, and one ahead of its share gets a split only when no other
  // active consumer is behind (so a failed consumer's share does not stall the others).
  bool spill_over = true;
  // Hand out only this rank's share of every epoch.
  pipeline::Shard shard;
  pipeline::EvenRule even = pipeline::EvenRule::kDrop;
  // The first sample index of each group (a tar shard; pipeline::ShardGroups). With
  // `shuffle_groups`, a shuffle permutes whole groups, as the source does for `shuffle:
  // shards`. With `split_groups`, a fresh split ends where a group starts, so that a split
  // is a shard or a range of one (sequential reads in one file); splits may then be shorter
  // than `split_size`.
  std::vector<uint64_t> shuffle_groups;
  std::vector<uint64_t> split_groups;
};

struct ConsumerConfig {
  std::string name;         // "local", "worker 10.0.0.2:7000": for reports
  double share = 0;         // target fraction of the samples, >= 0; shares are normalised
  int max_open_splits = 2;  // >= 1
  bool active = true;       // an inactive consumer gets nothing and is not waited for
  // false: this consumer never spills over: beyond its share it gets a split only when no
  // other active consumer with a positive share is delivering (every worker down, say, or
  // none has delivered a sample since it became active: a worker still starting displaces
  // no receive). The others still spill over to it, and its share never keeps them waiting:
  // it is a cap on what this consumer takes, not a claim. For a trainer whose CPU is the limit,
  // where each local sample costs more than the receive it would displace (docs/policy.md,
  // "Spill-over").
  bool spill_over = true;
};

struct SplitAssignment {
  uint64_t split_id = 0;
  uint32_t epoch = 0;
  std::vector<SampleId> samples;  // in epoch order
  std::vector<uint64_t> seqs;     // their sequence numbers
  std::vector<uint64_t> files;    // the file each reads (a padded sample repeats another's)
};

struct ConsumerStats {
  std::string name;
  double share = 0;      // normalised
  int64_t assigned = 0;  // samples handed out and not taken back by ConsumerFailed
  int64_t splits = 0;    // splits handed out
  int open_splits = 0;
  bool active = true;
};

struct CoordinatorStats {
  std::vector<ConsumerStats> consumers;
  int64_t delivered = 0;
  int64_t skipped = 0;
  int64_t duplicates = 0;        // MarkDelivered/MarkSkipped calls for resolved samples
  int64_t requeued_samples = 0;  // put back by ConsumerFailed or ReleaseSplit
  int64_t epochs_completed = 0;  // since the start (or the resumed epoch)
  int64_t resumed = 0;           // reserved samples resolved (consumed before a resume)
  bool done = false;
};

class Coordinator {
 public:
  enum class Acquired { kSplit, kWait, kInactive, kDone, kCancelled };

  // InvalidArgument for split_size 0, epochs 0 or < -1, no consumers, a negative share, all
  // shares zero, max_open_splits < 1, or a shard pipeline::CheckShard refuses.
  static StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options,
                                                       std::vector<ConsumerConfig> consumers);

  // Blocks until `consumer` may take a split (kSplit, filled into *out), the consumer is or
  // becomes inactive (kInactive), the run is over (kDone), or Cancel() (kCancelled).
  Acquired Acquire(int consumer, SplitAssignment* out);
  // The same without blocking: kWait where Acquire would block.
  Acquired TryAcquire(int consumer, SplitAssignment* out);

  // Records that `id` reached the merge. Returns its sequence number the first time; nullopt
  // for a sample already delivered or skipped (a late duplicate) or one never handed out.
  std::optional<uint64_t> MarkDelivered(SampleId id);
  // Records that `id` was dropped (on_error: skip), or resolves a sample reserved by the
  // resume progress. Same return as MarkDelivered.
  std::optional<uint64_t> MarkSkipped(SampleId id);

  // Takes `consumer` out of service (inactive) and re-queues the unresolved samples of its
  // open splits at the front, taking them off its assigned count. Returns how many samples.
  int64_t ConsumerFailed(int consumer);
  // Puts `consumer` back in service (after a reconnect).
  void SetActive(int consumer, bool active);
  // ConsumerConfig::spill_over for `consumer` from now on.
  void SetSpillOver(int consumer, bool spill_over);
  // New target shares, one per consumer (>= 0, not all zero; normalised here). The shares
  // are then enforced on the samples handed out from now on (past imbalance is forgotten).
  // InvalidArgument for a wrong count or bad values.
  Status SetShares(const std::vector<double>& shares);
  // The consumer says it will deliver nothing more of `split_id` (a worker's SplitDone):
  // samples of the split still unresolved are re-queued. Returns how many (normally 0).
  int64_t ReleaseSplit(uint64_t split_id);

  // Unresolved samples of the open splits `consumer` holds: what it still owes.
  int64_t HeldSamples(int consumer) const;

  // The sequence number of `id`, if its epoch is still being tracked (not finished).
  std::optional<uint64_t> SeqOf(SampleId id) const;
  // The samples reserved by the resume progress (consumed before), in epoch order; each
  // still needs its MarkSkipped().
  std::vector<SampleId> ReservedSamples() const;

  void Cancel();
  bool done() const;
  // Blocks until done() or Cancel(); returns done().
  bool WaitDone() const;

  CoordinatorStats Stats() const;
  const CoordinatorOptions& options() const { return options_; }
  int num_consumers() const { return static_cast<int>(consumers_.size()); }

 private:
  // kReserved: consumed before a resume; never handed out, resolved by MarkSkipped.
  enum class State : uint8_t { kPending, kAssigned, kDelivered, kSkipped, kReserved };
  struct EpochState {
    pipeline::EpochShare share;     // share.ids: position -> sample index
    std::vector<uint64_t> inverse;  // sample index -> position (kNoPosition: not in the share)
    std::vector<State> state;       // by position
    uint64_t resolved = 0;
  };
  static constexpr uint64_t kNoPosition = ~uint64_t{0};
  struct Consumer {
    ConsumerConfig config;
    int64_t assigned = 0;
    int64_t assigned_base = 0;  // `assigned` when the shares last changed
    int64_t splits = 0;
    int open = 0;
    // Has delivered a sample since it became active (at creation, SetActive, a failure).
    bool delivering = false;
  };
  struct OpenSplit {
    int consumer = 0;
    std::vector<uint64_t> seqs;
    size_t unresolved = 0;
  };

  Coordinator(CoordinatorOptions options, std::vector<ConsumerConfig> consumers);

  Acquired AcquireLocked(int consumer, SplitAssignment* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EligibleLocked(int consumer, uint64_t size) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool OtherWaitingLocked(int consumer, uint64_t size) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if another active consumer with a positive share is below its share (room or not).
  bool OtherBehindLocked(int consumer, uint64_t size) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if a consumer other than `consumer` is active with a positive share (and, with
  // `delivering`, has delivered since it became active: Consumer::delivering).
  bool OtherActiveWithShareLocked(int consumer, bool delivering = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if a consumer does not spill over (ConsumerConfig::spill_over false).
  bool AnyHeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next split's sequence numbers (front of the re-queue, else a fresh run), without
  // taking it; empty if none may be handed out now. Drops re-queued samples resolved since.
  std::vector<uint64_t> PeekLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  EpochState* EpochLocked(uint32_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<uint64_t> SeqLocked(SampleId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the sample at `position` of `e`'s share starts a split group.
  bool StartsGroupLocked(const EpochState& e, uint64_t position) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<uint64_t> ResolveLocked(SampleId id, State to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  State& StateLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t RequeueLocked(OpenSplit& split) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t TotalSeqs() const;  // UINT64_MAX when endless
  // The sequence layout: epochs [base_epoch_, base_epoch_ + head_.size() - 1) have the
  // lengths their first sequence numbers in head_ say (those the resume divided afresh, and
  // any before them); every later epoch has per_epoch_ samples.
  uint32_t EpochOfSeq(uint64_t seq) const;
  uint64_t FirstSeqOf(uint32_t epoch) const;
  uint64_t LengthOf(uint32_t epoch) const { return FirstSeqOf(epoch + 1) - FirstSeqOf(epoch); }

  const CoordinatorOptions options_;
  const uint32_t base_epoch_;  // the first epoch of this run (resume->first_epoch, or 0)
  // Set by the constructor, constant afterwards.
  uint64_t per_epoch_ = 0;  // samples of this rank's share of a whole epoch
  std::vector<bool> group_start_;  // by sample index: a split_groups start (empty: none)
  std::vector<uint64_t> head_{0};

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<Consumer> consumers_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, EpochState> epochs_ ABSL_GUARDED_BY(mu_);  // started, not finished
  uint32_t epochs_started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t epochs_completed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_fresh_ ABSL_GUARDED_BY(mu_) = 0;  // first sequence number never handed out
  uint64_t fresh_end_ ABSL_GUARDED_BY(mu_) = 0;   // where the run PeekLocked found ends
  uint64_t oldest_unresolved_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::vector<uint64_t>> requeued_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, OpenSplit> open_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, uint64_t> split_of_ ABSL_GUARDED_BY(mu_);  // seq -> open split
  uint64_t next_split_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t total_assigned_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t total_assigned_base_ ABSL_GUARDED_BY(mu_) = 0;  // when the shares last changed
  int64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t requeued_samples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t resumed_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SampleId> reserved_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_COORDINATOR_H_
