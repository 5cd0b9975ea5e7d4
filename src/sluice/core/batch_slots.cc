#include "sluice/core/batch_slots.h"

#include <utility>

namespace sluice {

BatchSlots::BatchSlots(DType dtype, Shape shape, int64_t batch_size)
    : BatchSlots(dtype, std::move(shape), batch_size, Source()) {}

BatchSlots::BatchSlots(DType dtype, Shape shape, int64_t batch_size, Source source)
    : dtype_(dtype),
      shape_(std::move(shape)),
      batch_size_(batch_size),
      slot_bytes_(static_cast<size_t>(NumElements(shape_)) * DTypeSize(dtype)),
      source_(std::move(source)),
      active_(!source_) {}

Tensor BatchSlots::Take(DType dtype, const Shape& shape) {
  if (dtype != dtype_ || shape != shape_ || slot_bytes_ == 0 || !active()) {
    return Tensor::Empty(dtype, shape);
  }
  std::shared_ptr<Buffer> buffer;
  size_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (buffer_ == nullptr || next_ == batch_size_) {
      const size_t bytes = slot_bytes_ * static_cast<size_t>(batch_size_);
      buffer_ = source_ ? source_() : Buffer::Allocate(bytes);
      next_ = 0;
      if (buffer_ == nullptr || buffer_->size() < bytes) {  // the source has none now
        buffer_.reset();
        return Tensor::Empty(dtype, shape);
      }
    }
    buffer = buffer_;
    offset = slot_bytes_ * static_cast<size_t>(next_++);
    if (next_ == batch_size_) buffer_.reset();  // full: the batch's slots own it now
  }
  // Fits by construction: the buffer holds batch_size_ slots and offset is one of them.
  return *Tensor::View(dtype, shape, std::move(buffer), offset);
}

int LargestSlotsField(const std::map<int, std::shared_ptr<BatchSlots>>& slots) {
  int key = -1;
  size_t most = 0;
  for (const auto& [field, s] : slots) {
    if (s->buffer_bytes() > most) {
      most = s->buffer_bytes();
      key = field;
    }
  }
  return key;
}

}  // namespace sluice
