#include "sluice/core/status.h"

namespace sluice {

Status Annotate(const Status& status, std::string_view context) {
  if (status.ok()) return status;
  return Status(status.code(), absl::StrCat(Av(context), ": ", status.message()));
}

}  // namespace sluice
