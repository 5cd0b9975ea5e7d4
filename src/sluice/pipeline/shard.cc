#include "sluice/pipeline/shard.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::pipeline {

Status CheckShard(const Shard& shard) {
  if (shard.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size: must be at least 1, got ", shard.world_size));
  }
  if (shard.rank < 0 || shard.rank >= shard.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank: must be in [0, ", shard.world_size - 1,
                                                   "] for world_size ", shard.world_size, ", got ",
                                                   shard.rank));
  }
  return absl::OkStatus();
}

Status CheckShard(const Shard& shard, EvenRule even, uint64_t samples_per_epoch) {
  SLUICE_RETURN_IF_ERROR(CheckShard(shard));
  if (even == EvenRule::kDrop && samples_per_epoch > 0 &&
      samples_per_epoch < static_cast<uint64_t>(shard.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world_size ", shard.world_size, " is larger than the ", samples_per_epoch,
        " samples of an epoch: with even: drop every rank would get none (use even: pad)"));
  }
  return absl::OkStatus();
}

uint64_t SamplesPerRank(uint64_t divided, const Shard& shard, EvenRule even) {
  const uint64_t w = static_cast<uint64_t>(shard.world_size);
  return even == EvenRule::kDrop ? divided / w : (divided + w - 1) / w;
}

EpochShare ShareOf(std::vector<uint64_t> order, const std::vector<bool>* consumed_before,
                   const Shard& shard, EvenRule even) {
  EpochShare share;
  share.samples_per_epoch = order.size();
  if (consumed_before != nullptr) {
    std::erase_if(order,
                  [&](uint64_t i) { return i < consumed_before->size() && (*consumed_before)[i]; });
  }
  const uint64_t m = order.size();
  share.divided = m;
  if (!shard.sharded()) {
    share.ids = std::move(order);
    return share;
  }
  const uint64_t w = static_cast<uint64_t>(shard.world_size);
  const uint64_t r = static_cast<uint64_t>(shard.rank);
  const uint64_t count = SamplesPerRank(m, shard, even);
  share.ids.reserve(count);
  if (even == EvenRule::kDrop) {
    share.dropped = m - count * w;
  } else {
    share.padded = count * w - m;
    for (uint64_t k = 0; k < share.padded; ++k) share.pad_files.push_back(order[k % m]);
  }
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t position = r + w * j;
    share.ids.push_back(position < m ? order[position] : share.samples_per_epoch + (position - m));
  }
  return share;
}

std::string DescribeShard(const Shard& shard, EvenRule even, uint64_t samples_per_epoch) {
  const uint64_t w = static_cast<uint64_t>(shard.world_size);
  const uint64_t count = SamplesPerRank(samples_per_epoch, shard, even);
  std::string out = absl::StrCat("rank ", shard.rank, " of ", shard.world_size, ": ", count,
                                 " samples per epoch");
  if (even == EvenRule::kDrop) {
    const uint64_t dropped = samples_per_epoch - count * w;
    absl::StrAppend(&out, " (even: drop leaves out ", dropped, " of the ", samples_per_epoch,
                    " samples of every epoch, on every rank the same)");
  } else {
    const uint64_t padded = count * w - samples_per_epoch;
    absl::StrAppend(&out, " (even: pad repeats ", padded, " of the ", samples_per_epoch,
                    " samples in every epoch, at most one per rank, marked by a sample index >= ",
                    samples_per_epoch, ")");
  }
  return out;
}

}  // namespace sluice::pipeline
