// Payload compression for the worker protocol: lz4 (fast, modest ratio) and zstd (slower,
// better ratio), as whole-buffer frames. The wire header records the codec and the raw
// size, so decompression writes straight into a buffer of the right size and checks that
// the frame fills it exactly. Pure functions, thread-safe.
#ifndef SLUICE_RPC_COMPRESS_H_
#define SLUICE_RPC_COMPRESS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/core/placement.h"
#include "sluice/core/status.h"

namespace sluice::rpc {

// The codecs are sluice::Codec (core/placement.h), whose values the wire header stores.

// Compresses `input` with `codec` (kNone: a copy). Fails only on inputs over the codec's
// size limit (lz4: about 2 GB).
StatusOr<std::string> Compress(Codec codec, std::string_view input);

// Decompresses `input` into exactly `raw_size` bytes at `out`. DataLoss when the frame is
// corrupt, or decodes to more or fewer than `raw_size` bytes.
Status Decompress(Codec codec, std::string_view input, uint8_t* out, size_t raw_size);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_COMPRESS_H_
