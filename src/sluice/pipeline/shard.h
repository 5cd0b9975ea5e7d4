// Sharding by rank (docs/distributed.md): the part of an epoch that one of `world_size`
// data-parallel trainers (ranks) visits.
//
// Every rank draws the same permutation of the epoch (EpochOrder in source.h). The samples
// to divide are that permutation less the samples consumed before the division (a resume;
// SourceProgress::divided), kept in permutation order: m samples. Rank r takes positions
// r, r + W, r + 2W, ... of that list (strided, as torch's DistributedSampler does), so
// ranks that advance together consume a prefix of the permutation between them. Every rank
// gets the same count:
//   EvenRule::kDrop  floor(m / W): the last m mod W samples of the list go to no rank;
//   EvenRule::kPad   ceil(m / W): the list is extended, cyclically from its start, to a
//                    multiple of W. The k-th added sample has the SampleId index n + k (n:
//                    samples per epoch), so it is told apart from the real ones, is never
//                    counted as consumed and draws its own augmentations; it reads the file
//                    of list[k mod m]. A rank gets at most one padded sample per epoch.
// With W = 1 the share is the whole list, unchanged.
//
// Plain functions and value types; thread-safe.
#ifndef SLUICE_PIPELINE_SHARD_H_
#define SLUICE_PIPELINE_SHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/pipeline/spec.h"

namespace sluice::pipeline {

// Which rank of how many this process is.
struct Shard {
  int64_t rank = 0;
  int64_t world_size = 1;

  bool sharded() const { return world_size > 1; }
};

// InvalidArgument for world_size < 1 or a rank outside [0, world_size).
Status CheckShard(const Shard& shard);
// CheckShard, and with even: drop, more ranks than samples per epoch (every rank would get
// none).
Status CheckShard(const Shard& shard, EvenRule even, uint64_t samples_per_epoch);

// A rank's count when `divided` samples are divided among shard.world_size ranks.
uint64_t SamplesPerRank(uint64_t divided, const Shard& shard, EvenRule even);

// One rank's part of one epoch.
struct EpochShare {
  uint64_t samples_per_epoch = 0;   // n
  std::vector<uint64_t> ids;        // SampleId indices, in visiting order (n + k: padded)
  std::vector<uint64_t> pad_files;  // the file index of padded sample n + k: pad_files[k]
  uint64_t divided = 0;             // m: samples divided among the ranks
  uint64_t dropped = 0;             // even: drop: samples of the list no rank gets
  uint64_t padded = 0;              // even: pad: padded samples over all ranks

  // The file a sample of this share reads. REQUIRES: id is one of `ids`.
  uint64_t FileOf(uint64_t id) const {
    return id < samples_per_epoch ? id : pad_files[id - samples_per_epoch];
  }
};

// The share of `shard` in an epoch whose permutation is `order` (a permutation of
// [0, n)); `consumed_before` (may be null) marks the samples left out of the division.
EpochShare ShareOf(std::vector<uint64_t> order, const std::vector<bool>* consumed_before,
                   const Shard& shard, EvenRule even);

// "rank 1 of 4: 250 samples per epoch (even: drop leaves out 2 samples of every epoch)".
std::string DescribeShard(const Shard& shard, EvenRule even, uint64_t samples_per_epoch);

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_SHARD_H_
