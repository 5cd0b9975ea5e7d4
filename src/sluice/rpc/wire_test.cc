#include "sluice/rpc/wire.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/rpc/compress.h"

namespace sluice::rpc {
namespace {

// A tensor of `dtype` and `shape` whose bytes are a pattern depending on `seed`.
Tensor Patterned(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::Empty(dtype, std::move(shape));
  for (size_t i = 0; i < t.nbytes(); ++i) t.mutable_raw()[i] = static_cast<uint8_t>(i * 7 + seed);
  return t;
}

void ExpectSameElements(const std::vector<Element>& a, const std::vector<Element>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].origin, b[i].origin);
    EXPECT_EQ(a[i].members, b[i].members);
    const ImageRegion& ra = a[i].decoded_region;
    const ImageRegion& rb = b[i].decoded_region;
    EXPECT_EQ(std::make_tuple(ra.full_height, ra.full_width, ra.x, ra.y, ra.width, ra.height),
              std::make_tuple(rb.full_height, rb.full_width, rb.x, rb.y, rb.width, rb.height));
    ASSERT_EQ(a[i].tensors.size(), b[i].tensors.size());
    for (size_t t = 0; t < a[i].tensors.size(); ++t) {
      EXPECT_TRUE(a[i].tensors[t].Equals(b[i].tensors[t]))
          << a[i].tensors[t].DebugString() << " vs " << b[i].tensors[t].DebugString();
    }
  }
}

std::vector<Element> EveryDTypeAndRank() {
  const DType dtypes[] = {DType::kU8,  DType::kI16, DType::kI32, DType::kI64,
                          DType::kF16, DType::kF32, DType::kF64, DType::kBytes};
  const Shape shapes[] = {{}, {5}, {3, 4}, {2, 3, 5}, {2, 1, 3, 2}, {0, 3}};
  std::vector<Element> out;
  int seed = 0;
  for (DType dtype : dtypes) {
    Element e;
    e.id = {static_cast<uint32_t>(seed % 3), static_cast<uint64_t>(1000 + seed)};
    e.origin = absl::StrCat("data/class_", seed, "/img.jpg");
    for (const Shape& shape : shapes) e.tensors.push_back(Patterned(dtype, shape, ++seed));
    out.push_back(std::move(e));
  }
  return out;
}

TEST(WireTest, RoundTripsEveryDTypeAndRank) {
  std::vector<Element> elements = EveryDTypeAndRank();
  auto encoded = EncodeElements(elements);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  EXPECT_EQ(encoded->raw_payload_bytes, RawPayloadSize(elements));
  auto decoded = DecodeElements(encoded->header, std::move(encoded->payload));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameElements(elements, *decoded);
}

TEST(WireTest, RoundTripsEmptyGroupsAndElementsWithoutTensors) {
  auto none = EncodeElements({});
  ASSERT_TRUE(none.ok());
  auto decoded_none = DecodeElements(none->header, none->payload);
  ASSERT_TRUE(decoded_none.ok()) << decoded_none.status();
  EXPECT_TRUE(decoded_none->empty());

  std::vector<Element> bare(2);
  bare[0].id = {1, 2};
  bare[1].id = {3, 4};
  bare[1].tensors.push_back(Tensor::Empty(DType::kF32, {0}));
  auto encoded = EncodeElements(bare);
  ASSERT_TRUE(encoded.ok());
  auto decoded = DecodeElements(encoded->header, encoded->payload);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameElements(bare, *decoded);
}

TEST(WireTest, PreservesBatchMembersRegionAndOrigin) {
  Element batch;
  batch.id = {2, 10};
  batch.members = {{2, 10}, {2, 3}, {2, 77}};
  batch.origin = "a/b/c.jpg";
  batch.decoded_region = {480, 640, 16, 32, 320, 240};
  batch.tensors.push_back(Patterned(DType::kF32, {3, 4, 4, 3}, 1));
  batch.tensors.push_back(Patterned(DType::kI64, {3}, 2));
  auto encoded = EncodeElements({batch});
  ASSERT_TRUE(encoded.ok());
  auto decoded = DecodeElements(encoded->header, encoded->payload);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameElements({batch}, *decoded);
}

