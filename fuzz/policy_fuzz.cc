// Fuzzes the --policy grammar (ParsePolicy: none, auto, sluice, fastflow[:paper|:code],
// fixed:cut=K,ratio=R[,read=..][,compress=..][,spill=..]). The first byte picks the op
// count that bounds the cut (-1: unbounded). An accepted policy must parse again from its
// ToString() to the same policy.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/runtime/train.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int num_ops = data[0] % 16 - 1;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto policy = sluice::runtime::ParsePolicy(text, num_ops);
  if (!policy.ok()) return 0;
  auto again = sluice::runtime::ParsePolicy(policy->ToString(), num_ops);
  if (!again.ok() || again->ToString() != policy->ToString()) __builtin_trap();
  return 0;
}
