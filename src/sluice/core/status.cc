#include "sluice/core/status.h"

#include "absl/strings/cord.h"

namespace sluice {

Status Annotate(const Status& status, std::string_view context) {
  if (status.ok()) return status;
  Status out(status.code(), absl::StrCat(Av(context), ": ", status.message()));
  // The payloads (an ErrorKind, say) say what the failure is; the context does not change it.
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace sluice
