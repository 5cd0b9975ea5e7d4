#include "sluice/pipeline/batch.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#include "sluice/ops/generic/numeric.h"

namespace sluice::pipeline {
namespace {

// IEEE binary32 -> binary16, round to nearest even.
uint16_t FloatToHalf(float value) {
  uint32_t f;
  std::memcpy(&f, &value, sizeof(f));
  uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  int32_t exp = static_cast<int32_t>((f >> 23) & 0xffu);
  uint32_t mant = f & 0x7fffffu;
  if (exp == 0xff) return sign | 0x7c00u | (mant != 0 ? 0x200u : 0u);  // inf / nan
  int32_t e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00u;  // overflow: infinity
  if (e <= 0) {                        // subnormal half (or zero)
    if (e < -10) return sign;
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into inf
  return static_cast<uint16_t>(half);
}

// A byte string (`path`, `data`): stacked NUL-padded even without padded batching.
bool IsByteString(const FieldSpec& field) {
  return field.dtype == DType::kBytes && field.rank() == 1;
}

bool IsRagged(const FieldSpec& field) {
  return std::find(field.shape.begin(), field.shape.end(), kUnknownDim) != field.shape.end();
}

std::string ShapeFieldName(const std::string& field) { return field + "_shape"; }

// Copies `src` (shape `src_shape`) into the leading corner of `dst` (shape `dst_shape`,
// same rank, every dim >= the source's), row by row.
void CopyPadded(const uint8_t* src, const Shape& src_shape, uint8_t* dst, const Shape& dst_shape,
                size_t elem_size, size_t dim) {
  if (dim + 1 >= src_shape.size()) {
    size_t n = src_shape.empty() ? 1 : static_cast<size_t>(src_shape.back());
    std::memcpy(dst, src, n * elem_size);
    return;
  }
  size_t src_stride = elem_size, dst_stride = elem_size;
  for (size_t d = dim + 1; d < src_shape.size(); ++d) {
    src_stride *= static_cast<size_t>(src_shape[d]);
    dst_stride *= static_cast<size_t>(dst_shape[d]);
  }
  for (int64_t i = 0; i < src_shape[dim]; ++i) {
    CopyPadded(src + i * src_stride, src_shape, dst + i * dst_stride, dst_shape, elem_size,
               dim + 1);
  }
}

double PaddingFor(const BatchOptions& options, const std::string& field) {
  auto it = options.padding_values.find(field);
  return it != options.padding_values.end() ? it->second : options.padding_value;
}

std::string Quoted(const std::string& origin) {
  return origin.empty() ? "an element without a file" : absl::StrCat("'", origin, "'");
}

}  // namespace

void FillValue(DType dtype, double value, void* dst, size_t count) {
  auto fill = [&](auto typed) {
    using T = decltype(typed);
    T* p = static_cast<T*>(dst);
    std::fill(p, p + count, typed);
  };
  switch (dtype) {
    case DType::kU8:
    case DType::kBytes:
      fill(ops::SaturateTo<uint8_t>(value));
      break;
    case DType::kI16:
      fill(ops::SaturateTo<int16_t>(value));
      break;
    case DType::kI32:
      fill(ops::SaturateTo<int32_t>(value));
      break;
    case DType::kI64:
      fill(ops::SaturateTo<int64_t>(value));
      break;
    case DType::kF16:
      fill(FloatToHalf(static_cast<float>(value)));
      break;
    case DType::kF32:
      fill(static_cast<float>(value));
      break;
    case DType::kF64:
      fill(value);
      break;
  }
}

StatusOr<Schema> BatchSchema(const Schema& input, const BatchOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch.size: must be at least 1, got ", options.size));
  }
  int64_t batch_dim = options.drop_remainder ? options.size : kUnknownDim;
  Schema out;
  std::vector<FieldSpec> shape_fields;
  for (const FieldSpec& f : input.fields()) {
    FieldSpec b = f;
    b.shape.insert(b.shape.begin(), batch_dim);
    out.Set(b);
    if (options.padded && IsRagged(f)) {
      shape_fields.push_back({ShapeFieldName(f.name), DType::kI64, {batch_dim, f.rank()}});
    }
  }
  for (FieldSpec& f : shape_fields) {
    if (input.IndexOf(f.name) >= 0) {
      return absl::InvalidArgumentError(absl::StrCat("padded_batch: cannot add field '", f.name,
                                                     "': the element already has one"));
    }
    out.Set(std::move(f));
  }
  if (options.padded) {
    for (const auto& [name, value] : options.padding_values) {
      if (input.IndexOf(name) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("padded_batch.padding_values: ", input.Find(name).status().message()));
      }
    }
  }
  return out;
}

