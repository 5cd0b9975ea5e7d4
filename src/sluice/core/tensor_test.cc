#include "sluice/core/tensor.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "sluice/core/element.h"

namespace sluice {
namespace {

TEST(TensorTest, BuffersAreAlignedAndShared) {
  Tensor t = Tensor::Empty(DType::kF32, {3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % Buffer::kAlignment, 0u);
  EXPECT_EQ(t.nbytes(), 60u);
  Tensor copy = t;
  EXPECT_EQ(copy.raw(), t.raw());  // a copy is a view, not a copy of bytes
  EXPECT_EQ(t.buffer().use_count(), 2);
}

TEST(TensorTest, SliceSharesBufferAndOffsetsRows) {
  Tensor t = Tensor::Empty(DType::kI32, {4, 2});
  for (int i = 0; i < 8; ++i) t.mutable_data<int32_t>()[i] = i;
  Tensor s = t.Slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.buffer().get(), t.buffer().get());
  EXPECT_EQ(s.data<int32_t>()[0], 2);
  EXPECT_EQ(s.data<int32_t>()[3], 5);
  t.mutable_data<int32_t>()[2] = 42;  // visible through the slice: same memory
  EXPECT_EQ(s.data<int32_t>()[0], 42);
}

TEST(TensorTest, CloneIsDeep) {
  Tensor t = Tensor::FromBytes("abc");
  Tensor c = t.Clone();
  EXPECT_NE(c.raw(), t.raw());
  EXPECT_TRUE(c.Equals(t));
  c.mutable_raw()[0] = 'x';
  EXPECT_FALSE(c.Equals(t));
  EXPECT_EQ(t.bytes(), "abc");
}

TEST(TensorTest, ViewRejectsOutOfBounds) {
  auto buf = Buffer::Allocate(16);
  EXPECT_TRUE(Tensor::View(DType::kF32, {4}, buf, 0).ok());
  auto bad = Tensor::View(DType::kF32, {4}, buf, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(std::string(bad.status().message()).find("does not fit"), std::string::npos);
}

TEST(TensorTest, ReshapeKeepsBytesAndChecksCount) {
  Tensor t = Tensor::Zeros(DType::kU8, {2, 6});
  auto r = t.Reshape({3, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->raw(), t.raw());
  EXPECT_FALSE(t.Reshape({5}).ok());
}

TEST(TensorTest, ForeignBufferReleasedOnce) {
  int released = 0;
  std::vector<uint8_t> storage(32, 7);
  {
    auto buf = Buffer::Wrap(storage.data(), storage.size(), [&] { ++released; });
    auto t = Tensor::View(DType::kU8, {32}, buf);
    ASSERT_TRUE(t.ok());
    Tensor s = t->Slice(4, 8);
    buf.reset();
    EXPECT_EQ(released, 0);  // the slice still holds it
    EXPECT_EQ(s.data<uint8_t>()[0], 7);
  }
  EXPECT_EQ(released, 1);
}

TEST(TensorTest, LiveBytesTracksOwnedBuffers) {
  int64_t before = Buffer::LiveBytes();
  {
    Tensor t = Tensor::Empty(DType::kF64, {1000});
    EXPECT_EQ(Buffer::LiveBytes() - before, 8000);
  }
  EXPECT_EQ(Buffer::LiveBytes(), before);
}

TEST(TensorTest, LargeBuffersAreRecycledWithinABound) {
  const size_t kBig = 8 << 20;
  const uint8_t* first;
  {
    Tensor t = Tensor::Empty(DType::kU8, {static_cast<int64_t>(kBig)});
    first = t.raw();
  }
  EXPECT_GE(Buffer::CachedBytes(), static_cast<int64_t>(kBig));
  Tensor again = Tensor::Empty(DType::kU8, {static_cast<int64_t>(kBig)});
  EXPECT_EQ(again.raw(), first);  // the same block came back: no fresh mapping
  {
    // Far more than the cache may hold: the excess goes back to the C library.
    std::vector<Tensor> many;
    for (int i = 0; i < 64; ++i) many.push_back(Tensor::Empty(DType::kU8, {int64_t{8} << 20}));
  }
  EXPECT_LE(Buffer::CachedBytes(), int64_t{256} << 20);
}

// The VmFlags line of the mapping in /proc/self/smaps that holds `address` ("" if none).
std::string VmFlagsOf(const void* address) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(TensorTest, LargeBuffersAskForHugePages) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good()) {
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  }
  // A size no other test uses, so the block is fresh rather than one the cache kept.
  Tensor big = Tensor::Empty(DType::kU8, {int64_t{26} << 20});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.raw()) % (uintptr_t{2} << 20), 0u);
  const std::string flags = VmFlagsOf(big.raw());
  ASSERT_FALSE(flags.empty());
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;  // marked MADV_HUGEPAGE
  // Small blocks are left to the C library as they were.
  Tensor small = Tensor::Empty(DType::kU8, {int64_t{256} << 10});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw()) % Buffer::kAlignment, 0u);
}

TEST(DTypeTest, ParseAndNameRoundTrip) {
  for (DType d : {DType::kU8, DType::kI16, DType::kI32, DType::kI64, DType::kF16, DType::kF32,
                  DType::kF64, DType::kBytes}) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  auto bad = ParseDType("f8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(std::string(bad.status().message()),
            "unknown dtype 'f8' (expected one of u8, i16, i32, i64, f16, f32, f64, bytes)");
}

TEST(SchemaTest, FindSetRemoveAndMatch) {
  Schema s({{"path", DType::kBytes, {kUnknownDim}}, {"label", DType::kI64, {}}});
  EXPECT_EQ(s.IndexOf("label"), 1);
  auto missing = s.Find("image");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(std::string(missing.status().message()),
            "no field 'image' (the element has: path, label)");
  int i = s.Set({"image", DType::kU8, {kUnknownDim, kUnknownDim, 3}});
  EXPECT_EQ(i, 2);
  EXPECT_TRUE(s.Matches(2, Tensor::Empty(DType::kU8, {10, 20, 3})));
  EXPECT_FALSE(s.Matches(2, Tensor::Empty(DType::kU8, {10, 20, 1})));
  EXPECT_FALSE(s.Matches(2, Tensor::Empty(DType::kF32, {10, 20, 3})));
  EXPECT_EQ(s.ToString(), "{path: bytes[?], label: i64[], image: u8[?,?,3]}");
  s.Remove("path");
  EXPECT_EQ(s.IndexOf("image"), 1);
}

}  // namespace
}  // namespace sluice