TEST(WireTest, DecodedTensorsPointIntoTheReceivedPayload) {
  std::vector<Element> elements = EveryDTypeAndRank();
  auto encoded = EncodeElements(elements);
  ASSERT_TRUE(encoded.ok());
  std::string payload = std::move(encoded->payload);
  const uint8_t* begin = reinterpret_cast<const uint8_t*>(payload.data());
  const uint8_t* end = begin + payload.size();
  auto decoded = DecodeElements(encoded->header, std::move(payload));
  ASSERT_TRUE(decoded.ok());
  int checked = 0;
  for (const Element& e : *decoded) {
    for (const Tensor& t : e.tensors) {
      if (t.nbytes() == 0) continue;
      EXPECT_GE(t.raw(), begin);
      EXPECT_LE(t.raw() + t.nbytes(), end);
      EXPECT_EQ((t.raw() - begin) % kWireAlignment, 0u);
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
  // The payload outlives the decoded elements' other copies: views keep it alive.
  Tensor kept = (*decoded)[0].tensors[1];
  decoded->clear();
  EXPECT_TRUE(kept.Equals(elements[0].tensors[1]));
}

// A payload read straight into where its tensors stay (the receive path's landing in batch
// slots): field 2's tensors into the tensors `place` hands out, the rest into one buffer. The
// elements equal the decoded ones, every byte is read once and in order, and a read that
// fails is the error returned. A compressed payload does not land so.
TEST(WireTest, ReceivedTensorsLandWherePlacedAndEqualTheDecodedOnes) {
  const std::vector<Element> elements = EveryDTypeAndRank();
  auto encoded = EncodeElements(elements);
  ASSERT_TRUE(encoded.ok());
  auto layout = DecodeLayout(encoded->header);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(LandsInPlace(*layout));
  const std::string payload = encoded->payload;
  size_t at = 0;
  std::vector<const uint8_t*> read_into_slots;  // where `read` was told it writes a slot
  const auto read = [&](uint8_t* to, size_t n, bool slot) -> Status {
    if (slot) read_into_slots.push_back(to);
    if (n > payload.size() - at) return absl::UnavailableError("the payload ended");
    std::memcpy(to, payload.data() + at, n);
    at += n;
    return absl::OkStatus();
  };
  std::vector<const uint8_t*> given;
  const auto place = [&](int field, DType dtype, const Shape& shape) -> std::optional<Tensor> {
    if (field != 2 || dtype == DType::kBytes) return std::nullopt;
    Tensor t = Tensor::Empty(dtype, shape);
    given.push_back(t.raw());
    return t;
  };
  auto got = ReceiveElements(*layout, read, place);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(at, payload.size());
  ExpectSameElements(elements, *got);
  ASSERT_EQ(given.size(), elements.size() - 1);  // every dtype but bytes
  for (size_t i = 0; i < given.size(); ++i) EXPECT_EQ((*got)[i].tensors[2].raw(), given[i]);
  // The reads into slots, and only those, say so (a ring copies them past the cache).
  EXPECT_EQ(read_into_slots, given);

  // The channel failing halfway: its error, as it is.
  at = payload.size() / 2;
  auto cut_short = ReceiveElements(*layout, read, place);
  ASSERT_FALSE(cut_short.ok());
  EXPECT_THAT(std::string(cut_short.status().message()), ::testing::HasSubstr("payload ended"));

  auto compressed = EncodeElements(elements, Codec::kLz4);
  ASSERT_TRUE(compressed.ok());
  auto compressed_layout = DecodeLayout(compressed->header);
  ASSERT_TRUE(compressed_layout.ok());
  EXPECT_FALSE(LandsInPlace(*compressed_layout));
}

// Tensors in shared slots (rpc/slot_arena.h) travel as the slot's name: no payload bytes, the
// dtype's flag and the slot's offset in the header. ReceiveElements hands each to `claim`
// before reading, reads only the rest, and gives the claimed tensors back in their place;
// without `claim`, and in DecodeElements, such a header is DataLoss.
TEST(WireTest, TensorsInSharedSlotsTravelAsTheirSlotsName) {
  std::vector<Element> elements(3);
  std::vector<Tensor> big;  // what the worker wrote into its slots
  for (int i = 0; i < 3; ++i) {
    elements[i].id = {0, static_cast<uint64_t>(i)};
    elements[i].origin = "s" + std::to_string(i);
    big.push_back(Patterned(DType::kF32, {4, 8}, i));
    elements[i].tensors = {big.back(), Patterned(DType::kI64, {}, 10 + i)};
  }
  // The big tensors are "in slots" at offsets 4096 + 128 i.
  const SharedSlotOffset shared = [&](const Tensor& t) -> std::optional<uint64_t> {
    for (size_t i = 0; i < big.size(); ++i) {
      if (t.raw() == big[i].raw()) return 4096 + 128 * i;
    }
    return std::nullopt;
  };
  auto encoded = EncodeElementsInPlace(elements, shared);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  // Only the three labels are in the payload: 8 bytes each, 64-byte aligned.
  EXPECT_EQ(encoded->raw_payload_bytes, 2 * 64 + 8u);
  auto layout = DecodeLayout(encoded->header);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(NamesSharedSlots(*layout));
  EXPECT_TRUE(LandsInPlace(*layout));
  ASSERT_TRUE(layout->elements[1].tensors[0].shared);
  EXPECT_EQ(layout->elements[1].tensors[0].offset, 4096 + 128u);
  EXPECT_FALSE(layout->elements[1].tensors[1].shared);

  const std::string payload = encoded->FlattenPayload();
  size_t at = 0;
  const auto read = [&](uint8_t* to, size_t n, bool) -> Status {
    if (n > payload.size() - at) return absl::UnavailableError("the payload ended");
    std::memcpy(to, payload.data() + at, n);
    at += n;
    return absl::OkStatus();
  };
  const auto nowhere = [](int, DType, const Shape&) -> std::optional<Tensor> {
    return std::nullopt;
  };
  std::vector<uint64_t> claimed;
  const auto claim = [&](const TensorLayout& t) -> StatusOr<Tensor> {
    claimed.push_back(t.offset);
    return big[(t.offset - 4096) / 128];  // the trainer's view of the slot
  };
  auto got = ReceiveElements(*layout, read, nowhere, claim);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(at, payload.size());
  EXPECT_EQ(claimed, (std::vector<uint64_t>{4096, 4224, 4352}));
  ExpectSameElements(elements, *got);
  EXPECT_EQ((*got)[2].tensors[0].raw(), big[2].raw()) << "a view of the slot, not a copy";

  // A claim refused is the error; no claim at all, or the whole-payload decoder: DataLoss.
  at = 0;
  auto refused = ReceiveElements(*layout, read, nowhere, [](const TensorLayout&) -> StatusOr<Tensor> {
    return absl::DataLossError("shared slot at byte 4096: named twice");
  });
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("named twice"));
  at = 0;
  auto unclaimed = ReceiveElements(*layout, read, nowhere);
  EXPECT_TRUE(absl::IsDataLoss(unclaimed.status()));
  EXPECT_THAT(std::string(unclaimed.status().message()), ::testing::HasSubstr("shared slot"));
  auto decoded = DecodeElements(encoded->header, payload);
  EXPECT_TRUE(absl::IsDataLoss(decoded.status()));
  EXPECT_THAT(std::string(decoded.status().message()), ::testing::HasSubstr("shared slot"));
}

// A shared slot's shape is bounded by kWireMaxSharedBytes, not by the payload, and an unknown
// dtype under the flag is still refused.
TEST(WireTest, SharedSlotHeadersAreCheckedLikeAnyOther) {
  Element e;
  Tensor t = Patterned(DType::kU8, {64}, 1);
  e.tensors = {t};
  auto encoded = EncodeElementsInPlace({e}, [](const Tensor&) { return uint64_t{64}; });
  ASSERT_TRUE(encoded.ok());
  std::string header = encoded->header;
  // The tensor record follows the fixed fields and the element record: its dtype byte is the
  // one with the flag set.
  const size_t dtype_at = header.find(static_cast<char>(0x80 | static_cast<uint8_t>(DType::kU8)),
                                      24);
  ASSERT_NE(dtype_at, std::string::npos);
  std::string unknown = header;
  unknown[dtype_at] = static_cast<char>(0x80 | 0x7F);
  EXPECT_THAT(std::string(DecodeLayout(unknown).status().message()),
              ::testing::HasSubstr("unknown dtype"));
  std::string huge = header;
  const int64_t dim = int64_t{1} << 41;  // over kWireMaxSharedBytes
  std::memcpy(&huge[dtype_at + 2], &dim, 8);
  EXPECT_THAT(std::string(DecodeLayout(huge).status().message()),
              ::testing::HasSubstr("does not match"));
}

class WireCodecTest : public testing::TestWithParam<Codec> {};

TEST_P(WireCodecTest, CompressedRoundTrip) {
  std::vector<Element> elements = EveryDTypeAndRank();
  Element big;
  big.id = {0, 9};
  big.tensors.push_back(Tensor::Zeros(DType::kU8, {256, 256, 3}));
  elements.push_back(big);
  auto encoded = EncodeElements(elements, GetParam());
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  if (GetParam() != Codec::kNone) {
    EXPECT_LT(encoded->payload.size(), encoded->raw_payload_bytes);
  }
  auto decoded = DecodeElements(encoded->header, encoded->payload);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameElements(elements, *decoded);
}

TEST_P(WireCodecTest, CompressDecompressRoundTrip) {
  std::string input;
  for (int i = 0; i < 100000; ++i) input.push_back(static_cast<char>((i / 10) % 251));
  auto compressed = Compress(GetParam(), input);
  ASSERT_TRUE(compressed.ok());
  std::string out(input.size(), '\0');
  ASSERT_TRUE(
      Decompress(GetParam(), *compressed, reinterpret_cast<uint8_t*>(out.data()), out.size()).ok());
  EXPECT_EQ(out, input);
  // A wrong raw size is rejected, not silently truncated or overrun.
  std::string small(input.size() - 1, '\0');
  EXPECT_FALSE(
      Decompress(GetParam(), *compressed, reinterpret_cast<uint8_t*>(small.data()), small.size())
          .ok());
}

INSTANTIATE_TEST_SUITE_P(Codecs, WireCodecTest,
                         testing::Values(Codec::kNone, Codec::kLz4, Codec::kZstd),
                         [](const testing::TestParamInfo<Codec>& info) {
                           return std::string(CodecName(info.param));
                         });

TEST(CompressTest, CorruptFramesAreDataLoss) {
  std::string input(5000, 'x');
  for (Codec codec : {Codec::kLz4, Codec::kZstd}) {
    auto compressed = Compress(codec, input);
    ASSERT_TRUE(compressed.ok());
    std::string garbled = *compressed;
    for (size_t i = 0; i < garbled.size(); i += 3) garbled[i] = static_cast<char>(~garbled[i]);
    std::string out(input.size(), '\0');
    Status s = Decompress(codec, garbled, reinterpret_cast<uint8_t*>(out.data()), out.size());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << CodecName(codec) << ": " << s;
  }
  EXPECT_TRUE(ParseCodec("zstd").ok());
  EXPECT_EQ(ParseCodec("gzip").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, RejectsEveryTruncation) {
  std::vector<Element> elements = EveryDTypeAndRank();
  elements[1].members = {{0, 1}, {0, 2}};
  auto encoded = EncodeElements(elements);
  ASSERT_TRUE(encoded.ok());
  for (size_t n = 0; n < encoded->header.size(); ++n) {
    auto decoded = DecodeElements(std::string_view(encoded->header).substr(0, n), encoded->payload);
    ASSERT_FALSE(decoded.ok()) << "header cut at " << n;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  }
  // A payload shorter or longer than the header says.
  std::string short_payload = encoded->payload.substr(0, encoded->payload.size() - 1);
  EXPECT_FALSE(DecodeElements(encoded->header, short_payload).ok());
  EXPECT_FALSE(DecodeElements(encoded->header, encoded->payload + "x").ok());
}

TEST(WireTest, RejectsGarbledHeadersWithoutCrashing) {
  std::vector<Element> elements = EveryDTypeAndRank();
  auto encoded = EncodeElements(elements);
  ASSERT_TRUE(encoded.ok());
  // Flip every byte in turn: each result is either a clean error or a decode whose
  // tensors all lie inside the payload (a flipped byte in pixel-free fields, e.g. origin).
  int rejected = 0;
  for (size_t i = 0; i < encoded->header.size(); ++i) {
    std::string header = encoded->header;
    header[i] = static_cast<char>(header[i] ^ 0xA5);
    auto decoded = DecodeElements(header, encoded->payload);
    if (!decoded.ok()) {
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << decoded.status();
      ++rejected;
      continue;
    }
    for (const Element& e : *decoded) {
      for (const Tensor& t : e.tensors) {
        ASSERT_LE(t.offset() + t.nbytes(), t.buffer()->size());
      }
    }
  }
  EXPECT_GT(rejected, static_cast<int>(encoded->header.size() / 2));

  auto bad_magic = DecodeElements("XXXX" + encoded->header.substr(4), encoded->payload);
  EXPECT_THAT(std::string(bad_magic.status().message()), testing::HasSubstr("bad magic"));
  EXPECT_FALSE(DecodeElements("", "").ok());
  EXPECT_FALSE(DecodeElements(encoded->header + "trailing", encoded->payload).ok());
}

TEST(WireTest, RejectsHugeAnnouncedSizes) {
  Element e;
  e.tensors.push_back(Tensor::Zeros(DType::kF32, {4}));
  auto encoded = EncodeElements({e}, Codec::kLz4);
  ASSERT_TRUE(encoded.ok());
  DecodeLimits limits;
  limits.max_raw_payload_bytes = 8;
  auto decoded = DecodeElements(encoded->header, encoded->payload, limits);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(std::string(decoded.status().message()), testing::HasSubstr("over the limit"));
}

// Found by fuzz/wire_fuzz.cc (fuzz/regressions/wire/zero_dim_overflow): a tensor with a zero
// dimension has no bytes, so its other dimensions passed every size check, and computing its
// element count overflowed int64 (undefined behaviour) before the view was made.
TEST(WireTest, RejectsDimensionsWhoseProductOverflows) {
  std::string header("SLW1", 4);
  auto put = [&header](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) header.push_back(static_cast<char>(v >> (8 * i)));
  };
  put(1, 1);  // version
  put(0, 1);  // codec: none
  put(0, 2);  // reserved
  put(0, 8);  // raw payload size
  put(1, 4);  // one element:
  put(0, 4);  //   epoch
  put(0, 8);  //   index
  put(0, 4);  //   origin length
  put(0, 4);  //   member count
  for (int i = 0; i < 6; ++i) put(0, 4);  // decoded region
  put(1, 4);  //   one tensor:
  put(static_cast<uint8_t>(DType::kU8), 1);
  put(3, 1);  //     rank
  put(uint64_t{1} << 40, 8);
  put(uint64_t{1} << 40, 8);
  put(0, 8);
  put(0, 8);  //     offset
  put(0, 8);  //     length
  auto decoded = DecodeElements(header, std::string());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(decoded.status().message()),
              testing::HasSubstr("element 0 tensor 0: dimension 1 (1099511627776) overflows"));

  // The same shape with a product that fits is a valid empty tensor.
  header.replace(header.size() - 40, 8, std::string("\x01\0\0\0\0\0\0\0", 8));
  decoded = DecodeElements(header, std::string());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ((*decoded)[0].tensors[0].shape(), (Shape{1, int64_t{1} << 40, 0}));
}

}  // namespace
}  // namespace sluice::rpc
