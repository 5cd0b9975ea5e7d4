// What the worker's gRPC server writes on a Process stream: a proto::WorkerMessage, or a
// chunk whose payload is still in pieces inside the tensors' buffers (EncodeElementsInPlace).
//
// The second form is serialized without copying the payload: the gRPC byte buffer is a
// small slice with the protobuf framing and the header, followed by one slice per payload
// piece that points into the tensor's buffer and holds a reference to it until gRPC has
// sent it. The bytes on the wire are exactly those of the equivalent WorkerMessage, so the
// trainer parses them as usual. (A protobuf message would first copy the payload into a
// string and then again into gRPC's buffer; at the after-batch cut that was a third of the
// worker's CPU.)
#ifndef SLUICE_RPC_OUTGOING_MESSAGE_H_
#define SLUICE_RPC_OUTGOING_MESSAGE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/serialization_traits.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/rpc/wire.h"
#include "sluice/rpc/worker.pb.h"

namespace sluice::rpc {

struct OutgoingMessage {
  // Sent when `in_place` is false.
  proto::WorkerMessage message;
  // Otherwise a Chunk{split_id, header, payload = concatenation of pieces}.
  bool in_place = false;
  uint64_t split_id = 0;
  std::string header;
  std::vector<PayloadPiece> pieces;
  // The pieces go on the bulk data channel (rpc/bulk_channel.h): the message carries
  // Chunk.bulk_bytes, their size, in place of the payload.
  bool bulk = false;
};

// Serializes `m` into `out` (slices as described above). Returns false for a message over
// 2 GiB (gRPC's own limit on a message).
bool SerializeOutgoing(const OutgoingMessage& m, grpc::ByteBuffer* out);

}  // namespace sluice::rpc

namespace grpc {

template <>
class SerializationTraits<sluice::rpc::OutgoingMessage, void> {
 public:
  static Status Serialize(const sluice::rpc::OutgoingMessage& m, ByteBuffer* buffer,
                          bool* own_buffer) {
    if (!m.in_place) {
      return SerializationTraits<sluice::rpc::proto::WorkerMessage>::Serialize(m.message, buffer,
                                                                              own_buffer);
    }
    *own_buffer = true;
    if (!sluice::rpc::SerializeOutgoing(m, buffer)) {
      return Status(StatusCode::INTERNAL, "chunk over 2 GiB");
    }
    return Status::OK;
  }
  // Only the worker writes this type; it never reads one.
  static Status Deserialize(ByteBuffer*, sluice::rpc::OutgoingMessage*) {
    return Status(StatusCode::UNIMPLEMENTED, "OutgoingMessage is write-only");
  }
};

}  // namespace grpc

#endif  // SLUICE_RPC_OUTGOING_MESSAGE_H_
