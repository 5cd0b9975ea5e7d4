// Tensor: a typed, shaped view over a reference-counted, 64-byte-aligned buffer.
//
// Copying a Tensor copies the view, never the bytes: slices and copies share the buffer,
// which lives as long as any view of it (including views handed to Python or to the
// network layer). A Tensor is a value type; distinct Tensor objects may be used from
// different threads, but writers must make sure nobody else reads a buffer they mutate
// (in practice: an op writes only to tensors it allocated itself).
#ifndef SLUICE_CORE_TENSOR_H_
#define SLUICE_CORE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/status.h"

namespace sluice {

enum class DType : uint8_t { kU8, kI16, kI32, kI64, kF16, kF32, kF64, kBytes };

// Size in bytes of one element of `dtype` (kBytes counts one byte per element).
size_t DTypeSize(DType dtype);
// "u8", "i16", "i32", "i64", "f16", "f32", "f64", "bytes".
const char* DTypeName(DType dtype);
// Inverse of DTypeName; also accepts "uint8", "float32", "float16", "int64", ...
StatusOr<DType> ParseDType(std::string_view name);

using Shape = std::vector<int64_t>;
std::string ShapeToString(const Shape& shape);
int64_t NumElements(const Shape& shape);

// A block of memory. Either owned (64-byte aligned, freed on destruction) or foreign
// (memory that belongs to someone else, e.g. a network message, released by a callback).
class Buffer {
 public:
  static constexpr size_t kAlignment = 64;

  // Allocates `size` bytes, uninitialised. Never returns null (aborts on OOM like new).
  static std::shared_ptr<Buffer> Allocate(size_t size);
  // Wraps memory owned elsewhere; `release` runs when the last reference goes away.
  static std::shared_ptr<Buffer> Wrap(uint8_t* data, size_t size, std::function<void()> release);

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Bytes currently held by owned buffers in this process (for memory tests and reports).
  static int64_t LiveBytes();
  // Bytes of freed large buffers kept for reuse (bounded; not counted in LiveBytes).
  static int64_t CachedBytes();

 private:
  Buffer(uint8_t* data, size_t size, std::function<void()> release)
      : data_(data), size_(size), release_(std::move(release)) {}
  uint8_t* data_;
  size_t size_;
  std::function<void()> release_;  // empty for owned buffers
};

class Tensor {
 public:
  // An empty tensor: dtype u8, shape {0}, no buffer.
  Tensor();

  // Allocates a tensor of `shape`, contents uninitialised.
  static Tensor Empty(DType dtype, Shape shape);
  // Allocates and zero-fills.
  static Tensor Zeros(DType dtype, Shape shape);
  // A rank-1 kBytes tensor holding a copy of `bytes`.
  static Tensor FromBytes(std::string_view bytes);
  // A rank-0 scalar.
  static Tensor Scalar(int64_t value);
  // A view of `buffer` starting at `offset`. REQUIRES: the view fits in the buffer.
  static StatusOr<Tensor> View(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer,
                               size_t offset = 0);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t num_elements() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }

  const uint8_t* raw() const { return buffer_ ? buffer_->data() + offset_ : nullptr; }
  uint8_t* mutable_raw() { return buffer_ ? buffer_->data() + offset_ : nullptr; }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(raw());
  }
  template <typename T>
  T* mutable_data() {
    return reinterpret_cast<T*>(mutable_raw());
  }
  // The bytes of a kBytes (or any) tensor as a string_view.
  std::string_view bytes() const {
    return std::string_view(reinterpret_cast<const char*>(raw()), nbytes());
  }
  // Scalar value of a rank-0 or single-element integer tensor.
  int64_t scalar_int() const;

  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  size_t offset() const { return offset_; }

  // Rows [begin, end) along dimension 0, sharing the buffer. REQUIRES: rank >= 1,
  // 0 <= begin <= end <= dim(0).
  Tensor Slice(int64_t begin, int64_t end) const;
  // Same bytes, another shape with the same number of elements.
  StatusOr<Tensor> Reshape(Shape shape) const;
  // A deep copy into a fresh buffer.
  Tensor Clone() const;

  // True if dtype, shape and bytes are equal.
  bool Equals(const Tensor& other) const;
  std::string DebugString() const;  // "f32[3,224,224]"

 private:
  DType dtype_ = DType::kU8;
  Shape shape_{0};
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_H_
