#include "sluice/core/tensor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

#include "absl/strings/str_join.h"

namespace sluice {
namespace {

std::atomic<int64_t> g_live_bytes{0};

// Large buffers (a batch of images is tens of MB) are recycled instead of being returned to
// the C library: glibc serves blocks above its mmap threshold (at most 32 MiB) with fresh
// mmaps and gives them back with munmap, so every batch would be faulted in page by page
// again (and every munmap costs a TLB shootdown on the other pipeline threads). Smaller
// blocks are left to glibc, whose adaptive threshold keeps them on the heap. Blocks are kept
// per size class (sizes rounded up to a quarter of their power of two, so at most 25% is
// wasted), a few per class, with a cap on the total, so the cache stays small and bounded.
class LargeBlockCache {
 public:
  static constexpr size_t kMinBytes = size_t{1} << 20;
  static constexpr size_t kMaxTotalBytes = size_t{256} << 20;
  static constexpr size_t kMaxPerSize = 8;

  void* Take(size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(rounded);
    if (it == blocks_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    total_ -= rounded;
    return p;
  }

  // True if the cache kept `p`; otherwise the caller frees it.
  bool Give(void* p, size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<void*>& list = blocks_[rounded];
    if (list.size() >= kMaxPerSize || total_ + rounded > kMaxTotalBytes) return false;
    list.push_back(p);
    total_ += rounded;
    return true;
  }

  size_t total() {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> blocks_;
  size_t total_ = 0;
};

LargeBlockCache& BlockCache() {
  static LargeBlockCache* cache = new LargeBlockCache();  // never destroyed: used at exit
  return *cache;
}

// Blocks of at least a huge page (2 MiB on x86-64 and arm64's default) are placed on a
// huge-page boundary and marked MADV_HUGEPAGE, so the kernel backs them with transparent huge
// pages where it offers them on request (`transparent_hugepage/enabled` set to `madvise` or
// `always`; with `never` the mark does nothing). What it saves is the first touch of fresh
// memory: a 4 KiB page fault zeroes its page and maps it, and in a virtual machine each fault
// also exits to the hypervisor. Measured on a 2-vCPU virtual machine: 9 us a 4 KiB page, 0.2-0.3
// us a 4 KiB page under huge pages (bench/results/huge-pages/). A Loader faults in its batches'
// buffers at its start and a new Loader again at every plan switch (~90 MB on the demo's
// trainer, 0.2 CPU-seconds of its half CPU). The cost: a block's tail past its last whole
// huge page stays in 4 KiB pages, and the alignment can leave up to 2 MiB of the heap unused
// beside a block (glibc hands it back to its free lists). SLUICE_HUGE_PAGES=0 turns it off.
constexpr size_t kHugePageBytes = size_t{2} << 20;

bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("SLUICE_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return wanted;
}

void* AllocateBlock(size_t rounded) {
  if (rounded < kHugePageBytes || !HugePagesWanted()) {
    return std::aligned_alloc(Buffer::kAlignment, rounded);
  }
  void* p = nullptr;
  if (posix_memalign(&p, kHugePageBytes, rounded) != 0) return nullptr;
  // Advice only: a kernel without transparent huge pages refuses it (EINVAL), and the block
  // is then ordinary memory.
  (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

size_t RoundedSize(size_t size) {
  if (size < LargeBlockCache::kMinBytes) {
    size_t rounded = (size + Buffer::kAlignment - 1) / Buffer::kAlignment * Buffer::kAlignment;
    return rounded == 0 ? Buffer::kAlignment : rounded;
  }
  // Size class: a multiple of a quarter of the largest power of two not above `size`.
  size_t step = (size_t{1} << (63 - __builtin_clzll(size))) / 4;
  return (size + step - 1) / step * step;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kU8:
    case DType::kBytes:
      return 1;
    case DType::kI16:
    case DType::kF16:
      return 2;
    case DType::kI32:
    case DType::kF32:
      return 4;
    case DType::kI64:
    case DType::kF64:
      return 8;
  }
  return 1;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kU8:
      return "u8";
    case DType::kI16:
      return "i16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBytes:
      return "bytes";
  }
  return "?";
}

StatusOr<DType> ParseDType(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"u8", DType::kU8},       {"uint8", DType::kU8},     {"i16", DType::kI16},
      {"int16", DType::kI16},   {"i32", DType::kI32},      {"int32", DType::kI32},
      {"i64", DType::kI64},     {"int64", DType::kI64},    {"f16", DType::kF16},
      {"float16", DType::kF16}, {"f32", DType::kF32},      {"float32", DType::kF32},
      {"f64", DType::kF64},     {"float64", DType::kF64},  {"bytes", DType::kBytes},
  };
  for (const Alias& a : kAliases) {
    if (a.name == name) return a.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", Av(name), "' (expected one of u8, i16, i32, i64, f16, f32, f64, bytes)"));
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<Buffer> Buffer::Allocate(size_t size) {
  size_t rounded = RoundedSize(size);
  void* p = rounded >= LargeBlockCache::kMinBytes ? BlockCache().Take(rounded) : nullptr;
  if (p == nullptr) p = AllocateBlock(rounded);
  if (p == nullptr) throw std::bad_alloc();
  g_live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return std::shared_ptr<Buffer>(new Buffer(static_cast<uint8_t*>(p), size, nullptr));
}

std::shared_ptr<Buffer> Buffer::Wrap(uint8_t* data, size_t size, std::function<void()> release) {
  if (!release) release = [] {};
  return std::shared_ptr<Buffer>(new Buffer(data, size, std::move(release)));
}

Buffer::~Buffer() {
  if (release_) {
    release_();
  } else {
    g_live_bytes.fetch_sub(static_cast<int64_t>(size_), std::memory_order_relaxed);
    size_t rounded = RoundedSize(size_);
    if (rounded < LargeBlockCache::kMinBytes || !BlockCache().Give(data_, rounded)) {
      std::free(data_);
    }
  }
}

int64_t Buffer::LiveBytes() { return g_live_bytes.load(std::memory_order_relaxed); }

int64_t Buffer::CachedBytes() { return static_cast<int64_t>(BlockCache().total()); }

Tensor::Tensor() = default;

Tensor Tensor::Empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.buffer_ = Buffer::Allocate(t.nbytes());
  return t;
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  Tensor t = Empty(dtype, std::move(shape));
  if (t.nbytes() > 0) std::memset(t.mutable_raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::FromBytes(std::string_view bytes) {
  Tensor t = Empty(DType::kBytes, {static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(t.mutable_raw(), bytes.data(), bytes.size());
  return t;
}

Tensor Tensor::Scalar(int64_t value) {
  Tensor t = Empty(DType::kI64, {});
  *t.mutable_data<int64_t>() = value;
  return t;
}

StatusOr<Tensor> Tensor::View(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer,
                              size_t offset) {
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension in " + ShapeToString(shape));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t need = t.nbytes();
  size_t have = buffer ? buffer->size() : 0;
  if (offset > have || need > have - offset) {
    return absl::OutOfRangeError(absl::StrCat("tensor view ", DTypeName(dtype),
                                              ShapeToString(t.shape_), " at offset ", offset,
                                              " does not fit in a buffer of ", have, " bytes"));
  }
  t.buffer_ = std::move(buffer);
  t.offset_ = offset;
  return t;
}

int64_t Tensor::scalar_int() const {
  switch (dtype_) {
    case DType::kU8:
      return *data<uint8_t>();
    case DType::kI16:
      return *data<int16_t>();
    case DType::kI32:
      return *data<int32_t>();
    case DType::kI64:
      return *data<int64_t>();
    default:
      return 0;
  }
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  Tensor t = *this;
  int64_t row = shape_.empty() ? 0 : NumElements(Shape(shape_.begin() + 1, shape_.end()));
  t.shape_[0] = end - begin;
  t.offset_ = offset_ + static_cast<size_t>(begin * row) * DTypeSize(dtype_);
  return t;
}

StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (NumElements(shape) != num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", DebugString(), " to ",
                                                   ShapeToString(shape)));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t = Empty(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(t.mutable_raw(), raw(), nbytes());
  return t;
}

bool Tensor::Equals(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (nbytes() == 0) return true;
  return std::memcmp(raw(), other.raw(), nbytes()) == 0;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeToString(shape_));
}

}  // namespace sluice