namespace {

// Whether field `f` of `members`, in order, lies side by side in one buffer, `row_bytes`
// apart: then it already is the batch.
bool TileOneBuffer(const std::vector<Element>& members, int f, size_t row_bytes) {
  const Tensor& head = members.front().tensors[f];
  if (head.buffer() == nullptr || row_bytes == 0) return false;
  for (size_t i = 0; i < members.size(); ++i) {
    const Tensor& t = members[i].tensors[f];
    if (t.buffer() != head.buffer() || t.offset() != head.offset() + i * row_bytes) return false;
  }
  return true;
}

StatusOr<Element> StackBatchOrThrow(std::vector<Element> members, const Schema& input,
                                    const BatchOptions& options) {
  const int64_t n = static_cast<int64_t>(members.size());
  Element batch;
  batch.id = members.front().id;
  batch.members.reserve(members.size());
  for (const Element& m : members) batch.members.push_back(m.id);

  for (const Element& m : members) {
    if (static_cast<int>(m.tensors.size()) != input.size()) {
      return absl::InternalError(absl::StrCat("batch: element from ", Quoted(m.origin), " has ",
                                              m.tensors.size(), " tensors, its schema is ",
                                              input.ToString()));
    }
  }
  std::vector<Tensor> shape_tensors;
  bool in_place = false;  // a field was already in place
  for (int f = 0; f < input.size(); ++f) {
    const FieldSpec& field = input.field(f);
    const Element& first = members.front();
    const bool record_shape = options.padded && IsRagged(field);
    const bool pad = record_shape || IsByteString(field);
    Shape max_shape = first.tensors[f].shape();
    for (const Element& m : members) {
      const Tensor& t = m.tensors[f];
      if (t.dtype() != field.dtype || t.rank() != field.rank()) {
        return absl::InvalidArgumentError(absl::StrCat("batch: field '", field.name, "' of ",
                                                       Quoted(m.origin), " is ", t.DebugString(),
                                                       ", expected ", field.ToString()));
      }
      if (t.shape() == max_shape) continue;
      if (!pad) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch: field '", field.name, "' has shape ",
                         ShapeToString(first.tensors[f].shape()), " in ", Quoted(first.origin),
                         " but ", ShapeToString(t.shape()), " in ", Quoted(m.origin),
                         "; every element of a batch needs the same shape: resize them to "
                         "a common size, or use padded_batch"));
      }
      for (int d = 0; d < t.rank(); ++d) max_shape[d] = std::max(max_shape[d], t.dim(d));
    }

    Shape out_shape = max_shape;
    out_shape.insert(out_shape.begin(), n);
    const size_t elem = DTypeSize(field.dtype);
    const size_t row_bytes = static_cast<size_t>(NumElements(max_shape)) * elem;
    if (!pad && TileOneBuffer(members, f, row_bytes)) {
      // The samples were written into their batch's slots (core/batch_slots.h): the batch
      // is a view of the bytes already in place.
      const Tensor& head = members.front().tensors[f];
      SLUICE_ASSIGN_OR_RETURN(Tensor view, Tensor::View(field.dtype, std::move(out_shape),
                                                        head.buffer(), head.offset()));
      batch.tensors.push_back(std::move(view));
      for (Element& m : members) m.tensors[f] = Tensor();
      in_place = true;
      continue;
    }
    Tensor out = Tensor::Empty(field.dtype, out_shape);
    uint8_t* dst = out.mutable_raw();
    if (!pad) {
      for (int64_t i = 0; i < n; ++i) {
        if (row_bytes > 0) std::memcpy(dst + i * row_bytes, members[i].tensors[f].raw(), row_bytes);
      }
    } else {
      FillValue(field.dtype, record_shape ? PaddingFor(options, field.name) : 0.0, dst,
                static_cast<size_t>(out.num_elements()));
      for (int64_t i = 0; i < n; ++i) {
        const Tensor& t = members[i].tensors[f];
        if (t.nbytes() > 0) {
          CopyPadded(t.raw(), t.shape(), dst + i * row_bytes, max_shape, elem, 0);
        }
      }
      if (record_shape) {
        Tensor shapes = Tensor::Empty(DType::kI64, {n, field.rank()});
        int64_t* s = shapes.mutable_data<int64_t>();
        for (int64_t i = 0; i < n; ++i) {
          const Tensor& t = members[i].tensors[f];
          for (int d = 0; d < t.rank(); ++d) s[i * field.rank() + d] = t.dim(d);
        }
        shape_tensors.push_back(std::move(shapes));
      }
    }
    batch.tensors.push_back(std::move(out));
    // Free each member's field as soon as it is copied: halves the peak of a large batch.
    for (Element& m : members) m.tensors[f] = Tensor();
  }
  for (Tensor& t : shape_tensors) batch.tensors.push_back(std::move(t));
  if (in_place && options.in_place != nullptr) {
    options.in_place->fetch_add(1, std::memory_order_relaxed);
  }
  return batch;
}

}  // namespace

