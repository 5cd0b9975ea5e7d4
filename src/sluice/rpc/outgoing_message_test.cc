// A chunk serialized in place is byte for byte the WorkerMessage protobuf would write, so
// the trainer parses it unchanged, and the tensors it points into stay alive until gRPC
// lets go of the buffer.
#include "sluice/rpc/outgoing_message.h"

#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

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
    if (floats > 0) EXPECT_EQ((*decoded)[2].tensors[0].data<float>()[floats - 1], 2000.0f + floats - 1);
  }
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

}  // namespace
}  // namespace sluice::rpc
