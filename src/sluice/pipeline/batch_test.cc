#include "sluice/pipeline/batch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/test_util.h"

namespace sluice::pipeline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::Drain;
using testing_util::MakeElement;
using testing_util::VectorIterator;

Tensor Filled(DType dtype, Shape shape, float value) {
  Tensor t = Tensor::Empty(dtype, shape);
  FillValue(dtype, value, t.mutable_raw(), static_cast<size_t>(t.num_elements()));
  return t;
}

// Elements {id: i32[] = i, img: u8[2,3] = i}.
std::unique_ptr<Iterator> Fixed(int n) {
  Schema schema({{"id", DType::kI32, {}}, {"img", DType::kU8, {2, 3}}});
  std::vector<Element> elements;
  for (int i = 0; i < n; ++i) {
    elements.push_back(MakeElement(i, {Filled(DType::kI32, {}, i), Filled(DType::kU8, {2, 3}, i)}));
  }
  return std::make_unique<VectorIterator>(schema, elements);
}

std::unique_ptr<BatchIterator> Batch(std::unique_ptr<Iterator> input, BatchOptions options) {
  StatusOr<std::unique_ptr<BatchIterator>> it = BatchIterator::Create(std::move(input), options);
  EXPECT_TRUE(it.ok()) << it.status();
  return it.ok() ? *std::move(it) : nullptr;
}

TEST(BatchTest, StacksIntoALeadingDimension) {
  BatchOptions options;
  options.size = 4;
  auto it = Batch(Fixed(10), options);
  EXPECT_EQ(it->schema().ToString(), "{id: i32[?], img: u8[?,2,3]}");
  std::vector<Element> batches = Drain(*it);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].tensors[0].shape(), (Shape{4}));
  EXPECT_EQ(batches[0].tensors[1].shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(batches[2].tensors[1].shape(), (Shape{2, 2, 3}));  // the remainder
  int next = 0;
  for (const Element& b : batches) {
    EXPECT_EQ(b.id, b.members.front());
    for (size_t i = 0; i < b.members.size(); ++i, ++next) {
      EXPECT_EQ(b.members[i], (SampleId{0, static_cast<uint64_t>(next)}));
      EXPECT_EQ(b.tensors[0].data<int32_t>()[i], next);
      for (int k = 0; k < 6; ++k) EXPECT_EQ(b.tensors[1].data<uint8_t>()[i * 6 + k], next);
    }
  }
  EXPECT_EQ(next, 10);
  Element e;
  bool eos = false;
  ASSERT_TRUE(it->GetNext(&e, &eos).ok());
  EXPECT_TRUE(eos);
}

TEST(BatchTest, DropRemainder) {
  BatchOptions options;
  options.size = 4;
  options.drop_remainder = true;
  auto it = Batch(Fixed(10), options);
  EXPECT_EQ(it->schema().ToString(), "{id: i32[4], img: u8[4,2,3]}");
  std::vector<Element> batches = Drain(*it);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].members.back(), (SampleId{0, 7}));
  options.size = 5;
  EXPECT_EQ(Drain(*Batch(Fixed(10), options)).size(), 2u);
  EXPECT_EQ(Drain(*Batch(Fixed(3), options)).size(), 0u);
}

