#include "sluice/pipeline/source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "sluice/core/rng.h"
#include "sluice/ops/url_storage.h"
#include "sluice/pipeline/tar.h"

namespace sluice::pipeline {
namespace fs = std::filesystem;
namespace {

bool HasWildcard(std::string_view component) {
  return component.find_first_of("*?[") != std::string_view::npos;
}

// Matches one character `c` against the bracket expression starting at pattern[open]
// ('['). Returns false if the expression is not closed (then '[' is an ordinary
// character); otherwise sets *matched and *next (the index after the closing ']').
bool MatchClass(std::string_view pattern, size_t open, char c, bool* matched, size_t* next) {
  size_t i = open + 1;
  bool negate = false;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    negate = true;
    ++i;
  }
  bool found = false;
  bool first = true;
  while (i < pattern.size() && (first || pattern[i] != ']')) {
    first = false;
    char lo = pattern[i];
    char hi = lo;
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      hi = pattern[i + 2];
      i += 3;
    } else {
      i += 1;
    }
    if (lo <= c && c <= hi) found = true;
  }
  if (i >= pattern.size()) return false;  // no closing ']'
  *matched = found != negate;
  *next = i + 1;
  return true;
}

std::string Join(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (prefix.back() == '/') return prefix + name;
  return prefix + "/" + name;
}

std::string DirOf(const std::string& prefix) { return prefix.empty() ? "." : prefix; }

struct DirEntry {
  std::string name;
  bool is_dir = false;  // a real directory, not a link to one
};

std::vector<DirEntry> ListDir(const std::string& prefix) {
  std::vector<DirEntry> out;
  std::error_code ec;
  fs::directory_iterator it(DirOf(prefix), ec);
  if (ec) return out;
  for (fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec) break;
    DirEntry e;
    e.name = it->path().filename().string();
    std::error_code ec2;
    e.is_dir = it->is_directory(ec2) && !it->is_symlink(ec2);
    out.push_back(std::move(e));
  }
  return out;
}

bool IsRegularFile(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

void Expand(const std::string& prefix, const std::vector<std::string>& comps, size_t i,
            std::vector<std::string>* out);

// `comps[i]` is "**": zero or more folders below `prefix`.
void ExpandDoubleStar(const std::string& prefix, const std::vector<std::string>& comps, size_t i,
                      std::vector<std::string>* out) {
  Expand(prefix, comps, i + 1, out);
  for (const DirEntry& e : ListDir(prefix)) {
    if (e.is_dir && e.name[0] != '.') ExpandDoubleStar(Join(prefix, e.name), comps, i, out);
  }
}

void Expand(const std::string& prefix, const std::vector<std::string>& comps, size_t i,
            std::vector<std::string>* out) {
  if (i == comps.size()) {
    if (IsRegularFile(DirOf(prefix))) out->push_back(prefix);
    return;
  }
  const std::string& comp = comps[i];
  if (comp == "**") {
    ExpandDoubleStar(prefix, comps, i, out);
  } else if (!HasWildcard(comp)) {
    Expand(Join(prefix, comp), comps, i + 1, out);
  } else {
    for (const DirEntry& e : ListDir(prefix)) {
      if (e.name[0] == '.' && comp[0] != '.') continue;
      if (MatchComponent(comp, e.name)) Expand(Join(prefix, e.name), comps, i + 1, out);
    }
  }
}

std::string CwdNote(const std::string& pattern) {
  if (!pattern.empty() && pattern[0] == '/') return "";
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  if (ec) return "";
  return absl::StrCat(" (relative to ", cwd.string(), ")");
}

}  // namespace

