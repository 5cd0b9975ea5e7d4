// The generic built-in ops (file reading, dtype casts, one-hot labels): one OpDef per op,
// gathered by RegisterGenericOps() (registry.h). Every op is immutable after its factory
// returns; Apply() is safe to call from any thread.
#ifndef SLUICE_OPS_GENERIC_GENERIC_OPS_H_
#define SLUICE_OPS_GENERIC_GENERIC_OPS_H_

#include "sluice/ops/registry.h"

namespace sluice::ops {

OpDef ReadFileOpDef();  // read_file: `path` (file name) -> adds `data` (its bytes)
OpDef CastOpDef();      // cast: a numeric field to another dtype
OpDef OneHotOpDef();    // one_hot: an integer label -> a one-hot vector

// The numeric dtypes a `dtype` argument may name.
const std::vector<std::string>& NumericDTypeNames();

// Aborts with a message if `status` is not OK: registering the built-in ops cannot fail
// unless the table itself is wrong.
void CheckRegistered(const Status& status);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_GENERIC_GENERIC_OPS_H_
