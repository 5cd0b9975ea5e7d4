#include "sluice/rpc/wire.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

namespace sluice::rpc {
namespace {

constexpr char kMagic[4] = {'S', 'L', 'W', '1'};
constexpr uint8_t kFormatVersion = 1;
constexpr uint8_t kMaxDType = static_cast<uint8_t>(DType::kBytes);
// Fixed bytes of one element record and one tensor record without their variable parts;
// they bound the counts a header can announce by what is left of it.
constexpr size_t kMinElementBytes = 4 + 8 + 4 + 4 + 6 * 4 + 4;
constexpr size_t kMemberBytes = 4 + 8;
constexpr size_t kMinTensorBytes = 1 + 1 + 8 + 8;

size_t AlignUp(size_t n) { return (n + kWireAlignment - 1) / kWireAlignment * kWireAlignment; }

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void I32(int32_t v) { Le(static_cast<uint32_t>(v), 4); }
  void I64(int64_t v) { Le(static_cast<uint64_t>(v), 8); }
  void Bytes(std::string_view s) { out_->append(s.data(), s.size()); }

 private:
  void Le(uint64_t v, int n) {
    char buf[8];
    for (int i = 0; i < n; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
    out_->append(buf, static_cast<size_t>(n));
  }
  std::string* out_;
};

// Bounds-checked little-endian reads; the first failure sticks and names what was read.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool U8(uint8_t* v, const char* what) { return Le(v, 1, what); }
  bool U16(uint16_t* v, const char* what) { return Le(v, 2, what); }
  bool U32(uint32_t* v, const char* what) { return Le(v, 4, what); }
  bool U64(uint64_t* v, const char* what) { return Le(v, 8, what); }
  bool I32(int32_t* v, const char* what) {
    uint32_t u;
    if (!Le(&u, 4, what)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  bool I64(int64_t* v, const char* what) {
    uint64_t u;
    if (!Le(&u, 8, what)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool Bytes(size_t n, std::string_view* v, const char* what) {
    if (n > remaining()) return Truncated(what);
    *v = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  template <typename T>
  bool Le(T* v, size_t n, const char* what) {
    if (n > remaining()) return Truncated(what);
    uint64_t acc = 0;
    for (size_t i = 0; i < n; ++i) {
      acc |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += n;
    *v = static_cast<T>(acc);
    return true;
  }
  bool Truncated(const char*) {
    pos_ = in_.size();
    return false;
  }

  std::string_view in_;
  size_t pos_ = 0;
};

Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("corrupt element header: ", what));
}

Status Truncated(const Reader& r, const char* what) {
  return Corrupt(absl::StrCat("truncated at byte ", r.position(), " (reading ", what, ")"));
}

// Reads a SampleId.
bool ReadId(Reader& r, SampleId* id, const char* what) {
  uint32_t epoch;
  uint64_t index;
  if (!r.U32(&epoch, what) || !r.U64(&index, what)) return false;
  id->epoch = epoch;
  id->index = index;
  return true;
}

// The payload's size, leaving out the tensors `shared` places in shared slots.
size_t RawPayloadSize(const std::vector<Element>& elements, const SharedSlotOffset& shared) {
  size_t size = 0;
  for (const Element& e : elements) {
    for (const Tensor& t : e.tensors) {
      if (shared && shared(t).has_value()) continue;
      size = AlignUp(size) + t.nbytes();
    }
  }
  return size;
}

}  // namespace

size_t RawPayloadSize(const std::vector<Element>& elements) {
  return RawPayloadSize(elements, nullptr);
}

size_t WireBytesUpperBound(const Element& element) {
  constexpr size_t kGroupHeaderBytes = 4 + 1 + 1 + 2 + 8 + 4;
  size_t n = kGroupHeaderBytes + kMinElementBytes + element.origin.size() +
             kMemberBytes * element.members.size();
  for (const Tensor& t : element.tensors) {
    n += kMinTensorBytes + 8 * static_cast<size_t>(t.rank()) + t.nbytes() + kWireAlignment - 1;
  }
  return n;
}

namespace {

// Writes the group's header to `out->header` and calls `place(tensor, offset)` for every
// tensor with its payload offset, in payload order.
template <typename Place>
Status WriteHeader(const std::vector<Element>& elements, Codec codec, size_t raw_size,
                   EncodedElements* out, Place place, const SharedSlotOffset& shared = nullptr) {
  Writer w(&out->header);
  w.Bytes(std::string_view(kMagic, 4));
  w.U8(kFormatVersion);
  w.U8(static_cast<uint8_t>(codec));
  w.U16(0);
  w.U64(raw_size);
  w.U32(static_cast<uint32_t>(elements.size()));
  size_t offset = 0;
  for (const Element& e : elements) {
    if (e.origin.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError("element origin over 4 GiB");
    }
    w.U32(e.id.epoch);
    w.U64(e.id.index);
    w.U32(static_cast<uint32_t>(e.origin.size()));
    w.Bytes(e.origin);
    w.U32(static_cast<uint32_t>(e.members.size()));
    for (const SampleId& m : e.members) {
      w.U32(m.epoch);
      w.U64(m.index);
    }
    const ImageRegion& r = e.decoded_region;
    w.I32(r.full_height);
    w.I32(r.full_width);
    w.I32(r.x);
    w.I32(r.y);
    w.I32(r.width);
    w.I32(r.height);
    w.U32(static_cast<uint32_t>(e.tensors.size()));
    for (const Tensor& t : e.tensors) {
      if (t.rank() > kWireMaxRank) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", t.DebugString(), " of ", e.origin,
                                                       " has rank over ", kWireMaxRank));
      }
      const size_t length = t.nbytes();
      const std::optional<uint64_t> slot = shared ? shared(t) : std::nullopt;
      if (slot.has_value()) {  // in a shared slot: no payload bytes
        w.U8(static_cast<uint8_t>(t.dtype()) | kWireSharedSlot);
        w.U8(static_cast<uint8_t>(t.rank()));
        for (int64_t d : t.shape()) w.I64(d);
        w.U64(*slot);
        w.U64(length);
        continue;
      }
      offset = AlignUp(offset);
      w.U8(static_cast<uint8_t>(t.dtype()));
      w.U8(static_cast<uint8_t>(t.rank()));
      for (int64_t d : t.shape()) w.I64(d);
      w.U64(offset);
      w.U64(length);
      place(t, offset);
      offset += length;
    }
  }
  return absl::OkStatus();
}

// The zero bytes that pad pieces to the payload alignment.
const uint8_t kZeroPadding[kWireAlignment] = {};

}  // namespace

size_t EncodedElements::payload_size() const {
  if (pieces.empty()) return payload.size();
  size_t n = 0;
  for (const PayloadPiece& p : pieces) n += p.size;
  return n;
}

std::string EncodedElements::FlattenPayload() const {
  if (pieces.empty()) return payload;
  std::string flat;
  flat.reserve(payload_size());
  for (const PayloadPiece& p : pieces) flat.append(reinterpret_cast<const char*>(p.data), p.size);
  return flat;
}

StatusOr<EncodedElements> EncodeElements(const std::vector<Element>& elements, Codec codec) {
  EncodedElements out;
  const size_t raw_size = RawPayloadSize(elements);
  std::string raw(raw_size, '\0');
  SLUICE_RETURN_IF_ERROR(
      WriteHeader(elements, codec, raw_size, &out, [&](const Tensor& t, size_t offset) {
        if (t.nbytes() > 0) std::memcpy(raw.data() + offset, t.raw(), t.nbytes());
      }));
  out.raw_payload_bytes = raw_size;
  if (codec == Codec::kNone) {
    out.payload = std::move(raw);
  } else {
    SLUICE_ASSIGN_OR_RETURN(out.payload, Compress(codec, raw));
  }
  return out;
}

StatusOr<EncodedElements> EncodeElementsInPlace(const std::vector<Element>& elements,
                                                const SharedSlotOffset& shared) {
  EncodedElements out;
  const size_t raw_size = RawPayloadSize(elements, shared);
  size_t end = 0;
  SLUICE_RETURN_IF_ERROR(WriteHeader(
      elements, Codec::kNone, raw_size, &out,
      [&](const Tensor& t, size_t offset) {
        if (offset > end) out.pieces.push_back({kZeroPadding, offset - end, nullptr});
        if (t.nbytes() > 0) out.pieces.push_back({t.raw(), t.nbytes(), t.buffer()});
        end = offset + t.nbytes();
      },
      shared));
  out.raw_payload_bytes = raw_size;
  return out;
}

StatusOr<std::vector<Element>> DecodeElements(std::string_view header, std::string payload,
                                              const DecodeLimits& limits) {
  auto* holder = new std::string(std::move(payload));
  return DecodeElements(header,
                        Buffer::Wrap(reinterpret_cast<uint8_t*>(holder->data()), holder->size(),
                                     [holder] { delete holder; }),
                        limits);
}

StatusOr<WireLayout> DecodeLayout(std::string_view header, const DecodeLimits& limits) {
  Reader r(header);
  std::string_view magic;
  if (!r.Bytes(4, &magic, "magic")) return Truncated(r, "magic");
  if (magic != std::string_view(kMagic, 4)) return Corrupt("bad magic (not a Sluice header)");
  uint8_t version, codec_byte;
  uint16_t reserved;
  uint64_t raw_size;
  uint32_t count;
  if (!r.U8(&version, "version") || !r.U8(&codec_byte, "codec") || !r.U16(&reserved, "reserved") ||
      !r.U64(&raw_size, "payload size") || !r.U32(&count, "element count")) {
    return Truncated(r, "the fixed fields");
  }
  if (version != kFormatVersion) {
    return Corrupt(
        absl::StrCat("format version ", version, ", this build reads version ", kFormatVersion));
  }
  if (codec_byte > static_cast<uint8_t>(Codec::kZstd)) {
    return Corrupt(absl::StrCat("unknown codec ", codec_byte));
  }
  if (reserved != 0) return Corrupt("reserved field is not zero");
  const Codec codec = static_cast<Codec>(codec_byte);
  if (raw_size > limits.max_raw_payload_bytes) {
    return Corrupt(absl::StrCat("payload size ", raw_size, " is over the limit of ",
                                limits.max_raw_payload_bytes));
  }
  if (count > r.remaining() / kMinElementBytes) {
    return Corrupt(absl::StrCat("element count ", count, " does not fit in the ", header.size(),
                                "-byte header"));
  }

  WireLayout layout;
  layout.codec = codec;
  layout.raw_size = raw_size;
  layout.elements.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    ElementLayout el;
    Element& e = el.meta;
    if (!ReadId(r, &e.id, "sample id")) return Truncated(r, "sample id");
    uint32_t origin_len;
    std::string_view origin;
    if (!r.U32(&origin_len, "origin length") || !r.Bytes(origin_len, &origin, "origin")) {
      return Truncated(r, "origin");
    }
    e.origin = std::string(origin);
    uint32_t members;
    if (!r.U32(&members, "member count")) return Truncated(r, "member count");
    if (members > r.remaining() / kMemberBytes) {
      return Corrupt(
          absl::StrCat("element ", i, ": member count ", members, " does not fit in the header"));
    }
    e.members.resize(members);
    for (uint32_t m = 0; m < members; ++m) {
      if (!ReadId(r, &e.members[m], "member id")) return Truncated(r, "member id");
    }
    ImageRegion& reg = e.decoded_region;
    if (!r.I32(&reg.full_height, "region") || !r.I32(&reg.full_width, "region") ||
        !r.I32(&reg.x, "region") || !r.I32(&reg.y, "region") || !r.I32(&reg.width, "region") ||
        !r.I32(&reg.height, "region")) {
      return Truncated(r, "decoded region");
    }
    uint32_t tensors;
    if (!r.U32(&tensors, "tensor count")) return Truncated(r, "tensor count");
    if (tensors > r.remaining() / kMinTensorBytes) {
      return Corrupt(
          absl::StrCat("element ", i, ": tensor count ", tensors, " does not fit in the header"));
    }
    el.tensors.reserve(tensors);
    for (uint32_t t = 0; t < tensors; ++t) {
      uint8_t dtype_byte, rank;
      if (!r.U8(&dtype_byte, "dtype") || !r.U8(&rank, "rank")) return Truncated(r, "tensor");
      const bool shared = (dtype_byte & kWireSharedSlot) != 0;
      dtype_byte &= static_cast<uint8_t>(~kWireSharedSlot);
      if (dtype_byte > kMaxDType) {
        return Corrupt(absl::StrCat("element ", i, " tensor ", t, ": unknown dtype ", dtype_byte));
      }
      if (rank > kWireMaxRank) {
        return Corrupt(
            absl::StrCat("element ", i, " tensor ", t, ": rank ", rank, " over ", kWireMaxRank));
      }
      const DType dtype = static_cast<DType>(dtype_byte);
      Shape shape(rank);
      // The element count, overflow-checked against the payload size (a shared slot's bound)
      // as it grows.
      const uint64_t bound = shared ? kWireMaxSharedBytes : raw_size;
      uint64_t n = 1;
      // The product of the non-zero dimensions, which must fit in int64: a tensor with a zero
      // dimension has no bytes whatever the others are, but the sizes computed from its shape
      // (its element count, a row of it) would overflow.
      int64_t nonzero = 1;
      for (int d = 0; d < rank; ++d) {
        if (!r.I64(&shape[d], "dims")) return Truncated(r, "dims");
        if (shape[d] < 0) {
          return Corrupt(
              absl::StrCat("element ", i, " tensor ", t, ": negative dimension ", shape[d]));
        }
        if (shape[d] != 0 && __builtin_mul_overflow(nonzero, shape[d], &nonzero)) {
          return Corrupt(absl::StrCat("element ", i, " tensor ", t, ": dimension ", d, " (",
                                      shape[d], ") overflows the element count"));
        }
        const uint64_t dim = static_cast<uint64_t>(shape[d]);
        if (dim != 0 && n > bound / dim)
          n = bound + 1;  // too large either way
        else
          n *= dim;
      }
      uint64_t offset, length;
      if (!r.U64(&offset, "offset") || !r.U64(&length, "length")) return Truncated(r, "offset");
      const uint64_t expect = n > bound ? bound + 1 : n * static_cast<uint64_t>(DTypeSize(dtype));
      if (length != expect) {
        return Corrupt(absl::StrCat("element ", i, " tensor ", t, ": length ", length,
                                    " does not match ", DTypeName(dtype), ShapeToString(shape)));
      }
      if (offset % kWireAlignment != 0) {
        return Corrupt(absl::StrCat("element ", i, " tensor ", t, ": offset ", offset, " is not ",
                                    kWireAlignment, "-byte aligned"));
      }
      if (!shared && (offset > raw_size || length > raw_size - offset)) {
        return Corrupt(absl::StrCat("element ", i, " tensor ", t, ": bytes [", offset, ", +",
                                    length, ") outside the ", raw_size, "-byte payload"));
      }
      el.tensors.push_back({dtype, std::move(shape), offset, length, shared});
    }
    layout.elements.push_back(std::move(el));
  }
  if (r.remaining() != 0) {
    return Corrupt(absl::StrCat(r.remaining(), " unexpected bytes after the last element"));
  }
  return layout;
}

