// What the trainer reads from a Process stream: a proto::WorkerMessage, except that a
// chunk's payload is copied straight from gRPC's receive slices into a 64-byte aligned
// Buffer (recycled for large sizes, core/tensor.h) instead of into a protobuf string.
//
// Either way the payload is copied once, but the Buffer comes from memory that is reused
// from chunk to chunk, where a fresh string of a whole batch (tens of MiB) was faulted in
// page by page on every message. The tensors decoded from it view the Buffer (wire.h).
#ifndef SLUICE_RPC_INCOMING_MESSAGE_H_
#define SLUICE_RPC_INCOMING_MESSAGE_H_

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/serialization_traits.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <memory>
#include <string>

#include "sluice/core/tensor.h"
#include "sluice/rpc/worker.pb.h"

namespace sluice::rpc {

struct IncomingMessage {
  // Every message but a chunk.
  proto::WorkerMessage message;
  // A chunk: WorkerMessage.chunk with its fields taken out.
  bool is_chunk = false;
  uint64_t split_id = 0;
  std::string header;
  std::shared_ptr<Buffer> payload;  // null while bulk_bytes > 0
  // > 0: the payload, this many bytes, is to be read from the bulk data channel
  // (rpc/bulk_channel.h).
  uint64_t bulk_bytes = 0;

  void Clear();
};

// Parses `buffer` (consumed) into `out`. False on bytes that are not a WorkerMessage.
bool ParseIncoming(grpc::ByteBuffer* buffer, IncomingMessage* out);

}  // namespace sluice::rpc

namespace grpc {

template <>
class SerializationTraits<sluice::rpc::IncomingMessage, void> {
 public:
  // Only the trainer reads this type; it never writes one.
  static Status Serialize(const sluice::rpc::IncomingMessage&, ByteBuffer*, bool*) {
    return Status(StatusCode::UNIMPLEMENTED, "IncomingMessage is read-only");
  }
  static Status Deserialize(ByteBuffer* buffer, sluice::rpc::IncomingMessage* m) {
    if (!sluice::rpc::ParseIncoming(buffer, m)) {
      return Status(StatusCode::INTERNAL, "the worker sent a malformed message");
    }
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // SLUICE_RPC_INCOMING_MESSAGE_H_
