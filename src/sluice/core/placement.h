// Placement: where and how much of a pipeline runs where. The one vocabulary of offloading,
// shared by the planners (policy/), the wire (rpc/), the Loader (runtime/), the CLI and
// Python: the cut, the fraction of the samples the workers take and how it is split between
// them, how a worker gets the file, how the way back is compressed, and who spills over.
//
// It has one spelling in text, the `fixed:` policy of `sluice train --policy`:
//
//   fixed:cut=K,ratio=R[,read=local|remote][,compress=none|lz4|zstd][,spill=all|workers]
//        [,shares=a/b/...]
//
// (K an op count or `batch`, R in [0, 1], keys in any order, each once), printed back in one
// canonical form, and one JSON form (the fields of the plan in `--json` reports and Python's
// `report()`). Validation against a pipeline is separate (ValidatePlacement), so a placement
// can be parsed before the pipeline is known.
//
// Plain values and pure functions; safe to copy and call from any thread.
#ifndef SLUICE_CORE_PLACEMENT_H_
#define SLUICE_CORE_PLACEMENT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/core/status.h"

namespace sluice {

// The cut "after batch": every op and the batching run where a sample is assigned.
inline constexpr int kCutAfterBatch = -1;

// How a worker gets a sample's file.
enum class ReadMode : uint8_t {
  kRemoteRead = 0,  // the worker reads the file itself (paths mapped under its --data-root)
  kLocalRead = 1,   // the trainer runs ops[0] (read_file) and streams the bytes to the worker
};

// How a worker compresses what it sends back. Stored in the wire header as one byte: the
// values are part of the format.
enum class Codec : uint8_t { kNone = 0, kLz4 = 1, kZstd = 2 };

// "remote_read" / "local_read" (the JSON spelling; the policy string says remote / local).
const char* ReadModeName(ReadMode mode);
// "none", "lz4", "zstd".
const char* CodecName(Codec codec);
// The names above (for messages and test output).
std::ostream& operator<<(std::ostream& os, ReadMode mode);
std::ostream& operator<<(std::ostream& os, Codec codec);
// "batch" for kCutAfterBatch, else the number.
std::string CutName(int cut);
// Inverses: "remote_read" or "remote", "local_read" or "local"; "none", "lz4", "zstd".
// InvalidArgument listing the choices otherwise.
StatusOr<ReadMode> ParseReadMode(std::string_view name);
StatusOr<Codec> ParseCodec(std::string_view name);

struct Placement {
  int cut = 0;       // ops [0, cut) run where a sample is assigned; kCutAfterBatch: all + batch
  double ratio = 0;  // fraction of the samples the workers take, in [0, 1]
  // Relative shares of the workers, one per worker (any scale; empty: equal).
  std::vector<double> worker_shares;
  ReadMode read_mode = ReadMode::kRemoteRead;
  Codec codec = Codec::kNone;
  // false (`spill=workers`): the trainer keeps to its share (1 - ratio) and only the workers
  // spill over, for a trainer whose CPU is the limit. true (`spill=all`): either side does.
  bool local_spill_over = true;

  bool operator==(const Placement&) const = default;
};

// Parses "fixed:cut=...,ratio=..." (the grammar above). `num_ops` (when >= 0) bounds the cut.
// Errors are InvalidArgument and name the key: "ratio must be a number in [0, 1], got '2'",
// "cut is missing", "unknown key 'speed'".
StatusOr<Placement> ParsePlacement(std::string_view text, int num_ops = -1);

// The canonical policy string: "fixed:cut=K,ratio=R,read=remote|local,compress=C", then
// ",spill=workers" when the trainer keeps to its share and ",shares=a/b/..." when the
// workers' shares are not all equal. Numbers have at most 4 significant digits, so a string
// whose numbers have at most 4 prints back identically.
std::string PlacementString(const Placement& placement);

// {"cut": K or "batch", "ratio", "spill": "all" | "workers", "read_mode", "compression",
//  "workers": [{"address", "share"}]}. `worker_addresses` name the workers (the entries are
// as many as the addresses or the shares, whichever is more; an entry has a share only if
// the placement has one for it).
nlohmann::json PlacementToJson(const Placement& placement,
                               const std::vector<std::string>& worker_addresses = {});
// The inverse: reads the fields above (the others are ignored; "spill", "read_mode",
// "compression" and "workers" may be missing and take their defaults; the shares are kept
// only if every worker has one). InvalidArgument naming the field otherwise.
StatusOr<Placement> PlacementFromJson(const nlohmann::json& j);

// What validation needs to know of a pipeline (pipeline::PlacementShapeOf builds it).
struct PipelineShape {
  int num_ops = 0;
  bool has_batch = false;
  bool first_op_reads_file = false;  // ops[0] is read_file
};

// A placement a pipeline can run: cut in 0..num_ops, or after batch only with a batch;
// read=local only when ops[0] is read_file and the cut is past it; ratio in [0, 1]; shares
// finite and >= 0. InvalidArgument naming the field ("cut 6 is out of range: ...",
// "read=local needs read_file as the first op") otherwise.
Status ValidatePlacement(const Placement& placement, const PipelineShape& shape);

}  // namespace sluice

#endif  // SLUICE_CORE_PLACEMENT_H_
