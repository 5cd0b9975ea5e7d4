#include "sluice/ops/generic/generic_ops.h"

#include <cstdio>
#include <cstdlib>

namespace sluice::ops {

const std::vector<std::string>& NumericDTypeNames() {
  static const std::vector<std::string> names = {"u8", "i16", "i32", "i64", "f16", "f32", "f64"};
  return names;
}

void CheckRegistered(const Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "sluice: built-in op table is inconsistent: %s\n",
               std::string(status.message()).c_str());
  std::abort();
}

void RegisterGenericOps(Registry* registry) {
  CheckRegistered(registry->Register(ReadFileOpDef()));
  CheckRegistered(registry->Register(CastOpDef()));
  CheckRegistered(registry->Register(OneHotOpDef()));
}

}  // namespace sluice::ops
