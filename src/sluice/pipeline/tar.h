// Tar shards in the WebDataset layout (docs/shards.md): a POSIX tar whose members are grouped
// into samples by key. `train-000001.tar` holding `a/0001.jpg`, `a/0001.cls`, `a/0002.jpg`,
// ... has the samples `a/0001` and `a/0002`, each with the fields `jpg` and `cls`.
//
// ScanTar() lists a tar's regular members with the byte range of each one's data, reading
// only the 512-byte headers (data is skipped, not read), so that a sample's member can be
// read later by offset: from a local file with one pread, from a web server with one range
// request. The reader is this project's own, not libarchive: libarchive streams data but does
// not give a member's offset in the file, which random access and split ranges need, and the
// headers are simple enough to check field by field (checksums, octal and base-256 sizes,
// ustar prefixes, GNU long names, pax `path` and `size` records). Every number read from a
// header is bounds-checked before it is used: a corrupt or hostile shard gives a DataLoss
// error naming the shard and the offset, never a crash or an allocation from its numbers.
//
// GroupSamples() groups the members into samples as WebDataset does: the key is the member's
// path up to the first '.' of its last component, the field is the rest ("0001.seg.png" has
// key "0001" and field "seg.png"); consecutive members with the same key form one sample.
//
// Pure functions; thread-safe.
#ifndef SLUICE_PIPELINE_TAR_H_
#define SLUICE_PIPELINE_TAR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/core/status.h"

namespace sluice::pipeline {

struct TarMember {
  std::string name;    // the member's path in the archive
  int64_t offset = 0;  // of its first data byte in the tar file
  int64_t size = 0;    // data bytes
};

struct TarScan {
  std::vector<TarMember> members;  // regular files, in archive order
  // Set when the scan stopped before the archive's end: a header that is not a tar header (a
  // bad checksum, garbage) or a member whose data runs past the end of the file (truncated).
  // `members` then holds what came before; the message names the shard and the offset.
  std::string problem;
};

// Reads `n` bytes at `offset` of the tar; fewer at the end of the file.
using ReadAt = std::function<StatusOr<std::string>(int64_t offset, int64_t n)>;

// Scans the tar named `name` (for messages) of `file_size` bytes. Errors from `read` are
// returned as they are; a damaged archive is not an error but a TarScan::problem.
StatusOr<TarScan> ScanTar(const std::string& name, int64_t file_size, const ReadAt& read);

struct ShardField {
  std::string field;  // "jpg", "cls", "seg.png"
  int64_t offset = 0;
  int64_t size = 0;
};

struct ShardSample {
  std::string key;
  std::vector<ShardField> fields;
  const ShardField* Find(const std::string& field) const;
};

// Groups members into samples (WebDataset's rule, above). Members whose last path component
// has no '.' (no field), or starts with '.', belong to no sample and are left out.
std::vector<ShardSample> GroupSamples(const std::vector<TarMember>& members);

// Splits a member name into key and field; false when it has no field.
bool SplitMemberName(const std::string& name, std::string* key, std::string* field);

// A shard's index (`sluice index`, SHARD.idx beside it): every member's range, and the bytes
// of each member of at most kIndexInlineBytes (labels, small JSON), so that resolving a remote
// shard costs one request instead of one per member. Text:
//   sluice-tar-index 1 <shard size>\n
//   <offset>\t<size>\t<hex of the bytes, or ->\t<name>\n   (one per member, archive order)
// A scan that stopped early (TarScan::problem) is written as a last line "problem\t<text>".
inline constexpr int64_t kIndexInlineBytes = 64;
struct TarIndex {
  int64_t shard_size = 0;
  TarScan scan;
  std::vector<std::string> inline_bytes;  // per member; empty when not inlined
};
// The index text of a scanned shard; `read` gives the small members' bytes.
StatusOr<std::string> WriteTarIndex(int64_t shard_size, const TarScan& scan, const ReadAt& read);
// Parses an index; DataLoss naming `name` when it is malformed or lists a member outside
// the shard.
StatusOr<TarIndex> ParseTarIndex(const std::string& name, std::string_view text);

// A local shard open for reading by offset (one descriptor, closed with the object).
class LocalTarFile {
 public:
  // NotFound when it cannot be opened; InvalidArgument when it is not a regular file.
  static StatusOr<std::unique_ptr<LocalTarFile>> Open(const std::string& path);
  ~LocalTarFile();
  LocalTarFile(const LocalTarFile&) = delete;
  LocalTarFile& operator=(const LocalTarFile&) = delete;
  int64_t size() const { return size_; }
  // Reads by pread; valid while this object lives.
  ReadAt Reader() const;

 private:
  LocalTarFile(std::string path, int fd, int64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_;
  int64_t size_;
};

// Scans the local shard `shard` and writes its index to SHARD.idx (atomically: a temporary
// file renamed). Returns the scan (its problem, if any, is recorded in the index).
StatusOr<TarScan> WriteLocalShardIndex(const std::string& shard);

// Appends a regular member (a POSIX ustar header, the data, padding to 512 bytes) to `tar`.
// Names over 100 bytes are split into ustar's prefix and name at a '/'; InvalidArgument when
// that cannot hold it (over 255 bytes, or no '/' where needed) or when the name is empty.
Status AppendTarMember(std::string* tar, const std::string& name, std::string_view data);
// The two zero blocks that end an archive.
void AppendTarEnd(std::string* tar);

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_TAR_H_