bool MatchComponent(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0;
  size_t star_p = std::string_view::npos, star_n = 0;
  while (n < name.size()) {
    if (p < pattern.size()) {
      char c = pattern[p];
      if (c == '*') {
        star_p = p++;
        star_n = n;
        continue;
      }
      if (c == '?') {
        ++p;
        ++n;
        continue;
      }
      bool matched = false;
      size_t next = 0;
      if (c == '[' && MatchClass(pattern, p, name[n], &matched, &next)) {
        if (matched) {
          p = next;
          ++n;
          continue;
        }
      } else if (c == name[n]) {
        ++p;
        ++n;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    n = ++star_n;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

StatusOr<std::vector<std::string>> ExpandGlob(const std::string& pattern) {
  if (pattern.empty()) return absl::InvalidArgumentError("empty file pattern");
  std::string prefix = pattern[0] == '/' ? "/" : "";
  std::vector<std::string> comps = absl::StrSplit(pattern, '/', absl::SkipEmpty());
  if (!comps.empty() && comps.back() == "**") comps.push_back("*");
  std::vector<std::string> out;
  Expand(prefix, comps, 0, &out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat("no files match '", pattern, "'", CwdNote(pattern)));
  }
  return out;
}

StatusOr<std::vector<std::string>> ReadManifest(const std::string& manifest_path) {
  std::ifstream in(manifest_path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read manifest '", manifest_path, "'", CwdNote(manifest_path)));
  }
  std::string base = fs::path(manifest_path).parent_path().string();
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view entry = absl::StripAsciiWhitespace(line);
    if (entry.empty() || entry[0] == '#') continue;
    std::string path(entry);
    if (path[0] != '/' && !base.empty()) path = Join(base, path);
    out.push_back(std::move(path));
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading manifest '", manifest_path, "'"));
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat("manifest '", manifest_path, "' lists no files"));
  }
  return out;
}

StatusOr<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  constexpr size_t kMaxPaths = size_t{1} << 20;
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", pattern, "': a '}' without '{'"));
    }
    return std::vector<std::string>{pattern};
  }
  const size_t close = pattern.find('}', open);
  if (close == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", pattern, "': an unclosed '{'"));
  }
  const std::string inside = pattern.substr(open + 1, close - open - 1);
  const std::string head = pattern.substr(0, open);
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> tails, ExpandBraces(pattern.substr(close + 1)));
  std::vector<std::string> choices;
  const size_t dots = inside.find("..");
  if (dots != std::string::npos) {
    const std::string lo_text = inside.substr(0, dots);
    const std::string hi_text = inside.substr(dots + 2);
    uint64_t lo = 0;
    uint64_t hi = 0;
    if (lo_text.empty() || hi_text.empty() || lo_text.size() > 18 || hi_text.size() > 18 ||
        !absl::SimpleAtoi(lo_text, &lo) || !absl::SimpleAtoi(hi_text, &hi) ||
        lo_text.find_first_not_of("0123456789") != std::string::npos ||
        hi_text.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", pattern, "': '{", inside, "}' is not a range like {000..127}"));
    }
    if (hi < lo) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", pattern, "': the range {", inside, "} runs backwards"));
    }
    if (hi - lo >= kMaxPaths) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", pattern, "': the range {", inside, "} names over 2^20 paths"));
    }
    for (uint64_t v = lo; v <= hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo_text.size()) {
        digits.insert(0, lo_text.size() - digits.size(), '0');
      }
      choices.push_back(std::move(digits));
    }
  } else {
    choices = absl::StrSplit(inside, ',');
  }
  if (choices.size() * tails.size() > kMaxPaths) {
    return absl::InvalidArgumentError(absl::StrCat("'", pattern, "' names over 2^20 paths"));
  }
  std::vector<std::string> out;
  out.reserve(choices.size() * tails.size());
  for (const std::string& c : choices) {
    for (const std::string& t : tails) out.push_back(absl::StrCat(head, c, t));
  }
  return out;
}