StatusOr<Element> StackBatch(std::vector<Element> members, const Schema& input,
                             const BatchOptions& options) {
  // A batch's buffer is allocated from its members' sizes: an allocation that fails is the
  // batch's error (on a worker, the session's), not the process's end.
  const size_t n = members.size();
  try {
    return StackBatchOrThrow(std::move(members), input, options);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("batch: out of memory stacking ", n, " samples"));
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("batch: out of memory stacking ", n, " samples (", e.what(), ")"));
  }
}

StatusOr<std::unique_ptr<BatchIterator>> BatchIterator::Create(std::unique_ptr<Iterator> input,
                                                               BatchOptions options) {
  SLUICE_ASSIGN_OR_RETURN(Schema schema, BatchSchema(input->schema(), options));
  return std::unique_ptr<BatchIterator>(
      new BatchIterator(std::move(input), std::move(options), std::move(schema)));
}

void BatchIterator::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  input_->Cancel();
}

StatusOr<bool> BatchIterator::Read(Element* out) {
  bool eos = false;
  Status status = input_->GetNext(out, &eos);
  if (!status.ok()) {
    if (!absl::IsCancelled(status)) {
      done_ = true;
      final_status_ = status;
    }
    return status;
  }
  if (eos) done_ = true;
  return !eos;
}

namespace {

// The field whose tensors are the largest in `e` (the one slots matter for), or -1.
int KeyField(const Element& e) {
  int key = -1;
  size_t most = 0;
  for (size_t f = 0; f < e.tensors.size(); ++f) {
    if (e.tensors[f].buffer() != nullptr && e.tensors[f].nbytes() > most) {
      most = e.tensors[f].nbytes();
      key = static_cast<int>(f);
    }
  }
  return key;
}

// The slot buffer `e`'s largest tensor is in: one that holds `size` of it (BatchSlots
// allocates a batch's worth); nullptr when its buffer is its own, or a received chunk's.
const Buffer* SlotBufferOf(const Element& e, int64_t size) {
  const int f = KeyField(e);
  if (f < 0) return nullptr;
  const Tensor& t = e.tensors[static_cast<size_t>(f)];
  const size_t n = t.nbytes();
  if (n == 0 || t.buffer()->size() < n * static_cast<size_t>(size)) return nullptr;
  return t.buffer().get();
}

}  // namespace

void BatchIterator::TakeGroup(const Buffer* group, size_t max, std::vector<Element>* out) {
  auto g = groups_.find(group);
  if (g == groups_.end()) return;
  for (auto it = waiting_.begin(); it != waiting_.end() && max > 0;) {
    if (it->group != group) {
      ++it;
      continue;
    }
    out->push_back(std::move(it->element));
    it = waiting_.erase(it);
    --max;
    if (--g->second == 0) {
      groups_.erase(g);
      return;
    }
  }
}