StatusOr<std::vector<Element>> DecodeElements(std::string_view header,
                                              std::shared_ptr<Buffer> payload,
                                              const DecodeLimits& limits) {
  SLUICE_ASSIGN_OR_RETURN(WireLayout layout, DecodeLayout(header, limits));
  if (NamesSharedSlots(layout)) {
    return Corrupt("a tensor in a shared slot, on a connection that has none");
  }
  // The payload buffer: the received bytes themselves when uncompressed (no copy).
  std::shared_ptr<Buffer> buffer;
  if (layout.codec == Codec::kNone) {
    if (payload->size() != layout.raw_size) {
      return Corrupt(absl::StrCat("payload is ", payload->size(), " bytes, the header says ",
                                  layout.raw_size));
    }
    buffer = std::move(payload);
  } else {
    buffer = Buffer::Allocate(layout.raw_size);
    const std::string_view compressed(reinterpret_cast<const char*>(payload->data()),
                                      payload->size());
    Status s = Decompress(layout.codec, compressed, buffer->data(), layout.raw_size);
    if (!s.ok()) return absl::DataLossError(absl::StrCat("corrupt payload: ", s.message()));
  }
  std::vector<Element> elements;
  elements.reserve(layout.elements.size());
  for (ElementLayout& el : layout.elements) {
    Element e = std::move(el.meta);
    e.tensors.reserve(el.tensors.size());
    for (TensorLayout& t : el.tensors) {
      SLUICE_ASSIGN_OR_RETURN(Tensor tensor,
                              Tensor::View(t.dtype, std::move(t.shape), buffer, t.offset));
      e.tensors.push_back(std::move(tensor));
    }
    elements.push_back(std::move(e));
  }
  return elements;
}