namespace {

// A label from a shard sample's member: its text an integer ("cls"), or an integer field of
// its JSON member ("json:KEY"). The error names the shard, key and member.
StatusOr<int64_t> ReadMemberLabel(const std::string& shard, const ShardSample& sample,
                                  const std::string& label_member, const ReadAt& read) {
  const bool json = label_member.rfind("json:", 0) == 0;
  const std::string field = json ? "json" : label_member;
  const ShardField* f = sample.Find(field);
  const std::string where = absl::StrCat(shard, ": sample '", sample.key, "'");
  if (f == nullptr) {
    return absl::DataLossError(absl::StrCat(where, " has no '", field, "' member for its label"));
  }
  // A label is a number or a small JSON document; 1 MiB bounds what a hostile size costs.
  if (f->size > (int64_t{1} << 20)) {
    return absl::DataLossError(
        absl::StrCat(where, ": its '", field, "' member of ", f->size, " bytes is no label"));
  }
  SLUICE_ASSIGN_OR_RETURN(std::string text, read(f->offset, f->size));
  if (static_cast<int64_t>(text.size()) != f->size) {
    return absl::DataLossError(absl::StrCat(where, ": reading its '", field, "' member failed"));
  }
  int64_t label = 0;
  if (!json) {
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &label)) {
      return absl::DataLossError(
          absl::StrCat(where, ": its '", field, "' member is not an integer label"));
    }
    return label;
  }
  const std::string key = label_member.substr(5);
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains(key) ||
      !doc[key].is_number_integer()) {
    return absl::DataLossError(absl::StrCat(where, ": its json member has no integer '", key, "'"));
  }
  return doc[key].get<int64_t>();
}

// The index of `shard` (SHARD.idx beside it, or URL + ".idx"), or nullopt when it has none.
// An index made for another version of the shard (its size differs) is an error: its ranges
// would read the wrong bytes.
StatusOr<std::optional<TarIndex>> LoadShardIndex(const std::string& shard, const std::string& shown,
                                                 int64_t size, const ops::Storage& urls) {
  const std::string path = shard + ".idx";
  std::string text;
  if (ops::IsUrl(shard)) {
    StatusOr<Tensor> got = urls.ReadFile(path, int64_t{1} << 30);
    if (got.status().code() == absl::StatusCode::kNotFound) return std::optional<TarIndex>();
    if (!got.ok()) return got.status();
    text = std::string(got->bytes());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::optional<TarIndex>();
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  SLUICE_ASSIGN_OR_RETURN(TarIndex index, ParseTarIndex(shown + ".idx", text));
  if (index.shard_size != size) {
    return absl::DataLossError(absl::StrCat(shown, ".idx indexes a shard of ", index.shard_size,
                                            " bytes, but the shard has ", size,
                                            ": run `sluice index` on it again"));
  }
  return std::optional<TarIndex>(std::move(index));
}

}  // namespace

StatusOr<std::vector<std::string>> ShardPaths(const SourceSpec& spec) {
  std::vector<std::string> shards;
  std::set<std::string> seen;
  for (const std::string& pattern : spec.shards) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> expanded, ExpandBraces(pattern));
    for (const std::string& p : expanded) {
      if (ops::IsUrl(p)) {  // a URL names one shard: no globbing on a web server
        if (seen.insert(p).second) shards.push_back(p);
        continue;
      }
      SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> matches, ExpandGlob(p));
      for (std::string& m : matches) {
        if (seen.insert(m).second) shards.push_back(std::move(m));
      }
    }
  }
  return shards;
}