TEST(BatchTest, ShapeMismatchNamesFieldShapesFilesAndTheFix) {
  Schema schema({{"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}}});
  std::vector<Element> elements = {
      MakeElement(0, {Tensor::Zeros(DType::kU8, {224, 224, 3})}),
      MakeElement(1, {Tensor::Zeros(DType::kU8, {224, 224, 3})}),
      MakeElement(2, {Tensor::Zeros(DType::kU8, {200, 180, 3})}),
  };
  BatchOptions options;
  options.size = 3;
  auto it = Batch(std::make_unique<VectorIterator>(schema, elements), options);
  Element e;
  bool eos = false;
  Status s = it->GetNext(&e, &eos);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  std::string m(s.message());
  EXPECT_THAT(m, HasSubstr("'image'"));
  EXPECT_THAT(m, HasSubstr("[224,224,3]"));
  EXPECT_THAT(m, HasSubstr("[200,180,3]"));
  EXPECT_THAT(m, HasSubstr("'file0'"));
  EXPECT_THAT(m, HasSubstr("'file2'"));
  EXPECT_THAT(m, HasSubstr("padded_batch"));
  EXPECT_THAT(m, HasSubstr("resize"));
  EXPECT_EQ(it->GetNext(&e, &eos), s);  // sticky
}

TEST(BatchTest, ByteStringsOfDifferentLengthsAreNulPadded) {
  Schema schema({{"path", DType::kBytes, {kUnknownDim}}});
  std::vector<Element> elements = {MakeElement(0, {Tensor::FromBytes("a/bb.jpg")}),
                                   MakeElement(1, {Tensor::FromBytes("a/b.jpg")}),
                                   MakeElement(2, {Tensor::FromBytes("")})};
  BatchOptions options;
  options.size = 3;
  auto it = Batch(std::make_unique<VectorIterator>(schema, elements), options);
  EXPECT_EQ(it->schema().ToString(), "{path: bytes[?,?]}");
  std::vector<Element> batches = Drain(*it);
  ASSERT_EQ(batches.size(), 1u);
  const Tensor& t = batches[0].tensors[0];
  ASSERT_EQ(t.shape(), (Shape{3, 8}));
  EXPECT_EQ(t.bytes(), std::string("a/bb.jpga/b.jpg\0", 16) + std::string(8, '\0'));
}

TEST(BatchTest, InputErrorsPassThroughAndStick) {
  Schema schema({{"x", DType::kI64, {}}});
  std::vector<Element> elements = {MakeElement(0, {Tensor::Scalar(1)})};
  BatchOptions options;
  options.size = 2;
  auto it =
      Batch(std::make_unique<VectorIterator>(schema, elements, absl::DataLossError("x")), options);
  Element e;
  bool eos = false;
  EXPECT_EQ(it->GetNext(&e, &eos).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(it->GetNext(&e, &eos).code(), absl::StatusCode::kDataLoss);
}

TEST(PaddedBatchTest, PadsRaggedFieldsAndRecordsShapes) {
  Schema schema({{"seq", DType::kF32, {kUnknownDim, kUnknownDim}},
                 {"label", DType::kI64, {}},
                 {"tokens", DType::kI32, {kUnknownDim}}});
  auto seq = [](int rows, int cols, float v) { return Filled(DType::kF32, {rows, cols}, v); };
  std::vector<Element> elements = {
      MakeElement(0, {seq(1, 3, 1), Tensor::Scalar(10), Filled(DType::kI32, {2}, 7)}),
      MakeElement(1, {seq(2, 1, 2), Tensor::Scalar(11), Filled(DType::kI32, {0}, 0)}),
  };
  BatchOptions options;
  options.size = 2;
  options.padded = true;
  options.padding_value = -1;
  options.padding_values = {{"tokens", 99}};
  auto it = Batch(std::make_unique<VectorIterator>(schema, elements), options);
  EXPECT_EQ(it->schema().ToString(),
            "{seq: f32[?,?,?], label: i64[?], tokens: i32[?,?], seq_shape: i64[?,2], "
            "tokens_shape: i64[?,1]}");
  std::vector<Element> batches = Drain(*it);
  ASSERT_EQ(batches.size(), 1u);
  const Element& b = batches[0];
  ASSERT_EQ(b.tensors.size(), 5u);
  ASSERT_EQ(b.tensors[0].shape(), (Shape{2, 2, 3}));
  const float* s = b.tensors[0].data<float>();
  EXPECT_THAT(std::vector<float>(s, s + 12),
              ElementsAre(1, 1, 1, -1, -1, -1,     // member 0: 1x3, one padded row
                          2, -1, -1, 2, -1, -1));  // member 1: 2x1, padded columns
  EXPECT_THAT(std::vector<int64_t>(b.tensors[1].data<int64_t>(), b.tensors[1].data<int64_t>() + 2),
              ElementsAre(10, 11));
  ASSERT_EQ(b.tensors[2].shape(), (Shape{2, 2}));
  const int32_t* t = b.tensors[2].data<int32_t>();
  EXPECT_THAT(std::vector<int32_t>(t, t + 4), ElementsAre(7, 7, 99, 99));
  ASSERT_EQ(b.tensors[3].shape(), (Shape{2, 2}));
  const int64_t* ss = b.tensors[3].data<int64_t>();
  EXPECT_THAT(std::vector<int64_t>(ss, ss + 4), ElementsAre(1, 3, 2, 1));
  ASSERT_EQ(b.tensors[4].shape(), (Shape{2, 1}));
  EXPECT_EQ(b.tensors[4].data<int64_t>()[0], 2);
  EXPECT_EQ(b.tensors[4].data<int64_t>()[1], 0);
}

TEST(PaddedBatchTest, EqualShapesStillGetAShapeField) {
  Schema schema({{"v", DType::kU8, {kUnknownDim}}});
  std::vector<Element> elements = {MakeElement(0, {Filled(DType::kU8, {3}, 1)}),
                                   MakeElement(1, {Filled(DType::kU8, {3}, 2)})};
  BatchOptions options;
  options.size = 2;
  options.padded = true;
  std::vector<Element> batches =
      Drain(*Batch(std::make_unique<VectorIterator>(schema, elements), options));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].tensors[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(batches[0].tensors[1].shape(), (Shape{2, 1}));
}

TEST(PaddedBatchTest, HalfPrecisionPadding) {
  uint16_t h = 0;
  FillValue(DType::kF16, 1.0, &h, 1);
  EXPECT_EQ(h, 0x3c00);
  FillValue(DType::kF16, -2.0, &h, 1);
  EXPECT_EQ(h, 0xc000);
  FillValue(DType::kF16, 0.0, &h, 1);
  EXPECT_EQ(h, 0x0000);
  FillValue(DType::kF16, 65504.0, &h, 1);
  EXPECT_EQ(h, 0x7bff);
  FillValue(DType::kF16, 1e6, &h, 1);
  EXPECT_EQ(h, 0x7c00);  // overflow: infinity
  FillValue(DType::kF16, 5.960464477539063e-08, &h, 1);
  EXPECT_EQ(h, 0x0001);  // the smallest subnormal
}

// Found under UBSan: padding_value -7 (LocalExecutorTest.PaddedBatch) also pads the batch's
// bytes field, and converting -7.0 to uint8_t is undefined behaviour. Integers now convert
// as the cast op converts them.
TEST(PaddedBatchTest, IntegerPaddingIsTruncatedAndSaturated) {
  uint8_t u8 = 1;
  FillValue(DType::kU8, -7, &u8, 1);
  EXPECT_EQ(u8, 0);
  FillValue(DType::kBytes, 300.5, &u8, 1);
  EXPECT_EQ(u8, 255);
  int16_t i16 = 1;
  FillValue(DType::kI16, -1e9, &i16, 1);
  EXPECT_EQ(i16, -32768);
  int32_t i32 = 1;
  FillValue(DType::kI32, -7.9, &i32, 1);
  EXPECT_EQ(i32, -7);
  FillValue(DType::kI32, std::nan(""), &i32, 1);
  EXPECT_EQ(i32, 0);
  int64_t i64 = 1;
  FillValue(DType::kI64, 1e300, &i64, 1);
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::max());
}

TEST(BatchSchemaTest, RejectsBadOptions) {
  Schema schema({{"v", DType::kU8, {kUnknownDim}}, {"v_shape", DType::kI64, {1}}});
  BatchOptions options;
  options.size = 0;
  EXPECT_THAT(std::string(BatchSchema(schema, options).status().message()),
              HasSubstr("batch.size"));
  options.size = 2;
  EXPECT_TRUE(BatchSchema(schema, options).ok());
  options.padded = true;
  EXPECT_THAT(std::string(BatchSchema(schema, options).status().message()), HasSubstr("'v_shape'"));
  Schema plain({{"v", DType::kU8, {kUnknownDim}}});
  options.padding_values = {{"nope", 1}};
  EXPECT_THAT(std::string(BatchSchema(plain, options).status().message()),
              HasSubstr("padding_values: no field 'nope'"));
}

TEST(BatchTest, CancelStopsIt) {
  BatchOptions options;
  options.size = 2;
  auto it = Batch(Fixed(10), options);
  it->Cancel();
  Element e;
  bool eos = false;
  EXPECT_TRUE(absl::IsCancelled(it->GetNext(&e, &eos)));
}

// Elements {id: i32[] = i, img: u8[2,3]} whose img is the i-th row of one buffer holding
// 0, 1, 2, ... (samples written into their slots, core/batch_slots.h), in `order`.
std::vector<Element> InOneBuffer(const std::vector<int>& order, std::shared_ptr<Buffer>* buffer) {
  *buffer = Buffer::Allocate(order.size() * 6);
  for (size_t i = 0; i < order.size() * 6; ++i) (*buffer)->data()[i] = static_cast<uint8_t>(i);
  std::vector<Element> members;
  for (int i : order) {
    StatusOr<Tensor> img = Tensor::View(DType::kU8, {2, 3}, *buffer, static_cast<size_t>(i) * 6);
    EXPECT_TRUE(img.ok());
    members.push_back(MakeElement(i, {Filled(DType::kI32, {}, i), *img}));
  }
  return members;
}

// StackBatch of InOneBuffer(order), counting the batches stacked in place.
StatusOr<Element> StackInOneBuffer(const std::vector<int>& order, std::shared_ptr<Buffer>* buffer,
                                   std::atomic<int64_t>* in_place) {
  Schema schema({{"id", DType::kI32, {}}, {"img", DType::kU8, {2, 3}}});
  BatchOptions options;
  options.size = static_cast<int64_t>(order.size());
  options.in_place = in_place;
  return StackBatch(InOneBuffer(order, buffer), schema, options);
}

TEST(BatchTest, MembersSideBySideInOneBufferBecomeTheBatchWithoutACopy) {
  std::shared_ptr<Buffer> buffer;
  std::atomic<int64_t> in_place{0};
  StatusOr<Element> batch = StackInOneBuffer({0, 1, 2}, &buffer, &in_place);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const Tensor& img = batch->tensors[1];
  EXPECT_EQ(img.shape(), (Shape{3, 2, 3}));
  EXPECT_EQ(img.buffer(), buffer);  // the same bytes, not a copy
  EXPECT_EQ(img.offset(), 0u);
  for (int i = 0; i < 18; ++i) EXPECT_EQ(img.raw()[i], i);
  EXPECT_EQ(batch->tensors[0].data<int32_t>()[2], 2);  // the other field is stacked as ever
  EXPECT_EQ(in_place.load(), 1);
}

TEST(BatchTest, MembersOutOfTheirSlotOrderAreCopiedInTheBatchOrder) {
  std::shared_ptr<Buffer> buffer;
  std::atomic<int64_t> in_place{0};
  StatusOr<Element> batch = StackInOneBuffer({1, 0, 2}, &buffer, &in_place);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const Tensor& img = batch->tensors[1];
  EXPECT_NE(img.buffer(), buffer);
  // Member 0 is the slot-1 sample: bytes 6..11 first.
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(img.raw()[i], 6 + i);
    EXPECT_EQ(img.raw()[6 + i], i);
    EXPECT_EQ(img.raw()[12 + i], 12 + i);
  }
  EXPECT_EQ(in_place.load(), 0);
}

// Elements `order` (each a slot number) written into slots of buffers of `per_buffer` slots,
// as two map threads hand them over when one finishes out of turn; field 0 is the slot.
std::vector<Element> InSlots(const std::vector<int>& order, int per_buffer,
                             std::vector<std::shared_ptr<Buffer>>* buffers,
                             int per_epoch = 0) {
  int most = 0;
  for (int slot : order) most = std::max(most, slot + 1);
  for (int b = 0; b * per_buffer < most; ++b) {
    buffers->push_back(Buffer::Allocate(static_cast<size_t>(per_buffer) * 6));
    for (int i = 0; i < per_buffer * 6; ++i) {
      buffers->back()->data()[i] = static_cast<uint8_t>(b * per_buffer * 6 + i);
    }
  }
  std::vector<Element> out;
  for (int slot : order) {
    StatusOr<Tensor> img = Tensor::View(DType::kU8, {2, 3}, (*buffers)[slot / per_buffer],
                                        static_cast<size_t>(slot % per_buffer) * 6);
    EXPECT_TRUE(img.ok());
    out.push_back(MakeElement(slot, {Filled(DType::kI32, {}, slot), *img}));
    // The epoch: the element's place in `order` over `per_epoch` (0: all in epoch 0).
    if (per_epoch > 0) out.back().id.epoch = static_cast<uint32_t>((out.size() - 1) / per_epoch);
  }
  return out;
}

// The batches of `order` with BatchOptions::order_free: their slots (field 0) in batch order,
// each batch's image bytes checked against its slots, and how many were views.
std::vector<std::vector<int>> OrderFreeBatches(const std::vector<int>& order, int64_t size,
                                               int64_t* in_place_count, int slot_streams = 1,
                                               int per_epoch = 0) {
  std::vector<std::shared_ptr<Buffer>> buffers;
  Schema schema({{"slot", DType::kI32, {}}, {"img", DType::kU8, {2, 3}}});
  BatchOptions options;
  options.size = size;
  options.order_free = true;
  options.slot_streams = slot_streams;
  std::atomic<int64_t> in_place{0};
  options.in_place = &in_place;
  StatusOr<std::unique_ptr<BatchIterator>> it = BatchIterator::Create(
      std::make_unique<VectorIterator>(
          schema, InSlots(order, static_cast<int>(size), &buffers, per_epoch)),
      options);
  EXPECT_TRUE(it.ok());
  std::vector<std::vector<int>> out;
  for (const Element& batch : Drain(**it)) {
    std::vector<int> slots;
    for (int64_t i = 0; i < batch.tensors[0].num_elements(); ++i) {
      const int slot = batch.tensors[0].data<int32_t>()[i];
      slots.push_back(slot);
      for (int k = 0; k < 6; ++k) EXPECT_EQ(batch.tensors[1].raw()[i * 6 + k], slot * 6 + k);
    }
    out.push_back(slots);
  }
  *in_place_count = in_place.load();
  return out;
}

TEST(BatchTest, AnOrderFreeBatchIsMadeOfOneBuffersSlotsWhenASampleOvertookItsEdge) {
  // Slot 4 (the second buffer's first) overtook slots 2 and 3; 6 and 7 swapped in a buffer.
  int64_t in_place = 0;
  EXPECT_THAT(
      OrderFreeBatches({0, 1, 4, 2, 3, 5, 7, 6, 8, 9, 10, 11}, 4, &in_place),
      ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(4, 5, 6, 7), ElementsAre(8, 9, 10, 11)));
  EXPECT_EQ(in_place, 3);
}

// The batches' members, sorted, and their sizes in batch order.
std::pair<std::vector<int>, std::vector<size_t>> SeenAndSizes(
    const std::vector<std::vector<int>>& batches) {
  std::vector<int> seen;
  std::vector<size_t> sizes;
  for (const std::vector<int>& b : batches) {
    sizes.push_back(b.size());
    seen.insert(seen.end(), b.begin(), b.end());
  }
  std::sort(seen.begin(), seen.end());
  return {seen, sizes};
}

TEST(BatchTest, AnOrderFreeBatchWhoseSlotNeverComesIsCopiedAndNothingIsLost) {
  // Slot 3 was taken by a sample that was then dropped: its buffer never fills. The buffers
  // after it are whole batches, views; the three that wait for slot 3 come last (the end of
  // the stream ends their wait), and every sample comes once.
  int64_t in_place = 0;
  const std::vector<std::vector<int>> batches =
      OrderFreeBatches({0, 1, 4, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 4, &in_place);
  const auto [seen, sizes] = SeenAndSizes(batches);
  EXPECT_THAT(seen, ElementsAre(0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  EXPECT_THAT(sizes, ElementsAre(4, 4, 4, 3));
  EXPECT_THAT(batches[0], ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(batches[3], ElementsAre(0, 1, 2));
  EXPECT_EQ(in_place, 4);  // the last three too: side by side in their buffer
}

TEST(BatchTest, AnOrderFreeBatchWaitsForAHoleUntilASampleTwoEpochsLater) {
  // The same hole in a long stream of epochs of 8 samples: slots 0-2 wait until the first
  // sample of epoch 2 is read, then go in a copied batch with the oldest of the rest; the
  // buffers before it are views, and every sample comes once.
  std::vector<int> order = {0, 1, 2};
  for (int slot = 4; slot < 41; ++slot) order.push_back(slot);
  int64_t in_place = 0;
  const std::vector<std::vector<int>> batches =
      OrderFreeBatches(order, 4, &in_place, /*slot_streams=*/1, /*per_epoch=*/8);
  const auto [seen, sizes] = SeenAndSizes(batches);
  std::vector<int> expected = order;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
  // Read 17th (the first of epoch 2): slot 17. Buffers 4-7, 8-11 and 12-15 went before.
  ASSERT_GE(batches.size(), 4u);
  EXPECT_THAT(batches[0], ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(batches[2], ElementsAre(12, 13, 14, 15));
  EXPECT_THAT(batches[3], ElementsAre(0, 1, 2, 16));
  EXPECT_GE(in_place, 3);
}

TEST(BatchTest, TwoStreamsFillingBuffersOfTheirOwnMakeEveryBatchAView) {
  // The trainer's local prefix fills buffers 0 and 2, the received samples 1 and 3, and the
  // merge interleaves them sample by sample; or the received samples pause after slots 4 and
  // 5 while the local prefix fills buffers 0, 2 and 4, then go on. Every batch is one buffer,
  // a view.
  const struct {
    std::vector<int> order;
    std::vector<std::vector<int>> batches;
  } cases[] = {
      {{0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15},
       {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}},
      {{0, 4, 1, 5, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 6, 7},
       {{0, 1, 2, 3}, {8, 9, 10, 11}, {16, 17, 18, 19}, {4, 5, 6, 7}}},
  };
  for (const auto& c : cases) {
    int64_t in_place = 0;
    EXPECT_EQ(OrderFreeBatches(c.order, 4, &in_place, /*slot_streams=*/2), c.batches);
    EXPECT_EQ(in_place, 4);
  }
}

TEST(BatchTest, AStaleBufferWithLessThanABatchWaitingReadsOnForAFullBatch) {
  // Slots 0-1 wait for a buffer that never fills; buffer 4-7 goes; the first sample of epoch
  // 2 (epochs of 3), slot 8, makes them stale with only three waiting: the copy reads on to a
  // full batch, and no batch but the last is short.
  int64_t in_place = 0;
  const std::vector<std::vector<int>> batches = OrderFreeBatches(
      {0, 1, 4, 5, 6, 7, 8, 9, 10, 11}, 4, &in_place, /*slot_streams=*/1, /*per_epoch=*/3);
  const auto [seen, sizes] = SeenAndSizes(batches);
  EXPECT_THAT(seen, ElementsAre(0, 1, 4, 5, 6, 7, 8, 9, 10, 11));
  EXPECT_THAT(sizes, ElementsAre(4, 4, 2));
  EXPECT_THAT(batches[1], ElementsAre(0, 1, 8, 9));
}

TEST(BatchTest, WhatWaitsForItsBufferIsBounded) {
  // Three buffers (slots 0-1, 4-5, 8-9 of 4) that never fill while others do not complete
  // either: once more than 4 x (2 + 1) elements wait, the oldest go in a copy; every sample
  // comes once.
  std::vector<int> order;
  for (int b = 0; b < 8; ++b) {
    order.push_back(4 * b);
    order.push_back(4 * b + 1);
  }
  int64_t in_place = 0;
  const std::vector<std::vector<int>> batches = OrderFreeBatches(order, 4, &in_place);
  const auto [seen, sizes] = SeenAndSizes(batches);
  std::vector<int> expected = order;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
  ASSERT_EQ(batches.size(), 4u);
  // The first copy left when the 13th element was read: the 12 before it waited.
  EXPECT_THAT(batches[0], ElementsAre(0, 1, 4, 5));
}

TEST(BatchTest, WithoutOrderFreeTheBatchesKeepTheInputsOrder) {
  std::vector<std::shared_ptr<Buffer>> buffers;
  Schema schema({{"slot", DType::kI32, {}}, {"img", DType::kU8, {2, 3}}});
  BatchOptions options;
  options.size = 4;
  StatusOr<std::unique_ptr<BatchIterator>> it = BatchIterator::Create(
      std::make_unique<VectorIterator>(schema, InSlots({0, 1, 4, 2, 3, 5, 6, 7}, 4, &buffers)),
      options);
  ASSERT_TRUE(it.ok());
  const std::vector<Element> batches = Drain(**it);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].tensors[0].data<int32_t>()[2], 4);
  EXPECT_EQ(batches[1].tensors[0].data<int32_t>()[0], 3);
}

}  // namespace
}  // namespace sluice::pipeline
