#include "sluice/rpc/slot_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::rpc {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kFlagLine = 64;  // one cache line per region's flag: no false sharing
constexpr uint32_t kFree = 0;       // the worker may take the region
constexpr uint32_t kTaken = 1;      // the worker took it

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

std::atomic_ref<uint32_t> Flag(uint8_t* base, uint32_t r) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base + r * kFlagLine));
}

std::string ErrnoText(int err) {
  char buf[128];
  return std::string(strerror_r(err, buf, sizeof buf));
}

}  // namespace

uint64_t SlotArenaLayout::header_bytes() const { return RoundUp(regions * kFlagLine, kPage); }
uint64_t SlotArenaLayout::region_stride() const { return RoundUp(region_bytes(), kPage); }

Status SlotArenaLayout::Check() const {
  if (regions < 1 || regions > kSlotArenaMaxRegions) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared slots: ", regions, " regions (1-", kSlotArenaMaxRegions, ")"));
  }
  if (slots < 1 || slot_bytes < 64 || slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared slots: ", slots, " slots of ", slot_bytes, " bytes (a slot is a multiple of 64)"));
  }
  // Each factor is bounded before the product, so nothing overflows.
  if (slot_bytes > kSlotArenaMaxBytes || slots > kSlotArenaMaxBytes / slot_bytes ||
      total_bytes() > kSlotArenaMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared slots: ", regions, " regions of ", slots, " x ", slot_bytes,
        " bytes are over the ", kSlotArenaMaxBytes, "-byte limit"));
  }
  return absl::OkStatus();
}

// The arena's memory: unmapped when the arena and every view of it are gone.
struct SlotArena::Mapping {
  uint8_t* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base != nullptr) munmap(base, size);
  }
};

StatusOr<std::shared_ptr<SlotArena>> SlotArena::Create(const SlotArenaLayout& layout) {
  SLUICE_RETURN_IF_ERROR(layout.Check());
  const auto fail = [](const char* what, int err) {
    return absl::UnavailableError(absl::StrCat("shared slots: ", what, ": ", ErrnoText(err)));
  };
  const int fd = memfd_create("sluice-slots", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail("memfd_create", errno);
  auto mapping = std::make_shared<Mapping>();
  mapping->size = layout.total_bytes();
  if (ftruncate(fd, static_cast<off_t>(mapping->size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(fd);
    return fail("size and seals", err);
  }
  void* m = mmap(nullptr, mapping->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return fail("mmap", err);
  }
  mapping->base = static_cast<uint8_t*>(m);  // a new memfd reads as zeros: every flag kFree
  std::shared_ptr<SlotArena> arena(new SlotArena(layout, fd, std::move(mapping)));
  arena->self_ = arena;
  return arena;
}

SlotArena::SlotArena(const SlotArenaLayout& layout, int fd, std::shared_ptr<Mapping> mapping)
    : layout_(layout),
      fd_(fd),
      owner_pid_(getpid()),
      mapping_(std::move(mapping)),
      regions_(layout.regions) {}

SlotArena::~SlotArena() { CloseFd(); }

void SlotArena::CloseFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

StatusOr<Tensor> SlotArena::Claim(uint64_t offset, DType dtype, const Shape& shape) {
  const auto refuse = [offset](const std::string& why) {
    return absl::DataLossError(absl::StrCat("shared slot at byte ", offset, ": ", why));
  };
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d != 0 && __builtin_mul_overflow(elements, d, &elements))) {
      return refuse("its shape does not fit a slot");
    }
  }
  // The count is bounded first, so the product cannot wrap.
  if (static_cast<uint64_t>(elements) > layout_.slot_bytes ||
      static_cast<uint64_t>(elements) * DTypeSize(dtype) != layout_.slot_bytes) {
    return refuse(absl::StrCat("a tensor of ", DTypeName(dtype), ShapeToString(shape),
                               " is not a slot's ", layout_.slot_bytes, " bytes"));
  }
  if (offset < layout_.header_bytes() || offset >= layout_.total_bytes()) {
    return refuse(absl::StrCat("outside the regions of the ", layout_.total_bytes(),
                               "-byte arena"));
  }
  const uint64_t from_first = offset - layout_.header_bytes();
  const uint32_t r = static_cast<uint32_t>(from_first / layout_.region_stride());
  const uint64_t in_region = from_first % layout_.region_stride();
  if (in_region % layout_.slot_bytes != 0 || in_region / layout_.slot_bytes >= layout_.slots) {
    return refuse("not on a slot of its region");
  }
  const uint32_t s = static_cast<uint32_t>(in_region / layout_.slot_bytes);
  std::shared_ptr<Buffer> buffer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return refuse("the session's slots are closed");
    Region& region = regions_[r];
    if (region.state == State::kReturning) {
      return refuse(absl::StrCat("region ", r, " is not the worker's (its round was full)"));
    }
    if (region.state == State::kWorker) {
      // A new round: its buffer gives the region back when the last view of it goes.
      std::weak_ptr<SlotArena> self = self_;
      std::shared_ptr<Mapping> keep = mapping_;
      region.buffer = Buffer::Wrap(mapping_->base + layout_.region_offset(r),
                                   layout_.region_bytes(), [self, keep, r] {
                                     if (auto arena = self.lock()) arena->GiveBack(r);
                                   });
      region.named.assign(layout_.slots, false);
      region.count = 0;
      region.state = State::kFilling;
    }
    if (region.named[s]) return refuse(absl::StrCat("slot ", s, " of region ", r, " named twice"));
    region.named[s] = true;
    buffer = region.buffer;
    if (++region.count == layout_.slots) {
      // Every slot named: the views hold the round from now on.
      region.state = State::kReturning;
      region.buffer.reset();
    }
  }
  claimed_.fetch_add(1, std::memory_order_relaxed);
  return Tensor::View(dtype, shape, std::move(buffer), s * layout_.slot_bytes);
}