namespace {

// Lists every sample of the shards: one entry per key, its data member's span, and a
// problem where it cannot be read.
Status ResolveShards(const SourceSpec& spec, SourceFiles* files) {
  SLUICE_ASSIGN_OR_RETURN(const std::vector<std::string> shards, ShardPaths(spec));
  const bool labels = spec.label == LabelMode::kMember;
  const ops::Storage& urls = ops::LocalOrUrlStorage();
  for (const std::string& shard : shards) {
    // A local shard is read through one descriptor; a URL with a range request per read.
    std::unique_ptr<LocalTarFile> local;
    int64_t size = 0;
    ReadAt read;
    const std::string shown = ops::IsUrl(shard) ? ops::RedactUrl(shard) : shard;
    if (ops::IsUrl(shard)) {
      SLUICE_ASSIGN_OR_RETURN(size, urls.Size(shard));
      read = [&urls, &shard, size](int64_t offset, int64_t n) -> StatusOr<std::string> {
        n = std::min(n, size - offset);
        if (n <= 0) return std::string();
        SLUICE_ASSIGN_OR_RETURN(Tensor t, urls.ReadRange(shard, offset, n, n));
        return std::string(t.bytes());
      };
    } else {
      SLUICE_ASSIGN_OR_RETURN(local, LocalTarFile::Open(shard));
      size = local->size();
      read = local->Reader();
    }
    // The shard's index (SHARD.idx, `sluice index`) when there is one: no scan, and the small
    // members (labels) from it.
    std::map<int64_t, std::string> inlined;
    SLUICE_ASSIGN_OR_RETURN(std::optional<TarIndex> index,
                            LoadShardIndex(shard, shown, size, urls));
    TarScan scan;
    if (index.has_value()) {
      for (size_t m = 0; m < index->scan.members.size(); ++m) {
        const TarMember& member = index->scan.members[m];
        if (member.size == 0 || !index->inline_bytes[m].empty()) {
          inlined[member.offset] = index->inline_bytes[m];
        }
      }
      scan = std::move(index->scan);
    } else {
      SLUICE_ASSIGN_OR_RETURN(scan, ScanTar(shown, size, read));
    }
    const ReadAt small_read = [&inlined, &read](int64_t offset, int64_t n) {
      auto it = inlined.find(offset);
      if (it != inlined.end() && static_cast<int64_t>(it->second.size()) == n) {
        return StatusOr<std::string>(it->second);
      }
      return read(offset, n);
    };
    for (const ShardSample& sample : GroupSamples(scan.members)) {
      ShardSpan span;
      span.key = sample.key;
      if (const ShardField* f = sample.Find(spec.data)) {
        span.offset = f->offset;
        span.size = f->size;
      } else {
        span.problem =
            absl::StrCat(shown, ": sample '", sample.key, "' has no '", spec.data, "' member");
      }
      int64_t label = -1;
      if (labels) {
        StatusOr<int64_t> l = ReadMemberLabel(shown, sample, spec.label_member, small_read);
        if (l.ok()) {
          label = *l;
        } else if (span.problem.empty()) {
          span.problem = std::string(l.status().message());
        }
      }
      files->paths.push_back(shard);
      files->spans.push_back(std::move(span));
      if (labels) files->labels.push_back(label);
    }
    if (!scan.problem.empty()) {
      // What the damage hides is unknown: one sample stands for it, so that on_error (fail or
      // skip) applies to it as to any sample that cannot be read.
      ShardSpan lost;
      lost.key = absl::StrCat("(after ", scan.members.size(), " members)");
      lost.problem = scan.problem;
      files->paths.push_back(shard);
      files->spans.push_back(std::move(lost));
      if (labels) files->labels.push_back(-1);
    }
  }
  if (files->paths.empty()) {
    std::vector<std::string> named;
    for (const std::string& s : spec.shards) named.push_back(ops::RedactUrl(s));
    return absl::NotFoundError(
        absl::StrCat("the shards (", absl::StrJoin(named, ", "), ") hold no samples"));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<SourceFiles> ResolveSource(const SourceSpec& spec) {
  if (!spec.shards.empty()) {
    if (!spec.files.empty() || !spec.manifest.empty()) {
      return absl::InvalidArgumentError("source: give one of 'files', 'manifest' and 'shards'");
    }
    SourceFiles files;
    SLUICE_RETURN_IF_ERROR(ResolveShards(spec, &files));
    return files;
  }
  if (spec.files.empty() == spec.manifest.empty()) {
    return absl::InvalidArgumentError(spec.files.empty()
                                          ? "source: give either 'files' or 'manifest'"
                                          : "source: give either 'files' or 'manifest', not both");
  }
  SourceFiles files;
  if (!spec.manifest.empty()) {
    SLUICE_ASSIGN_OR_RETURN(files.paths, ReadManifest(spec.manifest));
  } else {
    std::vector<std::string> seen_sorted;
    for (const std::string& pattern : spec.files) {
      SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> matches, ExpandGlob(pattern));
      std::vector<std::string> fresh;
      for (std::string& m : matches) {
        if (!std::binary_search(seen_sorted.begin(), seen_sorted.end(), m)) {
          fresh.push_back(std::move(m));
        }
      }
      files.paths.insert(files.paths.end(), fresh.begin(), fresh.end());
      // `fresh` is sorted (matches were); merge it into the sorted set of seen paths.
      std::vector<std::string> merged;
      merged.reserve(seen_sorted.size() + fresh.size());
      std::merge(seen_sorted.begin(), seen_sorted.end(), fresh.begin(), fresh.end(),
                 std::back_inserter(merged));
      seen_sorted = std::move(merged);
    }
  }
  if (spec.label == LabelMode::kParentDir) {
    std::vector<std::string> parents;
    parents.reserve(files.paths.size());
    for (const std::string& p : files.paths) {
      std::error_code ec;
      fs::path abs = fs::absolute(fs::path(p), ec);
      if (ec) abs = fs::path(p);
      parents.push_back(abs.parent_path().filename().string());
    }
    std::map<std::string, int64_t> index;
    for (const std::string& name : parents) index.emplace(name, 0);
    int64_t next = 0;
    for (auto& [name, i] : index) {
      i = next++;
      files.class_names.push_back(name);
    }
    files.labels.reserve(parents.size());
    for (const std::string& name : parents) files.labels.push_back(index[name]);
  }
  return files;
}

Schema SourceSchema(LabelMode label, bool shards) {
  std::vector<FieldSpec> fields = {{"path", DType::kBytes, {kUnknownDim}}};
  if (label != LabelMode::kNone) fields.push_back({"label", DType::kI64, {}});
  if (shards) {
    fields.push_back({"span", DType::kI64, {2}});
    fields.push_back({"key", DType::kBytes, {kUnknownDim}});
    fields.push_back({"problem", DType::kBytes, {kUnknownDim}});
  }
  return Schema(std::move(fields));
}

Schema SourceSchema(const SourceSpec& spec) {
  return SourceSchema(spec.label, !spec.shards.empty());
}

namespace {

// A seeded Fisher-Yates permutation of 0..n-1.
std::vector<uint64_t> Permutation(uint64_t n, uint64_t seed, uint32_t epoch) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  if (n > 1) {
    Rng rng(SeedFor(seed, epoch, 0, kSourceRngPosition));
    for (uint64_t i = n - 1; i > 0; --i) {
      uint64_t j = static_cast<uint64_t>(rng.UniformInt(0, static_cast<int64_t>(i)));
      std::swap(order[i], order[j]);
    }
  }
  return order;
}

}  // namespace

std::vector<uint64_t> EpochOrder(uint64_t count, bool shuffle, uint64_t seed, uint32_t epoch,
                                 const std::vector<uint64_t>& groups) {
  if (shuffle && groups.empty()) return Permutation(count, seed, epoch);
  std::vector<uint64_t> order;
  order.reserve(count);
  if (!shuffle) {
    for (uint64_t i = 0; i < count; ++i) order.push_back(i);
    return order;
  }
  for (uint64_t g : Permutation(groups.size(), seed, epoch)) {
    const uint64_t end = g + 1 < groups.size() ? std::min(groups[g + 1], count) : count;
    for (uint64_t i = std::min(groups[g], count); i < end; ++i) order.push_back(i);
  }
  return order;
}

std::vector<uint64_t> ShardGroups(const SourceFiles& files, uint64_t count) {
  std::vector<uint64_t> starts;
  if (files.spans.empty()) return starts;
  count = std::min<uint64_t>(count, files.paths.size());
  for (uint64_t i = 0; i < count; ++i) {
    if (i == 0 || files.paths[i] != files.paths[i - 1]) starts.push_back(i);
  }
  return starts;
}

Element MakeSourceElement(const SourceFiles& files, bool with_label, uint32_t epoch,
                          uint64_t index) {
  return MakeSourceElement(files, with_label, SampleId{epoch, index}, index);
}

Element MakeSourceElement(const SourceFiles& files, bool with_label, SampleId id, uint64_t file) {
  Element e;
  e.id = id;
  e.origin = files.paths[file];
  e.tensors.push_back(Tensor::FromBytes(e.origin));
  if (with_label) e.tensors.push_back(Tensor::Scalar(files.labels[file]));
  if (file < files.spans.size()) {
    const ShardSpan& span = files.spans[file];
    // A URL's user, password and query (where credentials hide) stay out of messages.
    e.origin = absl::StrCat(ops::IsUrl(files.paths[file]) ? ops::RedactUrl(files.paths[file])
                                                          : files.paths[file],
                            ":", span.key);
    Tensor where = Tensor::Zeros(DType::kI64, {2});
    where.mutable_data<int64_t>()[0] = span.offset;
    where.mutable_data<int64_t>()[1] = span.size;
    e.tensors.push_back(std::move(where));
    e.tensors.push_back(Tensor::FromBytes(span.key));
    e.tensors.push_back(Tensor::FromBytes(span.problem));
  }
  return e;
}

std::vector<uint64_t> ShuffleGroups(const SourceSpec& spec, const SourceFiles& files,
                                    uint64_t count) {
  if (!spec.shard_order) return {};
  return ShardGroups(files, count);
}

EpochShare EpochShareOf(uint64_t count, bool shuffle, uint64_t seed, uint32_t epoch,
                        const Shard& shard, EvenRule even, const SourceProgress* resume,
                        const std::vector<uint64_t>& groups) {
  const std::vector<bool>* before = nullptr;
  if (resume != nullptr) {
    auto it = resume->divided.find(epoch);
    if (it != resume->divided.end()) before = &it->second;
  }
  return ShareOf(EpochOrder(count, shuffle, seed, epoch, groups), before, shard, even);
}

int64_t SamplesPerEpoch(const SourceFiles& files, int64_t take) {
  int64_t n = static_cast<int64_t>(files.paths.size());
  return take < 0 ? n : std::min(n, take);
}

bool SourceProgress::Consumed(SampleId id) const {
  if (id.epoch < first_epoch) return true;
  if (padded.count(id) > 0) return true;
  auto it = consumed.find(id.epoch);
  return it != consumed.end() && id.index < it->second.size() && it->second[id.index];
}

std::string SourceProgress::BitsToBytes(const std::vector<bool>& bits) {
  std::string out((bits.size() + 7) / 8, '\0');
  for (size_t i = 0; i < bits.size(); ++i) {
    if (bits[i]) out[i / 8] = static_cast<char>(static_cast<uint8_t>(out[i / 8]) | (1u << (i % 8)));
  }
  return out;
}

std::vector<bool> SourceProgress::BitsFromBytes(std::string_view bytes) {
  std::vector<bool> bits(bytes.size() * 8, false);
  for (size_t i = 0; i < bits.size(); ++i) {
    bits[i] = (static_cast<uint8_t>(bytes[i / 8]) >> (i % 8)) & 1u;
  }
  return bits;
}

StatusOr<SourceProgress> MergeRankProgress(const std::vector<SourceProgress>& ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("no rank's progress to merge");
  size_t slowest = 0;
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (ranks[r].first_epoch < ranks[slowest].first_epoch) slowest = r;
  }
  const uint32_t first = ranks[slowest].first_epoch;
  auto add = [](std::vector<bool>& into, const std::vector<bool>& bits) {
    if (into.size() < bits.size()) into.resize(bits.size(), false);
    for (size_t i = 0; i < bits.size(); ++i) {
      if (bits[i]) into[i] = true;
    }
  };
  SourceProgress merged;
  merged.first_epoch = first;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const SourceProgress& p = ranks[r];
    if (p.first_epoch > first) {
      auto it = p.finished.find(first);
      if (p.first_epoch > first + 1 || it == p.finished.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, " has finished epoch ", p.first_epoch - 1, " while rank ",
                         slowest, " is still in epoch ", first,
                         ": the states of ranks more than one epoch apart "
                         "cannot be merged (take every rank's state at the same step)"));
      }
      add(merged.consumed[first], it->second);
    }
    for (const auto& [epoch, bits] : p.consumed) {
      if (epoch >= p.first_epoch) add(merged.consumed[epoch], bits);
    }
  }
  merged.divided = merged.consumed;
  return merged;
}