bool NamesSharedSlots(const WireLayout& layout) {
  for (const ElementLayout& el : layout.elements) {
    for (const TensorLayout& t : el.tensors) {
      if (t.shared) return true;
    }
  }
  return false;
}

bool LandsInPlace(const WireLayout& layout) {
  if (layout.codec != Codec::kNone) return false;
  uint64_t end = 0;
  for (const ElementLayout& el : layout.elements) {
    for (const TensorLayout& t : el.tensors) {
      if (t.shared) continue;
      if (t.offset < end || t.offset - end >= kWireAlignment) return false;
      end = t.offset + t.length;
    }
  }
  return layout.raw_size >= end && layout.raw_size - end < kWireAlignment;
}

StatusOr<std::vector<Element>> ReceiveElements(
    WireLayout layout, const std::function<Status(uint8_t*, size_t, bool)>& read,
    const std::function<std::optional<Tensor>(int, DType, const Shape&)>& place,
    const std::function<StatusOr<Tensor>(const TensorLayout&)>& claim) {
  // Where each tensor's bytes go: its slot, or a place in one buffer for the rest. A shared
  // slot's tensor is claimed here, before any byte is read: nothing of the payload is read
  // for it.
  std::vector<std::vector<std::optional<Tensor>>> placed(layout.elements.size());
  size_t rest_bytes = 0;
  std::vector<std::vector<size_t>> rest_offset(layout.elements.size());
  for (size_t i = 0; i < layout.elements.size(); ++i) {
    const ElementLayout& el = layout.elements[i];
    for (size_t t = 0; t < el.tensors.size(); ++t) {
      const TensorLayout& tl = el.tensors[t];
      if (tl.shared) {
        if (!claim) return Corrupt("a tensor in a shared slot, on a connection that has none");
        SLUICE_ASSIGN_OR_RETURN(Tensor claimed, claim(tl));
        placed[i].push_back(std::move(claimed));
        rest_offset[i].push_back(rest_bytes);
        continue;
      }
      std::optional<Tensor> slot = place(static_cast<int>(t), tl.dtype, tl.shape);
      if (slot.has_value() && slot->nbytes() != tl.length) slot.reset();
      placed[i].push_back(std::move(slot));
      rest_offset[i].push_back(rest_bytes);
      if (!placed[i].back().has_value()) {
        rest_bytes += (tl.length + kWireAlignment - 1) / kWireAlignment * kWireAlignment;
      }
    }
  }
  std::shared_ptr<Buffer> rest = Buffer::Allocate(rest_bytes);
  uint8_t padding[kWireAlignment];
  uint64_t at = 0;
  for (size_t i = 0; i < layout.elements.size(); ++i) {
    const ElementLayout& el = layout.elements[i];
    for (size_t t = 0; t < el.tensors.size(); ++t) {
      const TensorLayout& tl = el.tensors[t];
      if (tl.shared) continue;
      if (tl.offset > at) SLUICE_RETURN_IF_ERROR(read(padding, tl.offset - at, false));
      const bool slot = placed[i][t].has_value();
      uint8_t* to = slot ? placed[i][t]->mutable_raw() : rest->data() + rest_offset[i][t];
      if (tl.length > 0) SLUICE_RETURN_IF_ERROR(read(to, tl.length, slot));
      at = tl.offset + tl.length;
    }
  }
  if (layout.raw_size > at) SLUICE_RETURN_IF_ERROR(read(padding, layout.raw_size - at, false));
  std::vector<Element> elements;
  elements.reserve(layout.elements.size());
  for (size_t i = 0; i < layout.elements.size(); ++i) {
    ElementLayout& el = layout.elements[i];
    Element e = std::move(el.meta);
    e.tensors.reserve(el.tensors.size());
    for (size_t t = 0; t < el.tensors.size(); ++t) {
      if (placed[i][t].has_value()) {
        e.tensors.push_back(*std::move(placed[i][t]));
        continue;
      }
      SLUICE_ASSIGN_OR_RETURN(
          Tensor tensor, Tensor::View(el.tensors[t].dtype, std::move(el.tensors[t].shape), rest,
                                      rest_offset[i][t]));
      e.tensors.push_back(std::move(tensor));
    }
    elements.push_back(std::move(e));
  }
  return elements;
}

}  // namespace sluice::rpc