void SlotArena::GiveBack(uint32_t r) {
  // A forked child that drops views it inherited must not hand the parent's regions back: the
  // parent may still be reading them.
  if (getpid() != owner_pid_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || regions_[r].state != State::kReturning) return;
  regions_[r].state = State::kWorker;
  regions_[r].named.clear();
  // The views are gone, so are the trainer's reads of the region: the worker's next writes
  // come after them.
  Flag(mapping_->base, r).store(kFree, std::memory_order_release);
  returned_.fetch_add(1, std::memory_order_relaxed);
}

void SlotArena::Close() {
  std::vector<std::shared_ptr<Buffer>> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (Region& region : regions_) {
      if (region.buffer != nullptr) held.push_back(std::move(region.buffer));
    }
  }
  // Released outside the lock: a buffer no view holds runs GiveBack, which takes it.
}

StatusOr<std::shared_ptr<SlotArenaWriter>> SlotArenaWriter::Map(int fd,
                                                                const SlotArenaLayout& layout) {
  SLUICE_RETURN_IF_ERROR(layout.Check());
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != layout.total_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared slots: not a sealed memfd of the ", layout.total_bytes(), " bytes announced"));
  }
  void* m = mmap(nullptr, layout.total_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    return absl::InvalidArgumentError(absl::StrCat("shared slots: mmap: ", ErrnoText(errno)));
  }
  std::shared_ptr<SlotArenaWriter> w(new SlotArenaWriter(layout, static_cast<uint8_t*>(m)));
  w->self_ = w;
  return w;
}

SlotArenaWriter::~SlotArenaWriter() { munmap(base_, layout_.total_bytes()); }

std::shared_ptr<Buffer> SlotArenaWriter::TakeRegion() {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t i = 0; i < layout_.regions; ++i) {
    const uint32_t r = (next_ + i) % layout_.regions;
    uint32_t expected = kFree;
    // Acquire: the trainer's reads of the region's last round come before our writes.
    if (!Flag(base_, r).compare_exchange_strong(expected, kTaken, std::memory_order_acquire)) {
      continue;
    }
    next_ = (r + 1) % layout_.regions;
    std::shared_ptr<SlotArenaWriter> keep = self_.lock();
    return Buffer::Wrap(base_ + layout_.region_offset(r), layout_.region_bytes(), [keep] {});
  }
  return nullptr;
}

std::optional<uint64_t> SlotArenaWriter::OffsetOf(const Tensor& t) const {
  if (t.buffer() == nullptr || t.nbytes() != layout_.slot_bytes) return std::nullopt;
  const uint8_t* p = t.raw();
  if (p < base_ + layout_.header_bytes() || p >= base_ + layout_.total_bytes()) return std::nullopt;
  const uint64_t offset = static_cast<uint64_t>(p - base_);
  // Only a whole slot is named (anything else would be refused by the trainer): a tensor
  // elsewhere in the arena goes as bytes.
  const uint64_t in_region = (offset - layout_.header_bytes()) % layout_.region_stride();
  if (in_region % layout_.slot_bytes != 0 || in_region >= layout_.region_bytes()) {
    return std::nullopt;
  }
  return offset;
}

}  // namespace sluice::rpc