SourceIterator::SourceIterator(std::shared_ptr<const SourceFiles> files, SourceOptions options)
    : files_(std::move(files)),
      options_(options),
      schema_(SourceSchema(options.with_label ? LabelMode::kParentDir : LabelMode::kNone,
                           !files_->spans.empty())) {
  per_epoch_ = static_cast<uint64_t>(SamplesPerEpoch(*files_, options_.take));
  if (options_.with_label && files_->labels.size() != files_->paths.size()) {
    options_.with_label = false;  // programmer error guard: no labels were resolved
    schema_ = SourceSchema(LabelMode::kNone, !files_->spans.empty());
  }
  if (options_.resume != nullptr) epoch_ = options_.resume->first_epoch;
}

Status SourceIterator::GetNext(Element* out, bool* end_of_stream) {
  if (cancelled_.load(std::memory_order_relaxed)) {
    return absl::CancelledError("pipeline cancelled");
  }
  const SourceProgress* resume = options_.resume.get();
  uint64_t index = 0;
  for (;;) {
    if (share_ready_ && position_ >= share_.ids.size()) {
      ++epoch_;
      position_ = 0;
      share_ready_ = false;
    }
    // A rank whose share of a whole epoch is empty (more ranks than samples) gets nothing.
    bool finished = SamplesPerRank(per_epoch_, options_.shard, options_.even) == 0 ||
                    (options_.epochs >= 0 && static_cast<int64_t>(epoch_) >= options_.epochs);
    if (finished) {
      *end_of_stream = true;
      return absl::OkStatus();
    }
    if (!share_ready_) {
      // The share of an epoch divided after a resume may be empty: the loop moves on.
      share_ = EpochShareOf(per_epoch_, options_.shuffle, options_.seed, epoch_, options_.shard,
                            options_.even, resume, options_.shuffle_groups);
      share_ready_ = true;
      continue;
    }
    index = share_.ids[position_++];
    if (resume == nullptr || !resume->Consumed(SampleId{epoch_, index})) break;
  }
  *out = MakeSourceElement(*files_, options_.with_label, SampleId{epoch_, index},
                           share_.FileOf(index));
  *end_of_stream = false;
  if (options_.produced != nullptr) options_.produced->fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

SourceProgress Unreceive(SourceProgress progress, const std::vector<SampleId>& ids,
                         uint64_t per_epoch) {
  SourceProgress& p = progress;
  for (const SampleId& id : ids) {
    if (id.epoch < p.first_epoch) {
      if (!p.finished.empty()) continue;  // a rank's folded epoch: see the header
      // The epochs its receipt folded were wholly received: open them again, all set.
      for (uint32_t e = id.epoch; e < p.first_epoch; ++e) {
        p.consumed[e].assign(per_epoch, true);
      }
      p.first_epoch = id.epoch;
    }
    if (id.index >= per_epoch) {
      p.padded.erase(id);
      continue;
    }
    auto it = p.consumed.find(id.epoch);
    if (it != p.consumed.end() && id.index < it->second.size()) it->second[id.index] = false;
  }
  return progress;
}

}  // namespace sluice::pipeline
