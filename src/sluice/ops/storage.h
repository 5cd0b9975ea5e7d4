// Storage: how ops that read files (read_file, read_box's sidecars) reach them, and the
// limits every op applies to what it reads or decodes. An op never opens a path itself: it
// asks the Storage of its OpEnv, so the process that builds the pipeline decides what a
// spec may read:
//   - LocalStorage (trainer, `sluice run`, Python): paths as the spec gives them, relative
//     to the working directory.
//   - ConfinedStorage (a worker with --data-root): every path resolved under the root; a
//     path or a symlink that leaves it is refused.
//   - NoStorage (a worker without --data-root): every read refused; such a worker serves
//     read=local sessions only.
// All three read only regular files (a FIFO, a device or a folder is refused before any
// byte is read) and refuse a file over InputLimits::max_file_bytes before allocating.
//
// Thread-safety: Storage implementations are immutable after construction and safe to call
// from any number of threads. OpEnv is a plain value that must outlive the ops built with it.
#ifndef SLUICE_OPS_STORAGE_H_
#define SLUICE_OPS_STORAGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/core/status.h"
#include "sluice/core/tensor.h"

namespace sluice::ops {

// Caps on what one sample may make an op read or allocate. Each bounds an allocation whose
// size comes from data rather than from the spec, so that a hostile or corrupt file costs
// an error, not the process.
struct InputLimits {
  // Width x height of a decoded image. 2^27 (134 M) pixels: 4.5x a 30-megapixel photo, the
  // largest a training set plausibly holds; 400 MB as RGB u8.
  static constexpr int64_t kDefaultMaxImagePixels = int64_t{1} << 27;
  // Bytes of one file. 1 GiB: an hour of 48 kHz stereo 16-bit audio is 0.7 GB; a training
  // image is far smaller.
  static constexpr int64_t kDefaultMaxFileBytes = int64_t{1} << 30;

  int64_t max_image_pixels = kDefaultMaxImagePixels;
  int64_t max_file_bytes = kDefaultMaxFileBytes;
};

class Storage {
 public:
  virtual ~Storage() = default;

  // Reads the whole regular file `path` (as the spec names it). Errors: NotFound (missing),
  // PermissionDenied (outside the data root, unreadable, or this storage reads no files),
  // InvalidArgument (not a regular file), ResourceExhausted (over `max_bytes`), DataLoss
  // (a read error). Messages name the path as given.
  virtual StatusOr<Tensor> ReadFile(std::string_view path, int64_t max_bytes) const = 0;

  // Reads `size` bytes at `offset` of the regular file `path` (a member of a tar shard), with
  // ReadFile's checks and errors; ResourceExhausted when `size` is over `max_bytes`, DataLoss
  // when the file ends before offset + size.
  virtual StatusOr<Tensor> ReadRange(std::string_view path, int64_t offset, int64_t size,
                                     int64_t max_bytes) const;

  // The size of the regular file `path`, with ReadFile's errors.
  virtual StatusOr<int64_t> Size(std::string_view path) const;

  // What ReadFile would open for `path` (for diagnostics: the worker's readability check),
  // or the error ReadFile would return before opening.
  virtual StatusOr<std::string> Resolve(std::string_view path) const = 0;

 protected:
  // The file `path` opened for reading (a descriptor the caller closes), checked as each
  // storage checks what it opens.
  virtual StatusOr<int> Open(std::string_view path) const = 0;
  virtual void BeforeRead(int64_t) const {}
};

// Whether `storage` could read `path` now: the file it resolves to opens for reading and is
// a regular file, with ReadFile's errors and messages (NotFound, PermissionDenied,
// InvalidArgument naming what it is instead). Reads no bytes.
Status CheckReadable(const Storage& storage, std::string_view path);

// The rate, in bytes per second, at which `storage` delivers the bytes of the URL `path` (an
// object store, a web server), as the link probe times a link: a 1-byte ranged read (the
// request's own latency), then reads of the file's first 64 KiB, 256 KiB, ... up to
// kReadRateProbeBytes (or the whole file), until one takes kReadRateTargetS; the rate is the
// last read's bytes over its time less the latency. 0 when `path` is not a URL (a local disk
// is not what limits a worker here) or when no transfer outlasted both the latency and
// kReadRateMinTimedS (too short to time: the store is faster than this probe can tell, or a
// shard cache served it). Takes about 4 x kReadRateTargetS at the most. Errors: the reads'.
StatusOr<double> MeasureReadRate(const Storage& storage, std::string_view path);
// 2 MiB: 16 ms at 1 Gbit, 30 times a LAN request's latency.
inline constexpr int64_t kReadRateProbeBytes = 2 << 20;
// The link probe's target (rpc::ProbeWorker): long enough that a request's latency and the
// scheduler's jitter are a small part of it, short enough that the probe of a slow store
// (2 MB/s: 256 KiB) stays far inside the probe's deadline.
inline constexpr double kReadRateTargetS = 0.1;
// A transfer shorter than this is within the clock's and the scheduler's jitter (the link
// probe's rule: docs/policy.md).
inline constexpr double kReadRateMinTimedS = 0.002;

// Paths as given. Shared, stateless.
const Storage& LocalStorage();

// Refuses every read with `reason` (e.g. "this worker was started without --data-root").
std::unique_ptr<Storage> MakeNoStorage(std::string reason);

// Resolves every path under `root`: a relative path is taken relative to the root, an
// absolute one must lie inside it, and ".." may not climb out. Unless `allow_symlinks_out`,
// the file actually opened (symlinks followed) must lie inside the root's real path too.
// `before_read(bytes)` (optional) is called with the file's size before its bytes are read
// (a read-rate limiter). REQUIRES: root is an absolute path.
std::unique_ptr<Storage> MakeConfinedStorage(std::string root, bool allow_symlinks_out,
                                             std::function<void(int64_t)> before_read = {});

// Where ops run: the storage they read through and the limits they apply. Every OpContext
// points at one; DefaultOpEnv() is LocalStorage with default limits.
struct OpEnv {
  const Storage* storage = &LocalStorage();
  InputLimits limits;
};
const OpEnv& DefaultOpEnv();

}  // namespace sluice::ops

#endif  // SLUICE_OPS_STORAGE_H_
