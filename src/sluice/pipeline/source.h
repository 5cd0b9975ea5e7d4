// The source of a pipeline: which files it reads, in which order, for how many epochs.
//
// ResolveSource() turns a SourceSpec into the list of files once, at build time (globs or a
// manifest, labels from parent folders). EpochOrder() gives the order in which an epoch
// visits that list: the identity when not shuffled, else a permutation that depends only
// on (seed, epoch), so every process and every thread count sees the same order.
// SourceIterator walks those orders epoch after epoch (in a run sharded by rank, its rank's
// share of each, shard.h) and emits one Element per file:
//   path:  bytes[?]  the file path
//   label: i64[]     the class index (only with `label: parent_dir`)
// with id = {epoch, index in the resolved list} and origin = the path.
//
// The free functions are thread-safe. SourceIterator follows iterator.h (one consumer at a
// time, Cancel() from any thread).
#ifndef SLUICE_PIPELINE_SOURCE_H_
#define SLUICE_PIPELINE_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/iterator.h"
#include "sluice/pipeline/shard.h"
#include "sluice/pipeline/spec.h"

namespace sluice::pipeline {

// The op position reserved for the source's own randomness (the epoch permutation), so its
// draws never coincide with an op's.
inline constexpr uint32_t kSourceRngPosition = 0xFFFFFFFFu;

// Expands one glob pattern into the regular files it names, sorted lexicographically.
// Wildcards work within one path component: `*` (any run of characters), `?` (one
// character), `[abc]`, `[a-z]`, `[!a-z]` / `[^a-z]`; a component that is exactly `**`
// matches any number of folders (zero included), and a trailing `**` matches every file
// below. As in the shell, wildcards do not match a leading '.' (hidden files and folders)
// unless the pattern component itself starts with '.'. A pattern without wildcards names
// one file. Returns the paths spelled as the pattern spells them (relative stays relative).
// NotFound naming the pattern when nothing matches.
StatusOr<std::vector<std::string>> ExpandGlob(const std::string& pattern);

// True if `name` (one path component) matches the wildcard `pattern` (one component).
bool MatchComponent(std::string_view pattern, std::string_view name);

// Reads a manifest: one path per line, relative entries taken relative to the manifest's
// folder, blank lines and lines starting with '#' skipped, surrounding whitespace trimmed.
StatusOr<std::vector<std::string>> ReadManifest(const std::string& manifest_path);

// Expands brace ranges and lists in a path: "a-{000..002}.tar" gives a-000.tar, a-001.tar,
// a-002.tar (the width of the first bound kept), "{train,val}.tar" gives both; several
// braces multiply. InvalidArgument for an unclosed brace, a range with its bounds reversed,
// or one that would name over 2^20 paths.
StatusOr<std::vector<std::string>> ExpandBraces(const std::string& pattern);

// The shards `spec.shards` names, in order, each once: brace ranges expanded, local
// patterns globbed (NotFound naming a pattern without matches), URLs taken as they are.
// Opens none of them.
StatusOr<std::vector<std::string>> ShardPaths(const SourceSpec& spec);

// A shard sample's place: the byte range of its `data` member in its shard, and what is wrong
// with it if it cannot be read (a missing member or label, a truncated or damaged shard);
// read_file then fails with `problem`, which the pipeline's on_error rule handles.
struct ShardSpan {
  int64_t offset = 0;
  int64_t size = 0;
  std::string key;
  std::string problem;
};

struct SourceFiles {
  // One entry per sample: its file, or with shards the shard holding it (spans[i] says
  // where).
  std::vector<std::string> paths;
  std::vector<ShardSpan> spans;  // with shards only
  // With LabelMode::kParentDir: labels[i] is the index of paths[i]'s parent folder name in
  // class_names (sorted, distinct). Empty otherwise.
  std::vector<int64_t> labels;
  std::vector<std::string> class_names;
};

// Resolves `spec.files` (patterns concatenated in order, later duplicates dropped),
// `spec.manifest`, or `spec.shards` (brace ranges and globs; each shard scanned for its
// members, ScanTar, and its samples listed in archive order, GroupSamples; with a member
// label, each label member read). InvalidArgument if neither or both are given; NotFound if nothing is
// found (naming the pattern or the manifest).
StatusOr<SourceFiles> ResolveSource(const SourceSpec& spec);

// The schema of the source's elements. With shards, three more fields:
//   span:    i64[2]   offset and size of the sample's `data` member in the shard at `path`
//   key:     bytes[?] the sample's key in the shard
//   problem: bytes[?] why it cannot be read (empty when it can)
Schema SourceSchema(LabelMode label, bool shards = false);
Schema SourceSchema(const SourceSpec& spec);

// The visiting order of `epoch` over the first `count` files: 0..count-1, or a permutation
// seeded by (seed, epoch) when `shuffle`. With `groups` (the first index of each group,
// ascending, starting at 0: ShardGroups()), a shuffle permutes the groups and keeps each
// group's indices together and in order (`shuffle: shards`).
std::vector<uint64_t> EpochOrder(uint64_t count, bool shuffle, uint64_t seed, uint32_t epoch,
                                 const std::vector<uint64_t>& groups = {});

// The first sample index of each shard among the first `count` samples of a shards source
// (its samples are listed shard by shard); empty for files and a manifest.
std::vector<uint64_t> ShardGroups(const SourceFiles& files, uint64_t count);
// The groups a shuffle of `spec`'s source permutes whole: ShardGroups() for `shuffle:
// shards`, else none.
std::vector<uint64_t> ShuffleGroups(const SourceSpec& spec, const SourceFiles& files,
                                    uint64_t count);

// The element of file `index` in `epoch`.
Element MakeSourceElement(const SourceFiles& files, bool with_label, uint32_t epoch,
                          uint64_t index);
// The element of file `file` under the identity `id` (a padded sample of a sharded run
// repeats another sample's file under its own SampleId).
Element MakeSourceElement(const SourceFiles& files, bool with_label, SampleId id, uint64_t file);

// What the consumer of a run has received so far, to resume it mid-epoch (a checkpoint,
// docs/python.md): every sample of the epochs before `first_epoch`, and in each epoch of
// `consumed` the samples whose bit is set (bit i: source index i). A resumed run visits
// exactly the samples not received, with the same SampleIds, hence the same augmentations.
//
// A rank of a sharded run (shard.h, docs/distributed.md) records the same over the global
// index space, with `first_epoch` the first epoch of which it has not received its whole
// share, and three more fields:
//   divided   per epoch, the samples consumed before the epoch was divided among the ranks
//             (its share was dealt from the others); an epoch not listed was divided whole.
//             `consumed` includes these bits.
//   padded    the padded samples (even: pad; index >= samples per epoch) it received.
//   finished  the bits of the last epoch it finished (first_epoch - 1), which a merge of the
//             ranks' progress needs when the ranks are one epoch apart.
// A rank resumed from its own progress with the same rank and world size continues its own
// share exactly; MergeRankProgress() combines the progress of every rank into one that any
// number of ranks can resume (the remaining samples are divided afresh).
struct SourceProgress {
  uint32_t first_epoch = 0;
  std::map<uint32_t, std::vector<bool>> consumed;
  std::map<uint32_t, std::vector<bool>> divided;
  std::set<SampleId> padded;
  std::map<uint32_t, std::vector<bool>> finished;

