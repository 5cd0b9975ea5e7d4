// Fuzzes the testbed scenario parser (ParseScenario; its bandwidth, latency and byte-rate
// value parsers come along) and the testbed shape derived from an accepted scenario.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/testbed/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto scenario = sluice::testbed::ParseScenario(text, "fuzz.yaml");
  if (scenario.ok()) (void)scenario->ToTestbedSpec();
  return 0;
}
