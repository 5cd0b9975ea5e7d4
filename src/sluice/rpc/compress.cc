#include "sluice/rpc/compress.h"

#include <lz4.h>
#include <zstd.h>

#include <cstring>
#include <limits>

namespace sluice::rpc {
namespace {

// zstd level 1 keeps compression within a few times lz4's CPU cost; the policy picks
// zstd only where the link, not the CPU, is the bottleneck.
constexpr int kZstdLevel = 1;

}  // namespace

StatusOr<std::string> Compress(Codec codec, std::string_view input) {
  switch (codec) {
    case Codec::kNone:
      return std::string(input);
    case Codec::kLz4: {
      if (input.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "lz4: input of ", input.size(), " bytes is over the limit of ", LZ4_MAX_INPUT_SIZE));
      }
      const int bound = LZ4_compressBound(static_cast<int>(input.size()));
      std::string out(static_cast<size_t>(bound), '\0');
      const int n =
          LZ4_compress_default(input.data(), out.data(), static_cast<int>(input.size()), bound);
      if (n <= 0 && !input.empty()) return absl::InternalError("lz4: compression failed");
      out.resize(static_cast<size_t>(n));
      return out;
    }
    case Codec::kZstd: {
      std::string out(ZSTD_compressBound(input.size()), '\0');
      const size_t n =
          ZSTD_compress(out.data(), out.size(), input.data(), input.size(), kZstdLevel);
      if (ZSTD_isError(n)) {
        return absl::InternalError(absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
      }
      out.resize(n);
      return out;
    }
  }
  return absl::InvalidArgumentError("unknown codec");
}

Status Decompress(Codec codec, std::string_view input, uint8_t* out, size_t raw_size) {
  switch (codec) {
    case Codec::kNone:
      if (input.size() != raw_size) {
        return absl::DataLossError(
            absl::StrCat("payload is ", input.size(), " bytes, the header says ", raw_size));
      }
      if (raw_size > 0) std::memcpy(out, input.data(), raw_size);
      return absl::OkStatus();
    case Codec::kLz4: {
      constexpr size_t kMax = static_cast<size_t>(std::numeric_limits<int>::max());
      if (input.size() > kMax || raw_size > kMax) {
        return absl::DataLossError("lz4: frame too large");
      }
      if (raw_size == 0 && input.size() <= 1) return absl::OkStatus();
      const int n = LZ4_decompress_safe(input.data(), reinterpret_cast<char*>(out),
                                        static_cast<int>(input.size()), static_cast<int>(raw_size));
      if (n < 0) return absl::DataLossError("lz4: corrupt compressed payload");
      if (static_cast<size_t>(n) != raw_size) {
        return absl::DataLossError(
            absl::StrCat("lz4: payload decompressed to ", n, " bytes, the header says ", raw_size));
      }
      return absl::OkStatus();
    }
    case Codec::kZstd: {
      const unsigned long long content = ZSTD_getFrameContentSize(input.data(), input.size());
      if (content == ZSTD_CONTENTSIZE_ERROR) {
        return absl::DataLossError("zstd: corrupt compressed payload");
      }
      if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != raw_size) {
        return absl::DataLossError(
            absl::StrCat("zstd: payload holds ", content, " bytes, the header says ", raw_size));
      }
      const size_t n = ZSTD_decompress(out, raw_size, input.data(), input.size());
      if (ZSTD_isError(n)) {
        return absl::DataLossError(absl::StrCat("zstd: ", ZSTD_getErrorName(n)));
      }
      if (n != raw_size) {
        return absl::DataLossError(absl::StrCat("zstd: payload decompressed to ", n,
                                                " bytes, the header says ", raw_size));
      }
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(
      absl::StrCat("unknown codec ", static_cast<int>(codec), " in the header"));
}

}  // namespace sluice::rpc