StatusOr<std::vector<Element>> BatchIterator::NextGathered() {
  const size_t size = static_cast<size_t>(options_.size);
  const size_t streams = static_cast<size_t>(std::max(1, options_.slot_streams));
  // Every producer's buffer being filled and the next one's first slots (two a stream at a
  // batch's edge), and one batch more.
  const size_t max_waiting = size * (2 * streams + 1);
  std::vector<Element> members;
  members.reserve(size);
  for (;;) {
    // A whole buffer, in slot order: stacking it is a view.
    const auto whole = std::find_if(groups_.begin(), groups_.end(), [&](const auto& g) {
      return g.first != nullptr && g.second >= options_.size;
    });
    if (whole != groups_.end()) {
      TakeGroup(whole->first, size, &members);
      const int f = KeyField(members.front());
      std::sort(members.begin(), members.end(), [f](const Element& a, const Element& b) {
        return a.tensors[f].offset() < b.tensors[f].offset();
      });
      return members;
    }
    auto loose = groups_.find(nullptr);
    if (loose != groups_.end() && loose->second >= options_.size) {
      TakeGroup(nullptr, size, &members);
      return members;
    }
    // A copy, the oldest element's group first, then the oldest of the rest: at the end of
    // the input; when more wait than the bound; or when the oldest waited until a sample two
    // epochs after its own was read, so that every epoch but the last two the batcher has
    // reached is delivered whole (a buffer that stopped filling: a sample dropped after
    // taking its slot, a producer that stopped). A mere pause of a producer is no reason:
    // waiting costs the batches of the others nothing, a copy would.
    const bool stale =
        !waiting_.empty() && uint64_t{waiting_.front().element.id.epoch} + 2 <= newest_epoch_;
    // (Short only at the end: a stale group with fewer than a batch waiting reads on.)
    if (!waiting_.empty() &&
        (done_ || ((stale || waiting_.size() > max_waiting) && waiting_.size() >= size))) {
      TakeGroup(waiting_.front().group, size, &members);
      while (members.size() < size && !waiting_.empty()) {
        TakeGroup(waiting_.front().group, size - members.size(), &members);
      }
      return members;
    }
    if (done_) return members;  // nothing waits
    Element e;
    SLUICE_ASSIGN_OR_RETURN(const bool got, Read(&e));
    if (!got) continue;
    newest_epoch_ = std::max(newest_epoch_, uint64_t{e.id.epoch});
    const Buffer* group = SlotBufferOf(e, options_.size);
    ++groups_[group];
    waiting_.push_back({std::move(e), group});
  }
}

Status BatchIterator::GetNext(Element* out, bool* end_of_stream) {
  if (cancelled_.load(std::memory_order_relaxed)) {
    return absl::CancelledError("pipeline cancelled");
  }
  std::vector<Element> members;
  if (options_.order_free) {
    if (done_ && waiting_.empty()) {
      *end_of_stream = final_status_.ok();
      return final_status_;
    }
    SLUICE_ASSIGN_OR_RETURN(members, NextGathered());
  } else {
    if (done_) {
      *end_of_stream = final_status_.ok();
      return final_status_;
    }
    members.reserve(static_cast<size_t>(options_.size));
    while (static_cast<int64_t>(members.size()) < options_.size && !done_) {
      Element e;
      SLUICE_ASSIGN_OR_RETURN(const bool got, Read(&e));
      if (!got) break;
      members.push_back(std::move(e));
    }
  }
  if (members.empty() ||
      (options_.drop_remainder && static_cast<int64_t>(members.size()) < options_.size)) {
    waiting_.clear();
    groups_.clear();
    *end_of_stream = true;
    return absl::OkStatus();
  }
  StatusOr<Element> batch = StackBatch(std::move(members), input_->schema(), options_);
  if (!batch.ok()) {
    done_ = true;
    final_status_ = batch.status();
    waiting_.clear();
    groups_.clear();
    return final_status_;
  }
  *out = *std::move(batch);
  *end_of_stream = false;
  return absl::OkStatus();
}

}  // namespace sluice::pipeline
