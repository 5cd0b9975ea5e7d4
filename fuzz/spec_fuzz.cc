// Fuzzes the pipeline spec parser (YAML and JSON: ParseSpec sniffs which). Any input must
// give a spec or an error, never a crash, and an accepted spec must survive the canonical
// round trip that spec.h promises: ParseSpec(ToCanonicalJson(s)) == s.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/pipeline/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = sluice::pipeline::ParseSpec(text, "fuzz.yaml");
  if (!spec.ok()) return 0;
  std::string canonical = sluice::pipeline::ToCanonicalJson(*spec);
  auto again = sluice::pipeline::ParseSpec(canonical, "canonical.json");
  if (!again.ok() || !(*again == *spec)) __builtin_trap();
  (void)sluice::pipeline::ToYaml(*spec);
  (void)sluice::pipeline::Fingerprint(*spec);
  return 0;
}
