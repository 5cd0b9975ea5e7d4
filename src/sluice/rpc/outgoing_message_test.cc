// Both ends of a chunk's trip without protobuf strings: a chunk serialized in place is byte
// for byte the WorkerMessage protobuf would write, and the tensors it points into stay alive
// until gRPC lets go of the buffer; the trainer's parser reads any WorkerMessage, however the
// bytes are sliced, and rejects malformed ones.
#include "sluice/rpc/incoming_message.h"
#include "sluice/rpc/outgoing_message.h"

#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/rpc/wire.h"

namespace sluice::rpc {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as a byte buffer cut into slices of `slice` bytes.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t slice) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += slice) {
    slices.emplace_back(bytes.data() + at, std::min(slice, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::vector<Element> Samples(int n, int64_t floats) {
  std::vector<Element> elements;
  for (int i = 0; i < n; ++i) {
    Element e;
    e.id = {1, static_cast<uint64_t>(300 + i)};  // a multi-byte varint somewhere
    e.origin = "img_" + std::to_string(i) + ".jpg";
    Tensor pixels = Tensor::Empty(DType::kF32, {floats});
    for (int64_t k = 0; k < floats; ++k) pixels.mutable_data<float>()[k] = i * 1000.0f + k;
    e.tensors.push_back(pixels);
    e.tensors.push_back(Tensor::Scalar(i));  // 8 bytes: padding follows the next tensor
    elements.push_back(std::move(e));
  }
  return elements;
}

TEST(OutgoingMessageTest, InPlaceChunkIsTheProtobufEncoding) {
  for (int64_t floats : {0, 3, 5000, 40000}) {  // payload lengths of 1 to 3 varint bytes
    std::vector<Element> elements = Samples(3, floats);
    auto in_place = EncodeElementsInPlace(elements);
    auto contiguous = EncodeElements(elements, Codec::kNone);
    ASSERT_TRUE(in_place.ok() && contiguous.ok());
    EXPECT_EQ(in_place->FlattenPayload(), contiguous->payload);
    EXPECT_EQ(in_place->wire_bytes(), contiguous->wire_bytes());

    OutgoingMessage m;
    m.in_place = true;
    m.split_id = 1234567;
    m.header = in_place->header;
    m.pieces = in_place->pieces;
    grpc::ByteBuffer buffer;
    ASSERT_TRUE(SerializeOutgoing(m, &buffer));

    proto::WorkerMessage expected;
    expected.mutable_chunk()->set_split_id(1234567);
    expected.mutable_chunk()->set_header(contiguous->header);
    expected.mutable_chunk()->set_payload(contiguous->payload);
    EXPECT_EQ(Flatten(buffer), expected.SerializeAsString()) << floats << " floats";

    proto::WorkerMessage parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
    auto decoded = DecodeElements(parsed.chunk().header(), parsed.chunk().payload());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_EQ(decoded->size(), 3u);
    EXPECT_EQ((*decoded)[2].origin, "img_2.jpg");
    if (floats > 0) {
      EXPECT_EQ((*decoded)[2].tensors[0].data<float>()[floats - 1], 2000.0f + floats - 1);
    }
  }
}

// With the bulk data channel the message is the chunk with its payload's size in
// Chunk.bulk_bytes and no payload, in the protobuf encoding; the trainer's parse says how many
// bytes to read from the channel and leaves the payload to that read.
TEST(OutgoingMessageTest, ABulkChunkCarriesThePayloadsSizeInsteadOfIt) {
  for (int64_t floats : {3, 5000, 40000}) {
    std::vector<Element> elements = Samples(3, floats);
    auto in_place = EncodeElementsInPlace(elements);
    ASSERT_TRUE(in_place.ok());
    OutgoingMessage m;
    m.in_place = true;
    m.bulk = true;
    m.split_id = 42;
    m.header = in_place->header;
    m.pieces = in_place->pieces;
    grpc::ByteBuffer buffer;
    ASSERT_TRUE(SerializeOutgoing(m, &buffer));
    const std::string bytes = Flatten(buffer);
    proto::WorkerMessage expected;
    expected.mutable_chunk()->set_split_id(42);
    expected.mutable_chunk()->set_header(in_place->header);
    expected.mutable_chunk()->set_bulk_bytes(in_place->FlattenPayload().size());
    EXPECT_EQ(bytes, expected.SerializeAsString()) << floats << " floats";

    grpc::ByteBuffer again = Sliced(bytes, 5);
    IncomingMessage in;
    ASSERT_TRUE(ParseIncoming(&again, &in));
    EXPECT_TRUE(in.is_chunk);
    EXPECT_EQ(in.split_id, 42u);
    EXPECT_EQ(in.header, in_place->header);
    EXPECT_EQ(in.bulk_bytes, in_place->FlattenPayload().size());
    EXPECT_EQ(in.payload, nullptr);  // read from the channel by the stream's reader
  }
}

// A chunk that says its payload is on the bulk channel and also carries one is not a chunk
// this trainer takes (a worker would never send it).
TEST(IncomingMessageTest, RejectsAChunkWithItsPayloadBothInlineAndOnTheBulkChannel) {
  proto::WorkerMessage m;
  m.mutable_chunk()->set_split_id(1);
  m.mutable_chunk()->set_header("hdr");
  m.mutable_chunk()->set_payload(std::string(100, 'x'));
  m.mutable_chunk()->set_bulk_bytes(100);
  grpc::ByteBuffer buffer = Sliced(m.SerializeAsString(), 16);
  IncomingMessage in;
  EXPECT_FALSE(ParseIncoming(&buffer, &in));
}

TEST(OutgoingMessageTest, PiecesKeepTheirTensorsAliveUntilTheBufferGoes) {
  std::vector<Element> elements = Samples(1, 1000);
  std::weak_ptr<Buffer> pixels = elements[0].tensors[0].buffer();
  grpc::ByteBuffer buffer;
  {
    auto in_place = EncodeElementsInPlace(elements);
    ASSERT_TRUE(in_place.ok());
    OutgoingMessage m;
    m.in_place = true;
    m.header = in_place->header;
    m.pieces = in_place->pieces;
    ASSERT_TRUE(SerializeOutgoing(m, &buffer));
    elements.clear();
  }
  EXPECT_FALSE(pixels.expired());  // only the byte buffer holds it now
  const std::string bytes = Flatten(buffer);
  EXPECT_GT(bytes.size(), 4000u);
  buffer.Clear();
  EXPECT_TRUE(pixels.expired());
}

TEST(OutgoingMessageTest, AProtoMessageIsSerializedAsItIs) {
  OutgoingMessage m;
  m.message.mutable_opened()->set_threads(3);
  grpc::ByteBuffer buffer;
  bool own = false;
  ASSERT_TRUE(grpc::SerializationTraits<OutgoingMessage>::Serialize(m, &buffer, &own).ok());
  EXPECT_EQ(Flatten(buffer), m.message.SerializeAsString());
}

TEST(IncomingMessageTest, ParsesAChunkHoweverItIsSliced) {
  std::vector<Element> elements = Samples(2, 5000);
  auto encoded = EncodeElements(elements, Codec::kNone);
  ASSERT_TRUE(encoded.ok());
  proto::WorkerMessage m;
  m.mutable_chunk()->set_split_id(77);
  m.mutable_chunk()->set_header(encoded->header);
  m.mutable_chunk()->set_payload(encoded->payload);
  const std::string bytes = m.SerializeAsString();
  for (size_t slice : {size_t{1}, size_t{7}, size_t{4096}, bytes.size()}) {
    grpc::ByteBuffer buffer = Sliced(bytes, slice);
    IncomingMessage in;
    ASSERT_TRUE(ParseIncoming(&buffer, &in)) << slice;
    EXPECT_TRUE(in.is_chunk);
    EXPECT_EQ(in.split_id, 77u);
    EXPECT_EQ(in.header, encoded->header);
    ASSERT_NE(in.payload, nullptr);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(in.payload->data()), in.payload->size()),
              encoded->payload);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(in.payload->data()) % 64, 0u);
    auto decoded = DecodeElements(in.header, in.payload);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ((*decoded)[1].tensors[0].data<float>()[4999], 5999.0f);
  }
}

