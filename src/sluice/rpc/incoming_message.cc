#include "sluice/rpc/incoming_message.h"

#include <grpcpp/support/slice.h>

#include <cstring>
#include <vector>

namespace sluice::rpc {
namespace {

constexpr uint8_t kWorkerMessageChunk = (2 << 3) | 2;
constexpr int kChunkSplitId = 1;
constexpr int kChunkHeader = 2;
constexpr int kChunkPayload = 3;
constexpr int kChunkBulkBytes = 4;
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

// Reads bytes in order across a list of slices.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {}

  size_t remaining() const { return remaining_total_ - consumed_; }
  void set_total(size_t total) { remaining_total_ = total; }

  bool Byte(uint8_t* b) {
    if (!Settle()) return false;
    *b = slices_[slice_].begin()[pos_++];
    ++consumed_;
    return true;
  }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // Copies `n` bytes to `out` (nullptr: skips them).
  bool Copy(uint8_t* out, size_t n) {
    if (n > remaining()) return false;
    while (n > 0) {
      if (!Settle()) return false;
      const size_t take = std::min(n, slices_[slice_].size() - pos_);
      if (out != nullptr) {
        std::memcpy(out, slices_[slice_].begin() + pos_, take);
        out += take;
      }
      pos_ += take;
      consumed_ += take;
      n -= take;
    }
    return true;
  }

 private:
  // Moves past exhausted slices; false at the end.
  bool Settle() {
    while (slice_ < slices_.size() && pos_ == slices_[slice_].size()) {
      ++slice_;
      pos_ = 0;
    }
    return slice_ < slices_.size() && consumed_ < remaining_total_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t pos_ = 0;
  size_t consumed_ = 0;
  size_t remaining_total_ = 0;
};

// Skips a field of `wire_type` that this reader does not know.
bool SkipField(SliceCursor& c, int wire_type) {
  uint64_t n;
  switch (wire_type) {
    case kVarint:
      return c.Varint(&n);
    case kFixed64:
      return c.Copy(nullptr, 8);
    case kLengthDelimited:
      return c.Varint(&n) && c.Copy(nullptr, n);
    case kFixed32:
      return c.Copy(nullptr, 4);
    default:
      return false;
  }
}

bool ParseChunk(SliceCursor& c, IncomingMessage* out) {
  uint64_t chunk_len;
  if (!c.Varint(&chunk_len) || chunk_len != c.remaining()) return false;
  while (c.remaining() > 0) {
    uint64_t key;
    if (!c.Varint(&key)) return false;
    const int field = static_cast<int>(key >> 3);
    const int wire_type = static_cast<int>(key & 7);
    if (field == kChunkSplitId && wire_type == kVarint) {
      if (!c.Varint(&out->split_id)) return false;
    } else if (field == kChunkHeader && wire_type == kLengthDelimited) {
      uint64_t n;
      if (!c.Varint(&n) || n > c.remaining()) return false;
      out->header.resize(n);
      if (!c.Copy(reinterpret_cast<uint8_t*>(out->header.data()), n)) return false;
    } else if (field == kChunkPayload && wire_type == kLengthDelimited) {
      uint64_t n;
      if (!c.Varint(&n) || n > c.remaining()) return false;
      out->payload = Buffer::Allocate(n);
      if (!c.Copy(out->payload->data(), n)) return false;
    } else if (field == kChunkBulkBytes && wire_type == kVarint) {
      if (!c.Varint(&out->bulk_bytes)) return false;
    } else if (!SkipField(c, wire_type)) {
      return false;
    }
  }
  // A payload on the bulk channel is read there (the stream's reader fills `payload`); one
  // announced there and sent here as well is not a chunk this trainer can take.
  if (out->bulk_bytes > 0) return out->payload == nullptr;
  if (out->payload == nullptr) out->payload = Buffer::Allocate(0);
  return true;
}

}  // namespace

void IncomingMessage::Clear() {
  message.Clear();
  is_chunk = false;
  split_id = 0;
  header.clear();
  payload.reset();
  bulk_bytes = 0;
}

bool ParseIncoming(grpc::ByteBuffer* buffer, IncomingMessage* out) {
  out->Clear();
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return false;
  size_t total = 0;
  for (const grpc::Slice& s : slices) total += s.size();
  SliceCursor c(slices);
  c.set_total(total);
  uint8_t first = 0;
  bool chunk = false;
  {
    SliceCursor peek(slices);
    peek.set_total(total);
    chunk = peek.Byte(&first) && first == kWorkerMessageChunk;
  }
  if (!chunk) {
    // Small control messages: the protobuf parser.
    return grpc::GenericDeserialize<grpc::ProtoBufferReader, proto::WorkerMessage>(
               buffer, &out->message)
        .ok();
  }
  c.Byte(&first);
  out->is_chunk = true;
  // A WorkerMessage holds exactly one field of its oneof, so the chunk is the whole message.
  const bool ok = ParseChunk(c, out);
  buffer->Clear();
  return ok;
}

}  // namespace sluice::rpc
