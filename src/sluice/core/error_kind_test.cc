#include "sluice/core/error_kind.h"

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(ErrorKindTest, TravelsWithTheStatusNotItsMessage) {
  const Status data = WithKind(absl::InvalidArgumentError("no ops here"), ErrorKind::kData);
  EXPECT_EQ(KindOf(data), ErrorKind::kData);
  EXPECT_EQ(data.message(), "no ops here");
  // A message that names an op is not a data error by its wording.
  EXPECT_EQ(KindOf(absl::InvalidArgumentError("ops[1].decode_jpeg: bad")), ErrorKind::kNone);
  // Context added on the way keeps the kind.
  const Status annotated = Annotate(data, "worker 10.0.0.2:7070");
  EXPECT_EQ(annotated.message(), "worker 10.0.0.2:7070: no ops here");
  EXPECT_EQ(KindOf(annotated), ErrorKind::kData);
  // Replaced, removed, and never on an OK status.
  EXPECT_EQ(KindOf(WithKind(data, ErrorKind::kMessageLimit)), ErrorKind::kMessageLimit);
  EXPECT_EQ(KindOf(WithKind(data, ErrorKind::kNone)), ErrorKind::kNone);
  EXPECT_TRUE(WithKind(absl::OkStatus(), ErrorKind::kData).ok());
  EXPECT_EQ(KindOf(absl::OkStatus()), ErrorKind::kNone);
}

TEST(ErrorKindTest, WireValuesThisBuildDoesNotKnowReadAsNone) {
  EXPECT_EQ(ErrorKindFromWire(1), ErrorKind::kData);
  EXPECT_EQ(ErrorKindFromWire(2), ErrorKind::kMessageLimit);
  EXPECT_EQ(ErrorKindFromWire(3), ErrorKind::kDropped);
  EXPECT_EQ(ErrorKindFromWire(0), ErrorKind::kNone);
  EXPECT_EQ(ErrorKindFromWire(99), ErrorKind::kNone);
  EXPECT_EQ(ErrorKindFromWire(-1), ErrorKind::kNone);
  EXPECT_STREQ(ErrorKindName(ErrorKind::kMessageLimit), "message_limit");
}

}  // namespace
}  // namespace sluice
