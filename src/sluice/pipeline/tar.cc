#include "sluice/pipeline/tar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sluice/core/files.h"

namespace sluice::pipeline {
namespace {

constexpr int64_t kBlock = 512;
// A GNU long name or a pax header is a member's path and a few records: 1 MiB is far above
// PATH_MAX (4096) and keeps a hostile size from becoming an allocation.
constexpr int64_t kMaxMetaBytes = int64_t{1} << 20;

// Header fields (POSIX ustar; GNU uses the same offsets for what is read here).
struct Field {
  int offset;
  int length;
};
constexpr Field kName{0, 100};
constexpr Field kSize{124, 12};
constexpr Field kChecksum{148, 8};
constexpr int kTypeflag = 156;
constexpr Field kMagic{257, 6};
constexpr Field kPrefix{345, 155};

std::string_view Get(std::string_view header, Field f) {
  std::string_view v = header.substr(f.offset, f.length);
  const size_t nul = v.find('\0');
  return nul == std::string_view::npos ? v : v.substr(0, nul);
}

// An octal number, NUL or space terminated, leading spaces allowed; or GNU's base-256 form
// (the first byte's high bit set). False when malformed or over int64.
bool ParseNumber(std::string_view header, Field f, int64_t* out) {
  const std::string_view raw = header.substr(f.offset, f.length);
  const auto first = static_cast<unsigned char>(raw[0]);
  if (first & 0x80) {
    if (first & 0x40) return false;  // negative
    uint64_t v = first & 0x3F;
    for (size_t i = 1; i < raw.size(); ++i) {
      if (v > (std::numeric_limits<uint64_t>::max() >> 8)) return false;
      v = (v << 8) | static_cast<unsigned char>(raw[i]);
    }
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  size_t i = 0;
  while (i < raw.size() && raw[i] == ' ') ++i;
  uint64_t v = 0;
  bool digits = false;
  for (; i < raw.size() && raw[i] >= '0' && raw[i] <= '7'; ++i) {
    if (v > (std::numeric_limits<uint64_t>::max() >> 3)) return false;
    v = (v << 3) | static_cast<uint64_t>(raw[i] - '0');
    digits = true;
  }
  for (; i < raw.size(); ++i) {
    if (raw[i] != ' ' && raw[i] != '\0') return false;
  }
  if (!digits || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// The header's checksum holds (bytes summed with the checksum field as spaces); some old
// writers summed signed chars, which is accepted too.
bool ChecksumHolds(std::string_view header) {
  int64_t stored = 0;
  if (!ParseNumber(header, kChecksum, &stored)) return false;
  int64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (int i = 0; i < kBlock; ++i) {
    const bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.length;
    const char c = in_field ? ' ' : header[i];
    unsigned_sum += static_cast<unsigned char>(c);
    signed_sum += static_cast<signed char>(c);
  }
  return stored == unsigned_sum || stored == signed_sum;
}

bool AllZero(std::string_view block) {
  for (char c : block) {
    if (c != '\0') return false;
  }
  return true;
}

int64_t Padded(int64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

// The `path` and `size` records of a pax extended header ("LEN key=value\n" each).
void ParsePax(std::string_view data, std::string* path, int64_t* size) {
  while (!data.empty()) {
    size_t i = 0;
    int64_t len = 0;
    while (i < data.size() && data[i] >= '0' && data[i] <= '9' && len < kMaxMetaBytes) {
      len = len * 10 + (data[i] - '0');
      ++i;
    }
    if (i == 0 || i >= data.size() || data[i] != ' ' || len <= static_cast<int64_t>(i) + 1 ||
        len > static_cast<int64_t>(data.size())) {
      return;  // malformed: the records read so far stand
    }
    std::string_view record = data.substr(i + 1, len - i - 1);
    if (!record.empty() && record.back() == '\n') record.remove_suffix(1);
    const size_t eq = record.find('=');
    if (eq != std::string_view::npos) {
      const std::string_view key = record.substr(0, eq);
      const std::string_view value = record.substr(eq + 1);
      if (key == "path") {
        *path = std::string(value);
      } else if (key == "size") {
        int64_t v = 0;
        bool ok = !value.empty() && value.size() <= 18;
        for (char c : value) {
          if (c < '0' || c > '9') ok = false;
          if (ok) v = v * 10 + (c - '0');
        }
        if (ok) *size = v;
      }
    }
    data.remove_prefix(len);
  }
}

}  // namespace

StatusOr<TarScan> ScanTar(const std::string& name, int64_t file_size, const ReadAt& read) {
  TarScan scan;
  int64_t at = 0;
  std::string long_name;  // from a GNU 'L' member, for the next header
  std::string pax_path;   // from a pax 'x' member, for the next header
  int64_t pax_size = -1;
  while (true) {
    if (at + kBlock > file_size) {
      // The end of the file without the end-of-archive blocks: GNU tar accepts this too,
      // unless it cuts a header.
      if (at < file_size) {
        scan.problem = absl::StrCat(name, ": truncated: a partial tar header at offset ", at,
                                    " (the file has ", file_size, " bytes)");
      }
      return scan;
    }
    SLUICE_ASSIGN_OR_RETURN(std::string header, read(at, kBlock));
    if (static_cast<int64_t>(header.size()) < kBlock) {
      scan.problem = absl::StrCat(name, ": truncated: a partial tar header at offset ", at);
      return scan;
    }
    if (AllZero(header)) return scan;  // end of archive
    if (!ChecksumHolds(header)) {
      scan.problem = absl::StrCat(name, ": not a tar header at offset ", at,
                                  " (bad checksum); the members after it cannot be read");
      return scan;
    }
    int64_t size = 0;
    if (!ParseNumber(header, kSize, &size)) {
      scan.problem = absl::StrCat(name, ": a tar header at offset ", at, " has a bad size");
      return scan;
    }
    const char type = header[kTypeflag];
    const int64_t data_at = at + kBlock;
    if (size > file_size - data_at) {
      scan.problem = absl::StrCat(name, ": truncated: the member at offset ", at, " needs ", size,
                                  " bytes, the file ends ", file_size - data_at, " bytes later");
      return scan;
    }
    if (type == 'L' || type == 'x') {
      if (size > kMaxMetaBytes) {
        scan.problem =
            absl::StrCat(name, ": a ", type == 'L' ? "long-name" : "pax", " header at offset ", at,
                         " of ", size, " bytes (at most ", kMaxMetaBytes, ")");
        return scan;
      }
      SLUICE_ASSIGN_OR_RETURN(std::string data, read(data_at, size));
      if (static_cast<int64_t>(data.size()) < size) {
        scan.problem = absl::StrCat(name, ": truncated at offset ", data_at);
        return scan;
      }
      if (type == 'L') {
        long_name = std::string(Get(data, Field{0, static_cast<int>(data.size())}));
      } else {
        ParsePax(data, &pax_path, &pax_size);
      }
      at = data_at + Padded(size);
      continue;
    }
    if (type == 'g' || type == 'K') {  // global pax records, GNU long link names: not used
      at = data_at + Padded(size);
      continue;
    }
    std::string member;
    if (!pax_path.empty()) {
      member = pax_path;
    } else if (!long_name.empty()) {
      member = long_name;
    } else {
      member = std::string(Get(header, kName));
      const std::string_view prefix = Get(header, kPrefix);
      if (Get(header, kMagic).substr(0, 5) == "ustar" && !prefix.empty()) {
        member = absl::StrCat(std::string(prefix), "/", member);
      }
    }
    if (pax_size >= 0) {
      size = pax_size;
      if (size > file_size - data_at) {
        scan.problem = absl::StrCat(name, ": truncated: the member ", member, " at offset ", at,
                                    " needs ", size, " bytes");
        return scan;
      }
    }
    long_name.clear();
    pax_path.clear();
    pax_size = -1;
    if (type == '0' || type == '\0' || type == '7') {  // regular (and contiguous) files
      scan.members.push_back(TarMember{std::move(member), data_at, size});
    }
    // Folders, links, devices and FIFOs hold no sample data. Hard and symbolic links have
    // size 0 in a well-formed archive; their size is still skipped as the header says.
    at = data_at + Padded(size);
  }
}

bool SplitMemberName(const std::string& name, std::string* key, std::string* field) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  if (base >= name.size() || name[base] == '.') return false;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot + 1 >= name.size()) return false;
  *key = name.substr(0, dot);
  *field = name.substr(dot + 1);
  return true;
}

const ShardField* ShardSample::Find(const std::string& field) const {
  for (const ShardField& f : fields) {
    if (f.field == field) return &f;
  }
  return nullptr;
}

std::vector<ShardSample> GroupSamples(const std::vector<TarMember>& members) {
  std::vector<ShardSample> out;
  for (const TarMember& m : members) {
    std::string key;
    std::string field;
    if (!SplitMemberName(m.name, &key, &field)) continue;
    if (out.empty() || out.back().key != key) out.push_back(ShardSample{key, {}});
    out.back().fields.push_back(ShardField{field, m.offset, m.size});
  }
  return out;
}

namespace {

void PutOctal(std::string* header, Field f, int64_t v) {
  // length - 1 octal digits and a NUL.
  std::string digits(static_cast<size_t>(f.length - 1), '0');
  for (int i = f.length - 2; i >= 0 && v > 0; --i) {
    digits[static_cast<size_t>(i)] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  header->replace(static_cast<size_t>(f.offset), digits.size(), digits);
}

}  // namespace

Status AppendTarMember(std::string* tar, const std::string& name, std::string_view data) {
  if (name.empty()) return absl::InvalidArgumentError("a tar member needs a name");
  std::string prefix;
  std::string rest = name;
  if (name.size() > static_cast<size_t>(kName.length)) {
    // Split at a '/' so that the prefix fits 155 bytes and the rest 100.
    size_t cut = name.rfind('/', static_cast<size_t>(kPrefix.length));
    while (cut != std::string::npos && name.size() - cut - 1 > static_cast<size_t>(kName.length)) {
      cut = std::string::npos;  // the rest would still be too long
    }
    if (cut == std::string::npos || cut == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tar member name '", name, "' does not fit a ustar header"));
    }
    prefix = name.substr(0, cut);
    rest = name.substr(cut + 1);
  }
  // 8 GiB - 1 is the most 11 octal digits hold.
  if (data.size() > (uint64_t{1} << 33) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("tar member '", name, "' is over 8 GiB"));
  }
  std::string header(kBlock, '\0');
  header.replace(static_cast<size_t>(kName.offset), rest.size(), rest);
  header.replace(100, 7, "0000644");
  header.replace(108, 7, "0000000");
  header.replace(116, 7, "0000000");
  PutOctal(&header, kSize, static_cast<int64_t>(data.size()));
  PutOctal(&header, Field{136, 12}, 0);  // mtime: fixed, so the same data gives the same bytes
  header[kTypeflag] = '0';
  header.replace(static_cast<size_t>(kMagic.offset), 6, std::string("ustar\0", 6));
  header.replace(263, 2, "00");
  header.replace(static_cast<size_t>(kPrefix.offset), prefix.size(), prefix);
  header.replace(static_cast<size_t>(kChecksum.offset), 8, "        ");
  int64_t sum = 0;
  for (char c : header) sum += static_cast<unsigned char>(c);
  std::string checksum(6, '0');
  for (int i = 5; i >= 0; --i) {
    checksum[static_cast<size_t>(i)] = static_cast<char>('0' + (sum & 7));
    sum >>= 3;
  }
  header.replace(static_cast<size_t>(kChecksum.offset), 8, checksum + std::string("\0 ", 2));
  tar->append(header);
  tar->append(data);
  tar->append(static_cast<size_t>(Padded(static_cast<int64_t>(data.size())) -
                                  static_cast<int64_t>(data.size())),
              '\0');
  return absl::OkStatus();
}

void AppendTarEnd(std::string* tar) { tar->append(2 * kBlock, '\0'); }

StatusOr<std::string> WriteTarIndex(int64_t shard_size, const TarScan& scan, const ReadAt& read) {
  static const char* kHex = "0123456789abcdef";
  std::string out = absl::StrCat("sluice-tar-index 1 ", shard_size, "\n");
  for (const TarMember& m : scan.members) {
    if (m.name.find_first_of("\t\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("member '", m.name, "' has a tab or newline in its name"));
    }
    std::string hex = "-";
    if (m.size <= kIndexInlineBytes) {
      SLUICE_ASSIGN_OR_RETURN(std::string bytes, read(m.offset, m.size));
      hex.clear();
      for (unsigned char c : bytes) {
        hex.push_back(kHex[c >> 4]);
        hex.push_back(kHex[c & 15]);
      }
    }
    absl::StrAppend(&out, m.offset, "\t", m.size, "\t", hex, "\t", m.name, "\n");
  }
  if (!scan.problem.empty()) {
    std::string problem = scan.problem;
    for (char& c : problem) {
      if (c == '\n' || c == '\t') c = ' ';
    }
    absl::StrAppend(&out, "problem\t", problem, "\n");
  }
  return out;
}

StatusOr<TarIndex> ParseTarIndex(const std::string& name, std::string_view text) {
  TarIndex index;
  const auto bad = [&name](int line, const std::string& why) {
    return absl::DataLossError(absl::StrCat(name, ":", line, ": ", why));
  };
  std::vector<absl::string_view> lines = absl::StrSplit(absl::string_view(text.data(), text.size()),
                                                        '\n', absl::SkipEmpty());
  if (lines.empty()) return bad(1, "empty, not a shard index");
  std::vector<absl::string_view> head = absl::StrSplit(lines[0], ' ');
  if (head.size() != 3 || head[0] != "sluice-tar-index" || head[1] != "1" ||
      !absl::SimpleAtoi(head[2], &index.shard_size) || index.shard_size < 0) {
    return bad(1, "not a sluice-tar-index 1 header");
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const int line = static_cast<int>(i) + 1;
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], absl::MaxSplits('\t', 3));
    if (f.size() == 2 && f[0] == "problem") {
      index.scan.problem = std::string(f[1]);
      continue;
    }
    TarMember m;
    if (f.size() != 4 || !absl::SimpleAtoi(f[0], &m.offset) || !absl::SimpleAtoi(f[1], &m.size) ||
        m.offset < 0 || m.size < 0 || m.size > index.shard_size - m.offset || f[3].empty()) {
      return bad(line, "not a member line (offset, size, bytes, name) inside the shard");
    }
    m.name = std::string(f[3]);
    std::string bytes;
    if (f[2] != "-") {
      if (f[2].size() != static_cast<size_t>(2 * m.size) || m.size > kIndexInlineBytes) {
        return bad(line, "inline bytes do not match the member's size");
      }
      for (size_t k = 0; k < f[2].size(); k += 2) {
        int v = 0;
        for (size_t d = k; d < k + 2; ++d) {
          const char c = f[2][d];
          const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
          if (digit < 0) return bad(line, "inline bytes are not hex");
          v = v * 16 + digit;
        }
        bytes.push_back(static_cast<char>(v));
      }
    }
    index.scan.members.push_back(std::move(m));
    index.inline_bytes.push_back(std::move(bytes));
  }
  return index;
}

StatusOr<std::unique_ptr<LocalTarFile>> LocalTarFile::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("shard '", path, "' cannot be opened"));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("shard '", path, "' is not a regular file"));
  }
  return std::unique_ptr<LocalTarFile>(new LocalTarFile(path, fd, st.st_size));
}

LocalTarFile::~LocalTarFile() { close(fd_); }

ReadAt LocalTarFile::Reader() const {
  return [this](int64_t offset, int64_t n) -> StatusOr<std::string> {
    std::string out(static_cast<size_t>(n), '\0');
    const ssize_t got = pread(fd_, out.data(), out.size(), offset);
    if (got < 0) return absl::DataLossError(absl::StrCat(path_, ": read error"));
    out.resize(static_cast<size_t>(got));
    return out;
  };
}

StatusOr<TarScan> WriteLocalShardIndex(const std::string& shard) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<LocalTarFile> file, LocalTarFile::Open(shard));
  const ReadAt read = file->Reader();
  SLUICE_ASSIGN_OR_RETURN(TarScan scan, ScanTar(shard, file->size(), read));
  SLUICE_ASSIGN_OR_RETURN(std::string text, WriteTarIndex(file->size(), scan, read));
  // Through a temporary file and a rename: a reader never sees half an index.
  const std::string path = shard + ".idx";
  SLUICE_RETURN_IF_ERROR(WriteFileAtomically(path, text));
  return scan;
}

}  // namespace sluice::pipeline
