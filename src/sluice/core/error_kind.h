// ErrorKind: what kind of failure a Status is, wherever the runtime decides by it (fail the
// run, re-queue on another worker, count a skipped sample). It travels beside the message,
// not in it: an absl::Status payload inside a process, a field of worker.proto on the wire
// (Error.kind, SkippedSample.kind). So a reworded message changes no decision, and a message
// that happens to contain "ops[" is not taken for an op's failure.
//
// Pure functions on values; thread-safe.
#ifndef SLUICE_CORE_ERROR_KIND_H_
#define SLUICE_CORE_ERROR_KIND_H_

#include <cstdint>

#include "sluice/core/status.h"

namespace sluice {

// The values are part of the wire format (worker.proto): add at the end, never renumber or
// leave a gap (ErrorKindFromWire reads 0..the last as kinds).
enum class ErrorKind : int32_t {
  kNone = 0,          // none the runtime tells apart (a broken stream, a bad argument, ...)
  kData = 1,          // an op failed on a sample: the message names ops[N] and the sample
  kMessageLimit = 2,  // a sample, batch or split over a message size limit: fails anywhere
  kDropped = 3,       // not a failure: a short last batch dropped under drop_remainder
};

// "none", "data", "message_limit", "dropped".
const char* ErrorKindName(ErrorKind kind);

// `status` with `kind` attached (an OK status stays OK; kNone removes the kind).
Status WithKind(Status status, ErrorKind kind);
// The kind attached to `status`, kNone when there is none.
ErrorKind KindOf(const Status& status);
// A kind read from the wire: values this build does not know read as kNone.
ErrorKind ErrorKindFromWire(int32_t value);

}  // namespace sluice

#endif  // SLUICE_CORE_ERROR_KIND_H_
