// Synthetic data sets for tests, demos and benchmarks (`sluice gen-data`).
//
// JPEG images are photo-like on purpose, so that decoding them costs about what decoding a
// photo costs: a smooth multi-colour gradient, a few large soft blobs and hard-edged shapes,
// and fine texture plus sensor-like noise, compressed with TurboJPEG. Every image is a pure
// function of (seed, index), so a data set is identical whatever the thread count.
//
// Layout: DIR/class_NNN/img_NNNNNN.jpg, image i in class i % classes. With a corrupt
// fraction, some files (chosen by the seed) are replaced by a truncated JPEG or by random
// bytes, still named .jpg, and DIR/corrupt.txt lists them (paths relative to DIR, one per
// line, sorted).
// All functions are thread-safe.
#ifndef SLUICE_CLI_GEN_DATA_H_
#define SLUICE_CLI_GEN_DATA_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sluice/core/status.h"

namespace sluice::cli {

struct JpegImageOptions {
  int width = 500;
  int height = 375;
  int quality = 90;
};

// The RGB pixels (height * width * 3, row-major, interleaved) of image `index`.
std::vector<uint8_t> SynthesizeImage(const JpegImageOptions& options, uint64_t seed,
                                     uint64_t index);

// The JPEG file of image `index` (4:2:0 chroma subsampling, baseline).
StatusOr<std::string> SynthesizeJpeg(const JpegImageOptions& options, uint64_t seed,
                                     uint64_t index);

enum class CorruptKind { kNone, kTruncated, kGarbage };

// Which images of a set of `count` are planted as corrupt: round(count * fraction) of them,
// chosen by `seed`, alternately truncated and garbage. Returns one entry per image.
std::vector<CorruptKind> ChooseCorrupt(int64_t count, double fraction, uint64_t seed);

struct GenDataOptions {
  std::string out_dir;
  int64_t count = 0;
  int64_t classes = 10;
  uint64_t seed = 1;
  double corrupt_fraction = 0;
  int threads = 1;
  JpegImageOptions image;
  // Called now and then (from the calling thread) with images written so far.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct GenDataResult {
  int64_t files = 0;
  int64_t bytes = 0;
  std::vector<std::string> corrupt;  // relative to out_dir, sorted
};

// The relative path of image `index`: "class_003/img_000123.jpg".
std::string ImageRelativePath(int64_t index, int64_t classes);

// Writes the JPEG set described by `options` (creating folders as needed). Existing files
// with the same names are overwritten. InvalidArgument for bad options; Internal/
// PermissionDenied style errors for I/O failures, naming the path.
StatusOr<GenDataResult> GenerateJpegDataset(const GenDataOptions& options);

// What every generator shares: creates out_dir and its class folders, writes the `count`
// files on `threads` threads (file i holds make_file(i), at out_dir/relative_path(i)),
// reports progress, and lists the files whose kind is not kNone in out_dir/corrupt.txt
// (removing a stale list when there are none). REQUIRES: kinds.size() == count.
StatusOr<GenDataResult> WriteDataset(
    const GenDataOptions& options, const std::vector<CorruptKind>& kinds,
    const std::function<StatusOr<std::string>(int64_t)>& make_file,
    const std::function<std::string(int64_t)>& relative_path);

// Packs the data set just written in `out_dir` (its `*.EXT` files, `ext` "jpg" or "wav") into
// tar shards of `shard_size` samples in the WebDataset layout (docs/shards.md):
// out_dir/shards/shard-000000.tar (and its index, shard-000000.tar.idx), ... Samples go in
// the order the loose-file source resolves them (`**/*.EXT`, sorted), so the same seed visits
// the same samples in the same order from either source. A sample is KEY.EXT with its bytes and KEY.cls, its parent folder's class
// index as text (what `label: parent_dir` gives the loose files); KEY is the file's path
// relative to out_dir without the extension. Returns the number of shards written.
StatusOr<int64_t> PackShards(const std::string& out_dir, const std::string& ext,
                             int64_t shard_size);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_GEN_DATA_H_
