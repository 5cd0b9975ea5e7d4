#include "sluice/core/error_kind.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace sluice {
namespace {

constexpr char kPayloadUrl[] = "type.sluice/ErrorKind";

}  // namespace

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone:
      return "none";
    case ErrorKind::kData:
      return "data";
    case ErrorKind::kMessageLimit:
      return "message_limit";
    case ErrorKind::kDropped:
      return "dropped";
  }
  return "none";
}

Status WithKind(Status status, ErrorKind kind) {
  if (status.ok()) return status;
  if (kind == ErrorKind::kNone) {
    status.ErasePayload(kPayloadUrl);
  } else {
    status.SetPayload(kPayloadUrl, absl::Cord(std::to_string(static_cast<int32_t>(kind))));
  }
  return status;
}

ErrorKind KindOf(const Status& status) {
  const absl::optional<absl::Cord> payload = status.GetPayload(kPayloadUrl);
  if (!payload.has_value()) return ErrorKind::kNone;
  int32_t value = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &value)) return ErrorKind::kNone;
  return ErrorKindFromWire(value);
}

ErrorKind ErrorKindFromWire(int32_t value) {
  // The kinds are numbered 0..kDropped without gaps (error_kind.h).
  const bool known = value >= 0 && value <= static_cast<int32_t>(ErrorKind::kDropped);
  return known ? static_cast<ErrorKind>(value) : ErrorKind::kNone;
}

}  // namespace sluice
