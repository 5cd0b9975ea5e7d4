// The wire format of elements between trainer and worker (docs/offload.md, "Wire format").
//
// A group of elements travels as two byte strings:
//   header   a small little-endian record describing the elements and where each tensor's
//            bytes lie in the payload;
//   payload  the tensors' bytes back to back, each starting at a 64-byte aligned offset,
//            optionally compressed as a whole (lz4 or zstd; the header names the codec and
//            the raw size).
// Header layout (all integers little-endian):
//   magic "SLW1" | u8 format version (1) | u8 codec | u16 reserved (0) | u64 raw payload size
//   | u32 element count | elements...
//   element: u32 epoch | u64 index | u32 origin length | origin bytes | u32 member count
//            | members (u32 epoch, u64 index)... | decoded_region as 6 x i32 (full_height,
//            full_width, x, y, width, height) | u32 tensor count | tensors...
//   tensor:  u8 dtype | u8 rank | i64 dims[rank] | u64 offset | u64 length
//            (dtype with kWireSharedSlot set: the bytes are not in the payload but in a
//            shared slot at `offset` of the session's slot arena, rpc/slot_arena.h; only a
//            worker on the trainer's machine that was handed an arena writes such records)
// Decoding an uncompressed payload copies no tensor bytes: the payload string is moved into
// a Buffer and every tensor is a Tensor::View into it. Decoding validates everything (magic,
// version, codec, counts, dtypes, ranks, dims, offsets, lengths, alignment, trailing bytes)
// and returns DataLoss naming the problem; it never reads or views out of bounds.
// Pure functions, thread-safe.
#ifndef SLUICE_RPC_WIRE_H_
#define SLUICE_RPC_WIRE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/rpc/compress.h"

namespace sluice::rpc {

inline constexpr size_t kWireAlignment = 64;
inline constexpr int kWireMaxRank = 16;
// The dtype byte's flag for a tensor in a shared slot (rpc/slot_arena.h).
inline constexpr uint8_t kWireSharedSlot = 0x80;
// The largest shared slot a header may name (a bound for its shape's arithmetic; the arena
// checks the slot's real size).
inline constexpr uint64_t kWireMaxSharedBytes = uint64_t{1} << 40;

// Where a tensor's bytes lie in a shared slot arena, for one that is in one; nullopt: its
// bytes go in the payload.
using SharedSlotOffset = std::function<std::optional<uint64_t>(const Tensor&)>;

// A run of payload bytes left where they are: a tensor's bytes (kept alive by `owner`) or
// alignment padding (zeros, no owner).
struct PayloadPiece {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<Buffer> owner;
};

struct EncodedElements {
  std::string header;
  // The payload: contiguous in `payload`, or, from EncodeElementsInPlace, the concatenation
  // of `pieces` (then `payload` is empty).
  std::string payload;
  std::vector<PayloadPiece> pieces;
  size_t raw_payload_bytes = 0;  // before compression

  // What the group costs on the wire (and in flow-control credit).
  size_t wire_bytes() const { return header.size() + payload_size(); }
  size_t payload_size() const;
  // The payload as one string (a copy when it is in pieces).
  std::string FlattenPayload() const;
};

// Raw (uncompressed) payload bytes `elements` would take, alignment padding included.
size_t RawPayloadSize(const std::vector<Element>& elements);

// An upper bound of the bytes `element` adds to an uncompressed group (header record and
// payload with alignment), plus the group's fixed header.
size_t WireBytesUpperBound(const Element& element);

// Encodes `elements` (which are not modified). InvalidArgument for a tensor of rank over
// kWireMaxRank or an origin over 4 GiB.
StatusOr<EncodedElements> EncodeElements(const std::vector<Element>& elements,
                                         Codec codec = Codec::kNone);

// The same group, uncompressed, without copying tensor bytes: the payload is described as
// pieces that point into the tensors' buffers (and share their ownership), for a sender
// that can write scattered bytes (the worker's gRPC server). The bytes are those
// EncodeElements(elements, kNone) would produce.
// With `shared`, a tensor it gives an offset for is written as a shared slot (no payload
// bytes).
StatusOr<EncodedElements> EncodeElementsInPlace(const std::vector<Element>& elements,
                                                const SharedSlotOffset& shared = nullptr);

struct DecodeLimits {
  // Largest raw payload a header may announce (guards the allocation for a compressed
  // payload against a garbled header).
  size_t max_raw_payload_bytes = size_t{1} << 32;
};

// A group's header, validated: each element without its tensors, and where each tensor's
// bytes lie in the (raw) payload.
struct TensorLayout {
  DType dtype = DType::kU8;
  Shape shape;
  uint64_t offset = 0;  // in the raw payload, or (shared) in the slot arena
  uint64_t length = 0;
  bool shared = false;  // in a shared slot, not in the payload
};
struct ElementLayout {
  Element meta;  // id, origin, members, region; no tensors
  std::vector<TensorLayout> tensors;
};
struct WireLayout {
  Codec codec = Codec::kNone;
  uint64_t raw_size = 0;
  std::vector<ElementLayout> elements;
};
// DataLoss on any malformed header, as DecodeElements.
StatusOr<WireLayout> DecodeLayout(std::string_view header, const DecodeLimits& limits = {});

// Whether ReceiveElements can take `layout`'s payload: uncompressed, its tensors in payload
// order without overlapping, and nothing between or after them but alignment padding (what
// an encoder writes; anything else is read whole and decoded as before). Shared slots take
// no payload and are left out of that.
bool LandsInPlace(const WireLayout& layout);
// Whether `layout` names a shared slot.
bool NamesSharedSlots(const WireLayout& layout);
// Reads a payload that LandsInPlace with `read` (exactly n bytes into the pointer; the flag
// says whether the pointer is a slot `place` gave), each
// tensor's bytes straight into where it will stay: the tensor `place` gives for its field
// index, dtype and shape (a slot of the batch being assembled, core/batch_slots.h), else a
// place in one buffer for the tensors it gives none. The padding is read and dropped. A
// tensor in a shared slot is what `claim` makes of its layout (rpc/slot_arena.h); without
// `claim` it is DataLoss. An error of `read` or `claim` is returned as it is.
StatusOr<std::vector<Element>> ReceiveElements(
    WireLayout layout, const std::function<Status(uint8_t*, size_t, bool)>& read,
    const std::function<std::optional<Tensor>(int, DType, const Shape&)>& place,
    const std::function<StatusOr<Tensor>(const TensorLayout&)>& claim = nullptr);

// Decodes a group (DataLoss for one that names a shared slot: only ReceiveElements takes
// those). `payload` is consumed: uncompressed, it becomes the tensors' buffer;
// compressed, it is decompressed into a fresh 64-byte aligned buffer. DataLoss on any
// malformed input.
StatusOr<std::vector<Element>> DecodeElements(std::string_view header, std::string payload,
                                              const DecodeLimits& limits = {});
// The same with the payload received into a Buffer (which, uncompressed, the tensors view).
StatusOr<std::vector<Element>> DecodeElements(std::string_view header,
                                              std::shared_ptr<Buffer> payload,
                                              const DecodeLimits& limits = {});

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_WIRE_H_