TEST(IncomingMessageTest, OtherMessagesGoThroughProtobuf) {
  proto::WorkerMessage m;
  m.mutable_split_done()->set_split_id(5);
  m.mutable_split_done()->set_delivered(31);
  grpc::ByteBuffer buffer = Sliced(m.SerializeAsString(), 3);
  IncomingMessage in;
  in.is_chunk = true;  // cleared by the parse
  ASSERT_TRUE(ParseIncoming(&buffer, &in));
  EXPECT_FALSE(in.is_chunk);
  ASSERT_TRUE(in.message.has_split_done());
  EXPECT_EQ(in.message.split_done().delivered(), 31u);
}

TEST(IncomingMessageTest, RejectsTruncatedAndGarbledChunks) {
  proto::WorkerMessage m;
  m.mutable_chunk()->set_split_id(1);
  m.mutable_chunk()->set_header("hdr");
  m.mutable_chunk()->set_payload(std::string(1000, 'x'));
  const std::string bytes = m.SerializeAsString();
  for (size_t cut : {size_t{1}, size_t{2}, size_t{10}, bytes.size() - 1}) {
    grpc::ByteBuffer buffer = Sliced(bytes.substr(0, cut), 64);
    IncomingMessage in;
    EXPECT_FALSE(ParseIncoming(&buffer, &in)) << "cut at " << cut;
  }
  std::string garbled = bytes;
  garbled[2] = static_cast<char>(0x0f);  // wire type 7 does not exist
  grpc::ByteBuffer buffer = Sliced(garbled, 64);
  IncomingMessage in;
  EXPECT_FALSE(ParseIncoming(&buffer, &in));
}

}  // namespace
}  // namespace sluice::rpc
