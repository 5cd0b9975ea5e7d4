// Shared slots: a worker on the trainer's machine writes each sample's largest tensor
// straight into a slot of a batch buffer the trainer's batcher will view, so a received
// sample costs neither side a copy (docs/offload.md, "Shared slots").
//
// Where the shared-memory ring is used (the worker in the trainer's network namespace) and
// the cut is the pipeline's end (the trainer only batches), the trainer makes a second sealed
// memfd beside the ring: `regions` regions of `slots` x `slot_bytes`, each one batch's worth
// of the key field (the largest tensor of a sample, whose shape is fully known), and hands it
// over with the ring in its hello. The worker's last op takes its output for that field from
// a region (core/batch_slots.h, a BatchSlots whose buffers come from the arena), and a chunk's
// header names the slot's offset in the arena in place of payload bytes (rpc/wire.h). The
// trainer turns each named slot into a view of its region's buffer; once a region's every
// slot was named and the last view of it (the batch, or the samples the batcher copied) is
// gone, the region is the worker's again.
//
// Who may write a region is said by a flag per region in the arena's first page: 0, the
// worker may take it; 1, the worker took it. The worker sets 1 when it takes a region; the
// trainer sets 0 when it gives a region back. The trainer keeps its own state of every region
// and checks each named slot against it (in range, on a slot's boundary, of the slot's size,
// in a region not given back to the trainer, named once), so a worker that names slots wrongly
// gets its chunk refused (DataLoss), never a view outside a region or of another round. What
// the worker writes into its own slots is its data, as the ring's bytes are.
//
// A region with a slot taken but never named (its sample failed after its last op took the
// slot, its split was dropped) is never given back during the session: the worker then takes
// the next, and with none free it writes samples into buffers of its own, which go as bytes
// on the ring as before. So the arena only ever saves copies; it never holds up a sample.
#ifndef SLUICE_RPC_SLOT_ARENA_H_
#define SLUICE_RPC_SLOT_ARENA_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/core/tensor.h"

namespace sluice::rpc {

// Regions an arena has: one the worker fills, up to two of its buffers the order-free batcher
// may hold while it waits for their last samples (pipeline/batch.h), the batch the loader's
// prefetch holds and the one the consumer holds. With fewer free the worker writes into
// buffers of its own (a copy each side, as without the arena), never waits.
inline constexpr uint32_t kSlotArenaRegions = 5;
// What a worker maps at most: a trainer's hello cannot make it map more.
inline constexpr uint32_t kSlotArenaMaxRegions = 64;
inline constexpr uint64_t kSlotArenaMaxBytes = uint64_t{4} << 30;

// The arena's layout, the same on both sides: a header of one 64-byte line per region (its
// flag), rounded up to a page, then the regions, each starting on a page.
struct SlotArenaLayout {
  uint32_t regions = 0;
  uint32_t slots = 0;       // per region: the batch size
  uint64_t slot_bytes = 0;  // one sample's tensor of the key field

  uint64_t header_bytes() const;
  uint64_t region_bytes() const { return slot_bytes * slots; }
  uint64_t region_stride() const;  // region_bytes rounded up to a page
  uint64_t region_offset(uint32_t r) const { return header_bytes() + r * region_stride(); }
  uint64_t total_bytes() const { return header_bytes() + regions * region_stride(); }
  // InvalidArgument naming what is out of bounds: 1-kSlotArenaMaxRegions regions, a slot of
  // at least 64 bytes and a multiple of 64 (the wire's alignment), at most kSlotArenaMaxBytes.
  Status Check() const;
};

// The trainer's side: makes the arena and turns the slots the worker names into views.
class SlotArena {
 public:
  static StatusOr<std::shared_ptr<SlotArena>> Create(const SlotArenaLayout& layout);
  ~SlotArena();
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  const SlotArenaLayout& layout() const { return layout_; }
  // The memfd (sealed), to hand to the worker; -1 after CloseFd.
  int fd() const { return fd_; }
  void CloseFd();

  // The slot at `offset` (from the arena's start) that the worker named for a tensor of
  // `dtype` and `shape`: a view of it in its region's buffer of this round. DataLoss, naming
  // the offset, for a slot out of range, off a slot's boundary, of another size, named twice
  // in a round, or in a region given back to the trainer and not yet returned.
  StatusOr<Tensor> Claim(uint64_t offset, DType dtype, const Shape& shape);
  // The session ended: regions being filled are held only by their views from now on, and
  // none is given back to the worker again (it is gone, or no longer ours to trust).
  void Close();

  // Regions given back to the worker so far, and slots claimed (for tests and reports).
  int64_t regions_returned() const { return returned_.load(); }
  int64_t slots_claimed() const { return claimed_.load(); }

 private:
  struct Mapping;
  enum class State { kWorker, kFilling, kReturning };
  struct Region {
    State state = State::kWorker;
    std::shared_ptr<Buffer> buffer;  // kFilling: this round's buffer
    std::vector<bool> named;         // kFilling: slots named this round
    uint32_t count = 0;
  };
  SlotArena(const SlotArenaLayout& layout, int fd, std::shared_ptr<Mapping> mapping);
  // The last view of region `r`'s round went: gives it back to the worker (unless closed).
  void GiveBack(uint32_t r);

  const SlotArenaLayout layout_;
  int fd_ = -1;
  const pid_t owner_pid_;  // the process that made it: only it gives regions back
  std::shared_ptr<Mapping> mapping_;
  std::weak_ptr<SlotArena> self_;
  std::mutex mu_;
  std::vector<Region> regions_;
  bool closed_ = false;
  std::atomic<int64_t> returned_{0};
  std::atomic<int64_t> claimed_{0};
};

// The worker's side: the arena mapped from a trainer's hello.
class SlotArenaWriter {
 public:
  // Maps `fd` (not taken: the caller closes it) when it is a memfd of exactly
  // layout.total_bytes() sealed against shrinking, and `layout` passes Check; else
  // InvalidArgument saying why.
  static StatusOr<std::shared_ptr<SlotArenaWriter>> Map(int fd, const SlotArenaLayout& layout);
  ~SlotArenaWriter();
  SlotArenaWriter(const SlotArenaWriter&) = delete;
  SlotArenaWriter& operator=(const SlotArenaWriter&) = delete;

  const SlotArenaLayout& layout() const { return layout_; }
  // A region the trainer gave back, now the worker's: a buffer of its slots, which keeps the
  // mapping alive. nullptr when none is free.
  std::shared_ptr<Buffer> TakeRegion();
  // Where `t`'s bytes lie in the arena, when they are a whole slot of a region; else nullopt.
  std::optional<uint64_t> OffsetOf(const Tensor& t) const;

 private:
  SlotArenaWriter(const SlotArenaLayout& layout, uint8_t* base) : layout_(layout), base_(base) {}
  const SlotArenaLayout layout_;
  uint8_t* const base_;
  std::weak_ptr<SlotArenaWriter> self_;
  std::mutex mu_;  // TakeRegion's scan
  uint32_t next_ = 0;
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_SLOT_ARENA_H_
