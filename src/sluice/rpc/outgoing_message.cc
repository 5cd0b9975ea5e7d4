#include "sluice/rpc/outgoing_message.h"

#include <grpcpp/support/slice.h>

#include <limits>
#include <memory>

namespace sluice::rpc {
namespace {

// Protobuf keys (field number << 3 | wire type 2, length-delimited; 0 for a varint).
constexpr uint8_t kWorkerMessageChunk = (2 << 3) | 2;
constexpr uint8_t kChunkSplitId = (1 << 3) | 0;
constexpr uint8_t kChunkHeader = (2 << 3) | 2;
constexpr uint8_t kChunkPayload = (3 << 3) | 2;
constexpr uint8_t kChunkBulkBytes = (4 << 3) | 0;

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<Buffer>*>(owner); }

}  // namespace

bool SerializeOutgoing(const OutgoingMessage& m, grpc::ByteBuffer* out) {
  size_t payload_size = 0;
  for (const PayloadPiece& p : m.pieces) payload_size += p.size;
  const size_t inline_payload = m.bulk ? 0 : payload_size;
  const size_t chunk_size = 1 + VarintSize(m.split_id) + 1 + VarintSize(m.header.size()) +
                            m.header.size() + 1 + VarintSize(payload_size) + inline_payload;
  const size_t total = 1 + VarintSize(chunk_size) + chunk_size;
  if (total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) return false;

  std::string prefix;
  prefix.reserve(32 + m.header.size());
  prefix.push_back(static_cast<char>(kWorkerMessageChunk));
  AppendVarint(&prefix, chunk_size);
  prefix.push_back(static_cast<char>(kChunkSplitId));
  AppendVarint(&prefix, m.split_id);
  prefix.push_back(static_cast<char>(kChunkHeader));
  AppendVarint(&prefix, m.header.size());
  prefix.append(m.header);
  prefix.push_back(static_cast<char>(m.bulk ? kChunkBulkBytes : kChunkPayload));
  AppendVarint(&prefix, payload_size);
  if (m.bulk) {
    grpc::Slice only(prefix.data(), prefix.size());
    grpc::ByteBuffer buffer(&only, 1);
    out->Swap(&buffer);
    return true;
  }

  std::vector<grpc::Slice> slices;
  slices.reserve(1 + m.pieces.size());
  slices.emplace_back(prefix.data(), prefix.size());  // copied: small
  for (const PayloadPiece& p : m.pieces) {
    if (p.size == 0) continue;
    void* data = const_cast<uint8_t*>(p.data);
    if (p.owner == nullptr) {
      slices.emplace_back(data, p.size, grpc::Slice::STATIC_SLICE);
    } else {
      slices.emplace_back(data, p.size, &ReleaseOwner, new std::shared_ptr<Buffer>(p.owner));
    }
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  out->Swap(&buffer);
  return true;
}

}  // namespace sluice::rpc
