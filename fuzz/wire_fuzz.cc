// Fuzzes the wire decoder (DecodeElements) a worker's and a trainer's messages go through,
// and the receive path that reads a payload straight into batch slots (DecodeLayout,
// LandsInPlace, ReceiveElements) with every even field placed in a tensor of its own.
// Input: u32 little-endian header length, the header, then the payload (what
// fuzz_make_wire_seeds writes). Every decoded tensor is read end to end, so a view that
// reached out of its buffer shows up under ASan.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/rpc/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t header_size = uint32_t{data[0]} | uint32_t{data[1]} << 8 | uint32_t{data[2]} << 16 |
                         uint32_t{data[3]} << 24;
  data += 4;
  size -= 4;
  if (header_size > size) header_size = static_cast<uint32_t>(size);
  std::string_view header(reinterpret_cast<const char*>(data), header_size);
  std::string payload(reinterpret_cast<const char*>(data) + header_size, size - header_size);
  sluice::rpc::DecodeLimits limits;
  limits.max_raw_payload_bytes = size_t{64} << 20;
  volatile uint8_t sink = 0;
  const auto read_all = [&sink](const std::vector<sluice::Element>& elements) {
    for (const auto& element : elements) {
      for (const auto& tensor : element.tensors) {
        const uint8_t* bytes = tensor.raw();
        for (size_t i = 0; i < tensor.nbytes(); ++i) sink = sink ^ bytes[i];
      }
    }
  };
  auto layout = sluice::rpc::DecodeLayout(header, limits);
  if (layout.ok() && sluice::rpc::LandsInPlace(*layout) && layout->raw_size <= payload.size()) {
    size_t at = 0;
    auto landed = sluice::rpc::ReceiveElements(
        *layout,
        [&](uint8_t* to, size_t n, bool /*slot*/) -> sluice::Status {
          if (n > payload.size() - at) return absl::UnavailableError("payload ended");
          std::memcpy(to, payload.data() + at, n);
          at += n;
          return absl::OkStatus();
        },
        [](int field, sluice::DType dtype,
           const sluice::Shape& shape) -> std::optional<sluice::Tensor> {
          if (field % 2 != 0 || dtype == sluice::DType::kBytes) return std::nullopt;
          return sluice::Tensor::Empty(dtype, shape);
        });
    if (landed.ok()) read_all(*landed);
  }
  auto elements = sluice::rpc::DecodeElements(header, std::move(payload), limits);
  if (elements.ok()) read_all(*elements);
  return 0;
}