  bool Consumed(SampleId id) const;
  bool empty() const { return first_epoch == 0 && consumed.empty() && padded.empty(); }
  // Bit i is bit (i % 8) of byte i / 8 (least significant first); trailing bits are zero.
  static std::string BitsToBytes(const std::vector<bool>& bits);
  static std::vector<bool> BitsFromBytes(std::string_view bytes);
};

// The share of `epoch` that `shard` visits: the epoch's permutation (EpochOrder) less the
// samples `resume` (may be null) says were consumed before the epoch was divided, dealt as
// shard.h says. Unsharded and without a resume, the whole permutation.
EpochShare EpochShareOf(uint64_t count, bool shuffle, uint64_t seed, uint32_t epoch,
                        const Shard& shard, EvenRule even, const SourceProgress* resume,
                        const std::vector<uint64_t>& groups = {});

// The progress of a whole sharded run from the progress of each of its ranks (ranks[r]:
// rank r's, all from one run of ranks.size() ranks): every sample that any rank received,
// with every partly consumed epoch to be divided afresh among the ranks that resume it
// (`divided` = `consumed`, nothing padded). InvalidArgument when no progress is given, or
// when the ranks are more than one epoch apart (a rank that finished an epoch carries only
// that epoch's bits in `finished`).
StatusOr<SourceProgress> MergeRankProgress(const std::vector<SourceProgress>& ranks);

// `progress` as it was before the samples `ids` were received (the last ones received, such as
// a batch fetched for a consumer that has not taken it): their bits cleared, and an epoch
// their receipt completed (folded into first_epoch) opened again with every other sample of
// it received. `per_epoch`: samples per epoch. In a sharded run (`finished` set) an epoch
// already folded stays folded: a rank's folded epoch does not keep what it was dealt.
SourceProgress Unreceive(SourceProgress progress, const std::vector<SampleId>& ids,
                         uint64_t per_epoch);

struct SourceOptions {
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t take = -1;   // -1: every file; else the first `take` files of the resolved list
  int64_t epochs = 1;  // -1: forever
  bool with_label = false;
  // Incremented for every element produced (may be null).
  std::atomic<int64_t>* produced = nullptr;
  // Resume: start at resume->first_epoch and leave out the samples already consumed (may be
  // null). `epochs` still counts from epoch 0.
  std::shared_ptr<const SourceProgress> resume;
  // Visit only this rank's share of each epoch (shard.h).
  Shard shard;
  EvenRule even = EvenRule::kDrop;
  // Shuffle whole groups (ShardGroups(), for `shuffle: shards`); empty: single samples.
  std::vector<uint64_t> shuffle_groups;
};

// Files visited per epoch: min(take, files) (or all files when take < 0).
int64_t SamplesPerEpoch(const SourceFiles& files, int64_t take);

class SourceIterator : public Iterator {
 public:
  SourceIterator(std::shared_ptr<const SourceFiles> files, SourceOptions options);

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override { cancelled_.store(true, std::memory_order_relaxed); }
  const Schema& schema() const override { return schema_; }

 private:
  std::shared_ptr<const SourceFiles> files_;
  SourceOptions options_;
  Schema schema_;
  uint64_t per_epoch_ = 0;
  uint32_t epoch_ = 0;
  uint64_t position_ = 0;  // within the current epoch's share
  bool share_ready_ = false;
  EpochShare share_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_SOURCE_H_
