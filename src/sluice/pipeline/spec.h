// PipelineSpec: the user-facing description of a pipeline (docs/SPEC.md). YAML and
// JSON are two spellings of one structure; the Python and C++ builders emit it; workers
// receive it in canonical JSON. A plain value type.
#ifndef SLUICE_PIPELINE_SPEC_H_
#define SLUICE_PIPELINE_SPEC_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/ops/op.h"
#include "sluice/ops/registry.h"

namespace sluice::pipeline {

// kParentDir: the file's parent folder names the class; kMember: a shard sample's member
// (`label: cls`, its text an integer) or a field of its JSON member (`label: json:KEY`).
enum class LabelMode { kNone, kParentDir, kMember };
enum class OnError { kFail, kSkip };
// How the ranks of a sharded run (docs/distributed.md) are given equal counts when an
// epoch's samples do not divide evenly: kDrop leaves the last few of the epoch's order out on
// every rank; kPad repeats samples from its start, as torch's DistributedSampler does.
enum class EvenRule { kDrop, kPad };

struct SourceSpec {
  // Glob patterns ("**" crosses folders) or plain paths, in the order given. Relative paths
  // are taken relative to the process's working directory.
  std::vector<std::string> files;
  // A file listing one path per line (relative entries are relative to the manifest's
  // folder). Either `files` or `manifest` is set, not both.
  std::string manifest;
  // Tar shards in the WebDataset layout (docs/shards.md): globs, brace ranges
  // ("train-{000000..000127}.tar") or plain paths, in the order given. Instead of `files`
  // and `manifest`; one sample per key, `data` naming the member read_file reads.
  std::vector<std::string> shards;
  std::string data;  // with shards: the field of the sample's data ("jpg", "wav", ...)
  LabelMode label = LabelMode::kNone;
  // With LabelMode::kMember: the member's field ("cls"), or "json:KEY".
  std::string label_member;
  bool shuffle = false;  // a fresh seeded permutation of sample order every epoch
  // With shards: `shuffle: shards` permutes the order of the shards each epoch and keeps
  // every shard's samples together and in order (sequential reads; a shuffle_buffer mixes
  // samples within reach). Sets `shuffle` too.
  bool shard_order = false;
  uint64_t seed = 0;     // also seeds every random op (see core/rng.h)
  EvenRule even = EvenRule::kDrop;  // only matters when the run is sharded by rank
};

struct OpSpec {
  std::string name;
  std::map<std::string, ops::ArgValue> args;  // as written; bound against the schema later
};

struct BatchSpec {
  int64_t size = 0;  // 0: no batching
  bool drop_remainder = false;
  bool padded = false;  // `padded_batch:` pads ragged dims to the batch maximum
  double padding_value = 0;
  std::map<std::string, double> padding_values;  // per field, overrides padding_value
};

// Ranges of the spec's numbers (docs/SPEC.md). Each upper bound is what a real pipeline could
// need times a wide margin, low enough that what is derived from it (buffers reserved per
// batch, elements in flight per thread, epoch numbers) cannot overflow or exhaust memory or
// threads from the spec alone.
struct SpecLimits {
  // 2^16 samples: the largest batches in use (LARS/LAMB, 32K-64K) are global batches split
  // over many loaders; one loader's batch is far smaller.
  static constexpr int64_t kMaxBatchSize = int64_t{1} << 16;
  // Batches (or samples) prepared ahead: 1024; pipelines use 1-16.
  static constexpr int64_t kMaxPrefetch = 1024;
  // 2^24 samples: 16x the largest shuffle buffers in use (1M); it holds processed samples.
  static constexpr int64_t kMaxShuffleBuffer = int64_t{1} << 24;
  // 2^20 passes: 1000x the longest schedules (~1000 epochs); epoch numbers stay far inside
  // a SampleId's 32 bits.
  static constexpr int64_t kMaxEpochs = int64_t{1} << 20;
  // 2^40 files: beyond any file list; sample indices stay far inside 64 bits.
  static constexpr int64_t kMaxTake = int64_t{1} << 40;
  // 1024 threads: above the largest machines' hardware threads (2 x 192 cores x 2 = 768);
  // each thread reserves a stack, and a map keeps 2 elements in flight per thread.
  static constexpr int64_t kMaxThreads = 1024;
  // Padding values: finite, within f32's range (a padded field is at most f64 anyway).
  static constexpr double kMaxPaddingValue = 1e38;
};

struct Options {
  // Largest values accepted for the input limits: far above any real image or file, low
  // enough that sizes derived from them (pixels x channels x 8 bytes) cannot overflow.
  static constexpr int64_t kMaxImagePixelsCap = int64_t{1} << 36;
  static constexpr int64_t kMaxFileBytesCap = int64_t{1} << 40;

  bool deterministic = false;  // fixed output order for a given seed
  int threads = 0;             // 0: auto (the CPU budget)
  OnError on_error = OnError::kFail;
  // max_image_pixels / max_file_bytes: what one sample may make a decoder or a read
  // allocate (ops/storage.h). A worker applies the smaller of these and its own flags.
  ops::InputLimits limits;
};

struct PipelineSpec {
  SourceSpec source;
  std::vector<OpSpec> ops;
  BatchSpec batch;
  int64_t shuffle_buffer = 0;  // trainer-side shuffle buffer after the map (0: off)
  int64_t prefetch = 4;        // batches prepared ahead
  int64_t epochs = 1;          // -1: repeat forever
  int64_t take = -1;           // -1: all; else at most this many samples per epoch
  Options options;
};

// Parses YAML or JSON text. `filename` is used in messages only. Errors are
// InvalidArgument and point into the file: "pipe.yaml:7:5: ops[2].random_resized_crop.size:
// expected 2 ints, got 3". Checks structure and argument types against `registry`.
StatusOr<PipelineSpec> ParseSpec(std::string_view text, std::string_view filename,
                                 const ops::Registry& registry = ops::Registry::Builtin());
// Reads and parses a file; NotFound if it cannot be read.
StatusOr<PipelineSpec> LoadSpec(const std::string& path,
                                const ops::Registry& registry = ops::Registry::Builtin());

// Canonical JSON: keys sorted, defaults written out, no whitespace. Equal specs give equal
// strings, and ParseSpec(ToCanonicalJson(s)) == s.
std::string ToCanonicalJson(const PipelineSpec& spec);
// YAML spelling of the same structure (for humans, `spec.to_yaml()`).
std::string ToYaml(const PipelineSpec& spec);
// 16 hex digits hashing the canonical form; stable across runs and machines.
std::string Fingerprint(const PipelineSpec& spec);

// Checks the ranges of SpecLimits on a spec built in code (ParseSpec checks them as it
// reads): "batch.size: must be in [1, 65536], got 100000000".
Status CheckSpecRanges(const PipelineSpec& spec);

// Whether ops[0] reads the sample's file (OpSchema::reads_sample): what read=local and the
// raw sample size need. An op the registry does not know is not such an op.
// Whether the source gives each sample a label field (parent folders or shard members).
bool HasLabel(const SourceSpec& source);

bool FirstOpReadsSample(const PipelineSpec& spec,
                        const ops::Registry& registry = ops::Registry::Builtin());

bool operator==(const OpSpec& a, const OpSpec& b);
bool operator==(const SourceSpec& a, const SourceSpec& b);
bool operator==(const BatchSpec& a, const BatchSpec& b);
bool operator==(const Options& a, const Options& b);
bool operator==(const PipelineSpec& a, const PipelineSpec& b);

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_SPEC_H_
