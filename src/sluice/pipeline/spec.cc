// PipelineSpec parsing and serialization.
//
// YAML and JSON both go through yaml-cpp (JSON is YAML's flow syntax). yaml-cpp keeps every
// scalar as text, so the types are decided here, following YAML 1.2's core schema: a quoted
// scalar is always a string; a plain one is null, a bool, an int, a float, or else a string.
// Every node remembers where it was, so each error names file:line:col and the path of the
// value ("ops[2].random_resized_crop.size").
//
// The canonical form is JSON written with nlohmann::json (its objects keep keys sorted), with
// every field present and each op's arguments bound against the built-in registry's schema,
// so that spelling a default out or leaving it away gives the same string and fingerprint.
#include "sluice/pipeline/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace sluice::pipeline {
namespace {

using ops::ArgValue;
using Json = nlohmann::json;

constexpr const char* kTopKeys[] = {"source",   "ops",    "batch", "padded_batch", "shuffle_buffer",
                                    "prefetch", "epochs", "take",  "options"};
constexpr const char* kSourceKeys[] = {"files", "manifest", "shards", "data",
                                       "label", "shuffle",  "seed",   "even"};
constexpr const char* kBatchKeys[] = {"size", "drop_remainder"};
constexpr const char* kPaddedBatchKeys[] = {"size", "drop_remainder", "padding_value",
                                            "padding_values"};
constexpr const char* kOptionKeys[] = {"deterministic", "threads", "on_error",
                                       "max_image_pixels", "max_file_bytes"};

// ---------------------------------------------------------------------------------------------
// Small text helpers.

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), so that
// "shufle_buffer" and "decode_jepg" are one edit from what was meant.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The candidate closest to `name`, if it is close enough to be a likely typo; else "".
std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(1, (name.size() + 2) / 4);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    size_t distance = EditDistance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

// A double-quoted string with JSON escapes, which YAML's double-quoted style also reads.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string_view StripSign(std::string_view s) {
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  return s;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool LooksInt(std::string_view s) {
  std::string_view digits = StripSign(s);
  return !digits.empty() && std::all_of(digits.begin(), digits.end(), IsDigit);
}

bool IsInfText(std::string_view s) {
  std::string_view t = StripSign(s);
  return t == ".inf" || t == ".Inf" || t == ".INF";
}

bool IsNanText(std::string_view s) { return s == ".nan" || s == ".NaN" || s == ".NAN"; }

// YAML 1.2 core schema floats: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, .inf, .nan.
bool LooksFloat(std::string_view s) {
  if (IsInfText(s) || IsNanText(s)) return true;
  std::string_view t = StripSign(s);
  size_t i = 0, int_digits = 0, frac_digits = 0;
  while (i < t.size() && IsDigit(t[i])) ++i, ++int_digits;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && IsDigit(t[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < t.size() && IsDigit(t[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == t.size();
}

bool IsTrueText(std::string_view s) { return s == "true" || s == "True" || s == "TRUE"; }
bool IsFalseText(std::string_view s) { return s == "false" || s == "False" || s == "FALSE"; }

// REQUIRES: LooksFloat(s).
double ParseDouble(std::string_view s) {
  if (IsNanText(s)) return std::numeric_limits<double>::quiet_NaN();
  if (IsInfText(s)) {
    return s[0] == '-' ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity();
  }
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  double value = 0;
  auto result = std::from_chars(s.data(), s.data() + s.size(), value);
  if (result.ec == std::errc::result_out_of_range) {
    bool negative = !s.empty() && s[0] == '-';
    // Overflow gives +-inf; underflow (a tiny exponent) gives zero.
    std::string_view t = StripSign(s);
    size_t e = t.find_first_of("eE");
    bool big_exponent = e != std::string_view::npos && t.substr(e + 1, 1) != "-";
    double magnitude = big_exponent ? std::numeric_limits<double>::infinity() : 0.0;
    return negative ? -magnitude : magnitude;
  }
  return value;
}

// Shortest text that reads back as the same double, always spelled as a float.
std::string FormatDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, result.ptr);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// Whether `s` can be written as a plain YAML scalar and still read back as the same string.
bool IsPlainSafe(std::string_view s) {
  if (s.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
          c == '/')) {
      return false;
    }
  }
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string> kReserved = {"true", "false", "null", "yes", "no",
                                                  "on",   "off",   "y",    "n"};
  return kReserved.count(lower) == 0;
}

std::string YamlString(std::string_view s) { return IsPlainSafe(s) ? std::string(s) : Quote(s); }

std::string LabelName(const SourceSpec& source) {
  switch (source.label) {
    case LabelMode::kParentDir:
      return "parent_dir";
    case LabelMode::kMember:
      return source.label_member;
    case LabelMode::kNone:
      break;
  }
  return "none";
}

// A shard member's field: what follows the key's first '.' ("jpg", "seg.png").
bool ValidMemberField(const std::string& field) {
  if (field.empty() || field.size() > 64) return false;
  for (char c : field) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}
const char* OnErrorName(OnError mode) { return mode == OnError::kSkip ? "skip" : "fail"; }

// "" when `v` is in [min, max] (or is -1 and `minus_one` says what -1 means); otherwise the
// rule it breaks: "must be in [1, 65536], got 0".
std::string RangeRule(int64_t v, int64_t min, int64_t max, const char* minus_one) {
  if ((v >= min && v <= max) || (minus_one != nullptr && v == -1)) return "";
  std::string rule = absl::StrCat("must be in [", min, ", ", max, "]");
  if (minus_one != nullptr) absl::StrAppend(&rule, ", or -1 ", minus_one);
  return absl::StrCat(rule, ", got ", v);
}

// ---------------------------------------------------------------------------------------------
// YAML scalars.

enum class ScalarKind { kNull, kBool, kInt, kFloat, kString };

ScalarKind Classify(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return ScalarKind::kNull;
  // "!" is yaml-cpp's tag for quoted scalars; an explicit !!str also forces a string.
  if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return ScalarKind::kString;
  const std::string& text = node.Scalar();
  if (IsTrueText(text) || IsFalseText(text)) return ScalarKind::kBool;
  if (LooksInt(text)) return ScalarKind::kInt;
  if (LooksFloat(text)) return ScalarKind::kFloat;
  return ScalarKind::kString;
}

// How a value is shown after "got": 3, 0.5, true, "sixty", null, a list, a map.
std::string Describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  if (Classify(node) == ScalarKind::kString) return Quote(node.Scalar());
  return node.Scalar();
}

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF), the text JSON can carry unchanged.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the byte after the lead byte
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(extra)) return false;
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += extra + 1;
  }
  return true;
}

// A scalar that is not UTF-8: where it is and its bytes.
struct NonUtf8 {
  YAML::Mark mark;
  std::string text;
};

// The first scalar (key or value) under `node` that is not UTF-8. Specs nest a few levels;
// the walk stops at `depth` 0 (an alias can make the graph cyclic, and nothing that deep is
// a valid spec anyway).
std::optional<NonUtf8> FindNonUtf8(const YAML::Node& node, int depth) {
  if (node.IsScalar()) {
    if (IsUtf8(node.Scalar())) return std::nullopt;
    return NonUtf8{node.Mark(), node.Scalar()};
  }
  if (depth == 0) return std::nullopt;
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) {
      if (auto bad = FindNonUtf8(item, depth - 1)) return bad;
    }
  } else if (node.IsMap()) {
    for (const auto& entry : node) {
      if (auto bad = FindNonUtf8(entry.first, depth - 1)) return bad;
      if (auto bad = FindNonUtf8(entry.second, depth - 1)) return bad;
    }
  }
  return std::nullopt;
}

// A value in the file: its node, where it is, and its path for messages.
struct Value {
  YAML::Node node;
  YAML::Mark mark;
  std::string path;
};

// One key of a map with its value.
struct Entry {
  std::string key;
  YAML::Mark key_mark;
  Value value;
};

std::string JoinPath(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(Av(parent), ".", Av(key));
}

// ---------------------------------------------------------------------------------------------
// The parser.

class Parser {
 public:
  Parser(std::string_view filename, const ops::Registry& registry)
      : filename_(filename.empty() ? "<spec>" : filename), registry_(registry) {}

  StatusOr<PipelineSpec> Parse(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::ParserException& e) {
      return Error(e.mark, "", absl::StrCat("YAML syntax error: ", e.msg));
    } catch (const YAML::Exception& e) {
      return Error(e.mark, "", absl::StrCat("cannot read YAML: ", e.msg));
    }
    // Strings travel to workers in the canonical JSON, which holds UTF-8 only: other bytes
    // would arrive changed (and change the fingerprint), so they are an error here.
    if (auto bad = FindNonUtf8(root, /*depth=*/32)) {
      return Error(bad->mark, "", absl::StrCat("not UTF-8 text: \"", absl::CHexEscape(bad->text),
                                               "\""));
    }
    try {
      return ParseRoot(root);
    } catch (const YAML::Exception& e) {
      return Error(e.mark, "", absl::StrCat("cannot read YAML: ", e.msg));
    }
  }

 private:
  Status Error(const YAML::Mark& mark, std::string_view path, std::string_view message) const {
    std::string where = filename_;
    if (mark.line >= 0 && mark.column >= 0) {
      absl::StrAppend(&where, ":", mark.line + 1, ":", mark.column + 1);
    }
    if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", Av(message)));
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", Av(path), ": ", Av(message)));
  }
  Status Error(const Value& value, std::string_view message) const {
    return Error(value.mark, value.path, message);
  }
  Status TypeError(const Value& value, std::string_view expected) const {
    return Error(value, absl::StrCat("expected ", Av(expected), ", got ", Describe(value.node)));
  }

  // The entries of a map in file order. Keys must be strings and unique; when `known` is not
  // empty, every key must be one of them.
  template <size_t N>
  StatusOr<std::vector<Entry>> Entries(const Value& map, const char* const (&known)[N]) const {
    return Entries(map, std::vector<std::string>(known, known + N));
  }
  StatusOr<std::vector<Entry>> Entries(const Value& map,
                                       const std::vector<std::string>& known) const {
    std::vector<Entry> entries;
    std::set<std::string> seen;
    for (auto it = map.node.begin(); it != map.node.end(); ++it) {
      // Copies: yaml-cpp's iterator hands out a temporary pair.
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      if (!key.IsScalar()) {
        return Error(key.Mark(), map.path,
                     absl::StrCat("keys must be names, got ", Describe(key), " as a key"));
      }
      const std::string& name = key.Scalar();
      std::string path = JoinPath(map.path, name);
      if (!known.empty() && std::find(known.begin(), known.end(), name) == known.end()) {
        std::string message = "unknown key";
        std::string closest = ClosestName(name, known);
        if (!closest.empty()) absl::StrAppend(&message, ", did you mean '", closest, "'?");
        absl::StrAppend(&message, " (known keys: ", absl::StrJoin(known, ", "), ")");
        return Error(key.Mark(), path, message);
      }
      if (!seen.insert(name).second) return Error(key.Mark(), path, "duplicate key");
      // An implicit null ("key:" and nothing) sits where the next token starts; point at the
      // key instead.
      Entry entry{name, key.Mark(),
                  Value{value, value.IsNull() ? key.Mark() : value.Mark(), std::move(path)}};
      entries.push_back(std::move(entry));
    }
    return entries;
  }

  StatusOr<int64_t> ReadInt(const Value& value) const {
    if (!value.node.IsScalar() || Classify(value.node) != ScalarKind::kInt) {
      return TypeError(value, "an int");
    }
    std::string_view text = value.node.Scalar();
    if (text[0] == '+') text.remove_prefix(1);
    int64_t result = 0;
    auto parsed = std::from_chars(text.data(), text.data() + text.size(), result);
    if (parsed.ec != std::errc()) {
      return Error(value, absl::StrCat("integer out of range: ", value.node.Scalar()));
    }
    return result;
  }

  // Reads an int in [min, max]; `minus_one` (if not null) names what -1 means, and allows it.
  StatusOr<int64_t> ReadIntIn(const Value& value, int64_t min, int64_t max,
                              const char* minus_one = nullptr) const {
    SLUICE_ASSIGN_OR_RETURN(int64_t result, ReadInt(value));
    std::string rule = RangeRule(result, min, max, minus_one);
    if (rule.empty()) return result;
    return Error(value, rule);
  }

  // A finite number within [-limit, limit].
  StatusOr<double> ReadFinite(const Value& value, double limit) const {
    SLUICE_ASSIGN_OR_RETURN(double result, ReadNumber(value));
    if (std::isfinite(result) && std::abs(result) <= limit) return result;
    return Error(value, absl::StrCat("must be a finite number in [-", FormatDouble(limit), ", ",
                                     FormatDouble(limit), "], got ", Describe(value.node)));
  }

  StatusOr<uint64_t> ReadUint64(const Value& value) const {
    if (!value.node.IsScalar() || Classify(value.node) != ScalarKind::kInt) {
      return TypeError(value, "an int");
    }
    std::string_view text = value.node.Scalar();
    if (text[0] == '-') return Error(value, absl::StrCat("must be >= 0, got ", Av(text)));
    if (text[0] == '+') text.remove_prefix(1);
    uint64_t result = 0;
    auto parsed = std::from_chars(text.data(), text.data() + text.size(), result);
    if (parsed.ec != std::errc()) {
      return Error(value, absl::StrCat("integer out of range: ", value.node.Scalar()));
    }
    return result;
  }

  StatusOr<bool> ReadBool(const Value& value) const {
    if (!value.node.IsScalar() || Classify(value.node) != ScalarKind::kBool) {
      return TypeError(value, "a bool (true or false)");
    }
    return IsTrueText(value.node.Scalar());
  }

  StatusOr<double> ReadNumber(const Value& value) const {
    ScalarKind kind = value.node.IsScalar() ? Classify(value.node) : ScalarKind::kNull;
    if (kind != ScalarKind::kInt && kind != ScalarKind::kFloat) {
      return TypeError(value, "a number");
    }
    return ParseDouble(value.node.Scalar());
  }

  // Any scalar other than null reads as its text.
  StatusOr<std::string> ReadString(const Value& value) const {
    if (!value.node.IsScalar() || Classify(value.node) == ScalarKind::kNull) {
      return TypeError(value, "a string");
    }
    if (value.node.Scalar().empty()) return Error(value, "must not be empty");
    return value.node.Scalar();
  }

  StatusOr<std::string> ReadChoice(const Value& value,
                                   const std::vector<std::string>& choices) const {
    if (value.node.IsScalar() && Classify(value.node) != ScalarKind::kNull) {
      const std::string& text = value.node.Scalar();
      if (std::find(choices.begin(), choices.end(), text) != choices.end()) return text;
    }
    return Error(value, absl::StrCat("must be one of ", absl::StrJoin(choices, ", "), "; got ",
                                     Describe(value.node)));
  }

  StatusOr<PipelineSpec> ParseRoot(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      return Error(YAML::Mark(), "", "the spec is empty; it needs at least a 'source' key");
    }
    if (!root.IsMap()) {
      return Error(root.Mark(), "",
                   absl::StrCat("expected a map at the top level (source, ops, batch, ...), got ",
                                Describe(root)));
    }
    SLUICE_ASSIGN_OR_RETURN(std::vector<Entry> entries,
                            Entries(Value{root, root.Mark(), ""}, kTopKeys));
    PipelineSpec spec;
    bool have_source = false;
    const Entry* batch_entry = nullptr;
    for (const Entry& entry : entries) {
      const Value& value = entry.value;
      if (entry.key == "source") {
        SLUICE_RETURN_IF_ERROR(ParseSource(value, &spec.source));
        have_source = true;
      } else if (entry.key == "ops") {
        SLUICE_RETURN_IF_ERROR(ParseOps(value, &spec.ops));
      } else if (entry.key == "batch" || entry.key == "padded_batch") {
        if (value.node.IsNull()) continue;  // null: no batching
        if (batch_entry != nullptr) {
          return Error(entry.key_mark, entry.key,
                       absl::StrCat("cannot be combined with '", batch_entry->key,
                                    "'; give one of batch or padded_batch"));
        }
        batch_entry = &entry;
        SLUICE_RETURN_IF_ERROR(ParseBatch(value, entry.key == "padded_batch", &spec.batch));
      } else if (entry.key == "shuffle_buffer") {
        SLUICE_ASSIGN_OR_RETURN(spec.shuffle_buffer,
                                ReadIntIn(value, 0, SpecLimits::kMaxShuffleBuffer));
      } else if (entry.key == "prefetch") {
        SLUICE_ASSIGN_OR_RETURN(spec.prefetch, ReadIntIn(value, 0, SpecLimits::kMaxPrefetch));
      } else if (entry.key == "epochs") {
        SLUICE_ASSIGN_OR_RETURN(spec.epochs,
                                ReadIntIn(value, 1, SpecLimits::kMaxEpochs, "to repeat forever"));
      } else if (entry.key == "take") {
        SLUICE_ASSIGN_OR_RETURN(spec.take,
                                ReadIntIn(value, 0, SpecLimits::kMaxTake, "for all samples"));
      } else if (entry.key == "options") {
        SLUICE_RETURN_IF_ERROR(ParseOptions(value, &spec.options));
      }
    }
    if (!have_source) {
      return Error(root.Mark(), "source",
                   "missing; a spec needs a source with 'files', 'manifest' or 'shards'");
    }
    return spec;
  }

  Status ParseSource(const Value& value, SourceSpec* source) {
    if (!value.node.IsMap()) return TypeError(value, "a map with 'files', 'manifest' or 'shards'");
    SLUICE_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(value, kSourceKeys));
    const Entry* files_entry = nullptr;
    const Entry* manifest_entry = nullptr;
    const Entry* shards_entry = nullptr;
    const Entry* data_entry = nullptr;
    const Entry* label_entry = nullptr;
    const Entry* shuffle_entry = nullptr;
    for (const Entry& entry : entries) {
      const Value& v = entry.value;
      if (entry.key == "files" || entry.key == "shards") {
        (entry.key == "files" ? files_entry : shards_entry) = &entry;
        std::vector<std::string>* list = entry.key == "files" ? &source->files : &source->shards;
        if (v.node.IsSequence()) {
          if (v.node.size() == 0) return Error(v, "must list at least one path or pattern");
          for (size_t i = 0; i < v.node.size(); ++i) {
            YAML::Node item = v.node[i];
            Value item_value{item, item.IsNull() ? v.mark : item.Mark(),
                             absl::StrCat(v.path, "[", i, "]")};
            SLUICE_ASSIGN_OR_RETURN(std::string file, ReadString(item_value));
            list->push_back(std::move(file));
          }
        } else if (v.node.IsScalar() && Classify(v.node) != ScalarKind::kNull) {
          SLUICE_ASSIGN_OR_RETURN(std::string file, ReadString(v));
          list->push_back(std::move(file));
        } else {
          return TypeError(v, "a path or glob, or a list of them");
        }
      } else if (entry.key == "manifest") {
        manifest_entry = &entry;
        SLUICE_ASSIGN_OR_RETURN(source->manifest, ReadString(v));
      } else if (entry.key == "data") {
        data_entry = &entry;
        SLUICE_ASSIGN_OR_RETURN(source->data, ReadString(v));
        if (!ValidMemberField(source->data)) {
          return Error(v, absl::StrCat("'", source->data,
                                       "' is not a member field (letters, digits, '.', '_', "
                                       "'-', e.g. jpg)"));
        }
      } else if (entry.key == "label") {
        label_entry = &entry;
        SLUICE_ASSIGN_OR_RETURN(std::string label, ReadString(v));
        if (label == "none") {
          source->label = LabelMode::kNone;
        } else if (label == "parent_dir") {
          source->label = LabelMode::kParentDir;
        } else if (ValidMemberField(label.rfind("json:", 0) == 0 ? label.substr(5) : label)) {
          source->label = LabelMode::kMember;
          source->label_member = label;
        } else {
          return Error(v, absl::StrCat("expected none, parent_dir, a shard member's field (cls) "
                                       "or json:KEY, got '",
                                       label, "'"));
        }
      } else if (entry.key == "shuffle") {
        shuffle_entry = &entry;
        if (v.node.IsScalar() && v.node.Scalar() == "shards") {
          source->shuffle = source->shard_order = true;
        } else if (v.node.IsScalar() && Classify(v.node) == ScalarKind::kBool) {
          source->shuffle = IsTrueText(v.node.Scalar());
        } else {
          return TypeError(v, "true, false or shards");
        }
      } else if (entry.key == "seed") {
        SLUICE_ASSIGN_OR_RETURN(source->seed, ReadUint64(v));
      } else if (entry.key == "even") {
        SLUICE_ASSIGN_OR_RETURN(std::string even, ReadChoice(v, {"drop", "pad"}));
        source->even = even == "pad" ? EvenRule::kPad : EvenRule::kDrop;
      }
    }
    std::vector<const Entry*> given;
    for (const Entry* e : {files_entry, manifest_entry, shards_entry}) {
      if (e != nullptr) given.push_back(e);
    }
    if (given.empty()) {
      return Error(value,
                   "needs 'files' (a path or glob, or a list of them), 'manifest' or 'shards'");
    }
    std::sort(given.begin(), given.end(),
              [](const Entry* a, const Entry* b) { return a->key_mark.pos < b->key_mark.pos; });
    if (given.size() > 1) {
      const Entry* second = given[1];
      return Error(second->key_mark, value.path,
                   absl::StrCat("has both '", given[0]->key, "' and '", given[1]->key,
                                "'; give only one of 'files', 'manifest' and 'shards'"));
    }
    if (shards_entry != nullptr && data_entry == nullptr) {
      return Error(value,
                   "with 'shards' needs 'data': the member field holding each "
                   "sample's data (e.g. data: jpg)");
    }
    if (shards_entry == nullptr && data_entry != nullptr) {
      return Error(data_entry->key_mark, value.path, "'data' is for 'shards' only");
    }
    if (source->shard_order && shards_entry == nullptr) {
      return Error(shuffle_entry->value,
                   "'shards' (shard order) is for a 'shards' source; files and a manifest "
                   "take true or false");
    }
    if (source->label == LabelMode::kMember && shards_entry == nullptr) {
      return Error(label_entry->value,
                   "a member label is for 'shards' only (files take "
                   "none or parent_dir)");
    }
    if (source->label == LabelMode::kParentDir && shards_entry != nullptr) {
      return Error(label_entry->value,
                   "parent_dir is for 'files' and 'manifest'; a shard "
                   "sample's label comes from a member (e.g. label: cls)");
    }
    return absl::OkStatus();
  }

  Status ParseBatch(const Value& value, bool padded, BatchSpec* batch) {
    if (!value.node.IsMap()) {
      return TypeError(value, padded ? "a map {size: N, padding_value: X, ...}"
                                     : "a map {size: N, drop_remainder: BOOL}");
    }
    StatusOr<std::vector<Entry>> entries =
        padded ? Entries(value, kPaddedBatchKeys) : Entries(value, kBatchKeys);
    SLUICE_RETURN_IF_ERROR(entries.status());
    *batch = BatchSpec();
    batch->padded = padded;
    bool have_size = false;
    for (const Entry& entry : *entries) {
      const Value& v = entry.value;
      if (entry.key == "size") {
        SLUICE_ASSIGN_OR_RETURN(batch->size, ReadIntIn(v, 1, SpecLimits::kMaxBatchSize));
        have_size = true;
      } else if (entry.key == "drop_remainder") {
        SLUICE_ASSIGN_OR_RETURN(batch->drop_remainder, ReadBool(v));
      } else if (entry.key == "padding_value") {
        SLUICE_ASSIGN_OR_RETURN(batch->padding_value, ReadFinite(v, SpecLimits::kMaxPaddingValue));
      } else if (entry.key == "padding_values") {
        if (v.node.IsNull()) continue;
        if (!v.node.IsMap()) return TypeError(v, "a map {field: value}");
        SLUICE_ASSIGN_OR_RETURN(std::vector<Entry> fields, Entries(v, {}));
        for (const Entry& field : fields) {
          SLUICE_ASSIGN_OR_RETURN(batch->padding_values[field.key],
                                  ReadFinite(field.value, SpecLimits::kMaxPaddingValue));
        }
      }
    }
    if (!have_size) {
      return Error(value.mark, JoinPath(value.path, "size"),
                   "missing; the number of samples per batch");
    }
    return absl::OkStatus();
  }

  StatusOr<int64_t> ReadBounded(const Value& v, int64_t lo, int64_t hi) const {
    SLUICE_ASSIGN_OR_RETURN(int64_t n, ReadInt(v));
    if (n < lo || n > hi) {
      return Error(v, absl::StrCat("must be in [", lo, ", ", hi, "], got ", n));
    }
    return n;
  }

  Status ParseOptions(const Value& value, Options* options) {
    if (value.node.IsNull()) return absl::OkStatus();
    if (!value.node.IsMap()) return TypeError(value, "a map");
    SLUICE_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(value, kOptionKeys));
    for (const Entry& entry : entries) {
      const Value& v = entry.value;
      if (entry.key == "deterministic") {
        SLUICE_ASSIGN_OR_RETURN(options->deterministic, ReadBool(v));
      } else if (entry.key == "threads") {
        ScalarKind kind = v.node.IsScalar() ? Classify(v.node) : ScalarKind::kNull;
        if (kind == ScalarKind::kString && v.node.Scalar() == "auto") {
          options->threads = 0;
        } else if (kind == ScalarKind::kInt) {
          SLUICE_ASSIGN_OR_RETURN(int64_t threads, ReadInt(v));
          if (threads < 1 || threads > SpecLimits::kMaxThreads) {
            return Error(v, absl::StrCat("must be \"auto\" or an int in [1, ",
                                         SpecLimits::kMaxThreads, "], got ", threads));
          }
          options->threads = static_cast<int>(threads);
        } else {
          return TypeError(
              v, absl::StrCat("\"auto\" or an int in [1, ", SpecLimits::kMaxThreads, "]"));
        }
      } else if (entry.key == "on_error") {
        SLUICE_ASSIGN_OR_RETURN(std::string on_error, ReadChoice(v, {"fail", "skip"}));
        options->on_error = on_error == "skip" ? OnError::kSkip : OnError::kFail;
      } else if (entry.key == "max_image_pixels") {
        SLUICE_ASSIGN_OR_RETURN(options->limits.max_image_pixels,
                                ReadBounded(v, 1, Options::kMaxImagePixelsCap));
      } else if (entry.key == "max_file_bytes") {
        SLUICE_ASSIGN_OR_RETURN(options->limits.max_file_bytes,
                                ReadBounded(v, 1, Options::kMaxFileBytesCap));
      }
    }
    return absl::OkStatus();
  }

  Status ParseOps(const Value& value, std::vector<OpSpec>* ops) {
    if (value.node.IsNull()) return absl::OkStatus();
    if (!value.node.IsSequence()) return TypeError(value, "a list of ops");
    for (size_t i = 0; i < value.node.size(); ++i) {
      YAML::Node item = value.node[i];
      Value item_value{item, item.IsNull() ? value.mark : item.Mark(),
                       absl::StrCat(value.path, "[", i, "]")};
      OpSpec op;
      SLUICE_RETURN_IF_ERROR(ParseOp(item_value, &op));
      ops->push_back(std::move(op));
    }
    return absl::OkStatus();
  }

  Status ParseOp(const Value& item, OpSpec* op) {
    YAML::Node name_node;
    YAML::Node args_node;
    if (item.node.IsScalar()) {
      name_node = item.node;
    } else if (item.node.IsMap() && item.node.size() == 1 && item.node.begin()->first.IsScalar()) {
      name_node = item.node.begin()->first;
      args_node = item.node.begin()->second;
    } else {
      std::string got = Describe(item.node);
      if (item.node.IsMap()) {
        got = item.node.size() == 1 ? std::string("a map whose key is not a name")
                                    : absl::StrCat("a map with ", item.node.size(), " keys");
      }
      return Error(
          item, absl::StrCat("expected an op name or a one-key map {op_name: {args}}, got ", got));
    }
    op->name = name_node.Scalar();
    const ops::OpDef* def = registry_.Find(op->name);
    if (def == nullptr) {
      // The registry words the unknown-op error (with its suggestions) the same everywhere;
      // it fails before looking at the input schema.
      StatusOr<std::unique_ptr<ops::Op>> unknown = registry_.Create(op->name, {}, Schema());
      std::string message = unknown.ok() ? absl::StrCat("unknown op '", op->name, "'")
                                         : std::string(Sv(unknown.status().message()));
      return Error(name_node.Mark(), item.path, message);
    }
    const std::string op_path = JoinPath(item.path, op->name);
    // A bare name, `name: null` and `name: {}` all mean "no arguments given".
    const bool no_args = !args_node.IsDefined() || args_node.IsNull();
    Value args_value{args_node, no_args ? name_node.Mark() : args_node.Mark(), op_path};
    std::vector<Entry> entries;
    if (!no_args) {
      if (!args_node.IsMap()) return TypeError(args_value, "a map of arguments");
      SLUICE_ASSIGN_OR_RETURN(entries, Entries(args_value, {}));
    }
    for (const Entry& entry : entries) {
      SLUICE_ASSIGN_OR_RETURN(op->args[entry.key], ToArgValue(entry.value));
    }
    StatusOr<ops::Args> bound = ops::BindArgs(def->schema, op->args);
    if (bound.ok()) return absl::OkStatus();
    // BindArgs names the argument first ("size: expected 2 ints, got 3"): point at it.
    std::string message(Sv(bound.status().message()));
    std::string arg_name = message.substr(0, message.find(':'));
    auto is_name_char = [](unsigned char c) { return std::isalnum(c) || c == '_'; };
    if (arg_name.empty() || arg_name.size() == message.size() ||
        !std::all_of(arg_name.begin(), arg_name.end(), is_name_char)) {
      return Error(args_value, message);
    }
    YAML::Mark mark = args_value.mark;
    for (const Entry& entry : entries) {
      if (entry.key != arg_name) continue;
      mark = def->schema.FindArg(arg_name) != nullptr ? entry.value.mark : entry.key_mark;
    }
    std::string rest = message.substr(arg_name.size() + 1);
    if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    return Error(mark, JoinPath(op_path, arg_name), rest);
  }

  // Integers become int64, other numbers double, true/false bool, other scalars strings; a
  // list of ints an int list, a list of numbers with any float a float list.
  StatusOr<ArgValue> ToArgValue(const Value& value) const {
    if (value.node.IsScalar()) {
      switch (Classify(value.node)) {
        case ScalarKind::kNull:
          break;
        case ScalarKind::kBool:
          return ArgValue(IsTrueText(value.node.Scalar()));
        case ScalarKind::kInt: {
          SLUICE_ASSIGN_OR_RETURN(int64_t v, ReadInt(value));
          return ArgValue(v);
        }
        case ScalarKind::kFloat:
          return ArgValue(ParseDouble(value.node.Scalar()));
        case ScalarKind::kString:
          return ArgValue(value.node.Scalar());
      }
    }
    if (value.node.IsSequence()) {
      std::vector<int64_t> ints;
      std::vector<double> floats;
      bool any_float = false;
      for (size_t i = 0; i < value.node.size(); ++i) {
        YAML::Node item = value.node[i];
        Value item_value{item, item.IsNull() ? value.mark : item.Mark(),
                         absl::StrCat(value.path, "[", i, "]")};
        ScalarKind kind = item.IsScalar() ? Classify(item) : ScalarKind::kNull;
        if (kind == ScalarKind::kInt) {
          SLUICE_ASSIGN_OR_RETURN(int64_t v, ReadInt(item_value));
          ints.push_back(v);
          floats.push_back(static_cast<double>(v));
        } else if (kind == ScalarKind::kFloat) {
          any_float = true;
          floats.push_back(ParseDouble(item.Scalar()));
        } else {
          return Error(item_value,
                       absl::StrCat("lists of arguments hold numbers only, got ", Describe(item)));
        }
      }
      if (any_float) return ArgValue(std::move(floats));
      return ArgValue(std::move(ints));
    }
    return TypeError(value, "a number, a bool, a string or a list of numbers");
  }

  std::string filename_;
  const ops::Registry& registry_;
};

// ---------------------------------------------------------------------------------------------
// Writing.

// The arguments as they will run: bound against the built-in schema (defaults filled in,
// ints widened to floats where the schema says float). Ops the built-in registry does not
// know, or arguments it rejects, are kept as written.
std::map<std::string, ArgValue> CanonicalArgs(const OpSpec& op) {
  const ops::OpDef* def = ops::Registry::Builtin().Find(op.name);
  if (def != nullptr) {
    StatusOr<ops::Args> bound = ops::BindArgs(def->schema, op.args);
    if (bound.ok()) return bound->values();
  }
  return op.args;
}

Json ArgToJson(const ArgValue& value) {
  return std::visit([](const auto& v) { return Json(v); }, value);
}

Json ToJson(const PipelineSpec& spec) {
  Json source = Json::object();
  if (!spec.source.shards.empty()) {
    source["shards"] = spec.source.shards;
    source["data"] = spec.source.data;
  } else if (!spec.source.files.empty() || spec.source.manifest.empty()) {
    source["files"] = spec.source.files;
  } else {
    source["manifest"] = spec.source.manifest;
  }
  source["label"] = LabelName(spec.source);
  if (spec.source.shard_order) {
    source["shuffle"] = "shards";
  } else {
    source["shuffle"] = spec.source.shuffle;
  }
  source["seed"] = spec.source.seed;
  // Written only when changed, like the input limits: the fingerprints of existing specs stay.
  if (spec.source.even != EvenRule::kDrop) source["even"] = "pad";

  Json ops = Json::array();
  for (const OpSpec& op : spec.ops) {
    Json args = Json::object();
    for (const auto& [name, value] : CanonicalArgs(op)) args[name] = ArgToJson(value);
    ops.push_back(Json::object({{op.name, std::move(args)}}));
  }

  Json root = Json::object();
  root["source"] = std::move(source);
  root["ops"] = std::move(ops);
  const BatchSpec& b = spec.batch;
  if (b.size == 0) {
    root["batch"] = nullptr;
  } else if (b.padded) {
    Json padding_values = Json::object();
    for (const auto& [field, value] : b.padding_values) padding_values[field] = value;
    root["padded_batch"] = Json::object({{"size", b.size},
                                         {"drop_remainder", b.drop_remainder},
                                         {"padding_value", b.padding_value},
                                         {"padding_values", std::move(padding_values)}});
  } else {
    root["batch"] = Json::object({{"size", b.size}, {"drop_remainder", b.drop_remainder}});
  }
  root["shuffle_buffer"] = spec.shuffle_buffer;
  root["prefetch"] = spec.prefetch;
  root["epochs"] = spec.epochs;
  root["take"] = spec.take;
  Json threads = spec.options.threads == 0 ? Json("auto") : Json(spec.options.threads);
  root["options"] = Json::object({{"deterministic", spec.options.deterministic},
                                  {"threads", std::move(threads)},
                                  {"on_error", OnErrorName(spec.options.on_error)}});
  // The input limits are written only when changed: they bound what a sample may cost, not
  // what a pipeline computes, so they stay out of the fingerprint of existing specs.
  const ops::InputLimits defaults;
  if (spec.options.limits.max_image_pixels != defaults.max_image_pixels) {
    root["options"]["max_image_pixels"] = spec.options.limits.max_image_pixels;
  }
  if (spec.options.limits.max_file_bytes != defaults.max_file_bytes) {
    root["options"]["max_file_bytes"] = spec.options.limits.max_file_bytes;
  }
  return root;
}

std::string YamlArg(const ArgValue& value) {
  struct Visitor {
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return FormatDouble(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return YamlString(v); }
    std::string operator()(const std::vector<int64_t>& v) const {
      return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
    }
    std::string operator()(const std::vector<double>& v) const {
      std::vector<std::string> parts;
      for (double d : v) parts.push_back(FormatDouble(d));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
  };
  return std::visit(Visitor{}, value);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API.

StatusOr<PipelineSpec> ParseSpec(std::string_view text, std::string_view filename,
                                 const ops::Registry& registry) {
  return Parser(filename, registry).Parse(text);
}

StatusOr<PipelineSpec> LoadSpec(const std::string& path, const ops::Registry& registry) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot read pipeline spec '", path, "': ", std::strerror(errno)));
  }
  std::string text;
  char buf[1 << 14];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) text.append(buf, n);
  int read_error = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (read_error != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read pipeline spec '", path, "': ", std::strerror(read_error)));
  }
  return ParseSpec(text, path, registry);
}

std::string ToCanonicalJson(const PipelineSpec& spec) {
  return ToJson(spec).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ToYaml(const PipelineSpec& spec) {
  std::string out = "source:\n";
  const SourceSpec& source = spec.source;
  if (!source.shards.empty()) {
    std::vector<std::string> shards;
    for (const std::string& f : source.shards) shards.push_back(Quote(f));
    absl::StrAppend(&out, "  shards: [", absl::StrJoin(shards, ", "), "]\n");
    absl::StrAppend(&out, "  data: ", Quote(source.data), "\n");
  } else if (!source.files.empty() || source.manifest.empty()) {
    std::vector<std::string> files;
    for (const std::string& f : source.files) files.push_back(Quote(f));
    absl::StrAppend(&out, "  files: [", absl::StrJoin(files, ", "), "]\n");
  } else {
    absl::StrAppend(&out, "  manifest: ", Quote(source.manifest), "\n");
  }
  absl::StrAppend(&out, "  label: ", YamlString(LabelName(source)), "\n");
  absl::StrAppend(&out, "  shuffle: ",
                  source.shard_order ? "shards" : (source.shuffle ? "true" : "false"), "\n");
  absl::StrAppend(&out, "  seed: ", source.seed, "\n");
  if (source.even != EvenRule::kDrop) out += "  even: pad\n";

  if (spec.ops.empty()) {
    out += "ops: []\n";
  } else {
    out += "ops:\n";
    for (const OpSpec& op : spec.ops) {
      if (op.args.empty()) {
        absl::StrAppend(&out, "  - ", YamlString(op.name), "\n");
        continue;
      }
      std::vector<std::string> args;
      for (const auto& [name, value] : op.args) {
        args.push_back(absl::StrCat(YamlString(name), ": ", YamlArg(value)));
      }
      absl::StrAppend(&out, "  - ", YamlString(op.name), ": {", absl::StrJoin(args, ", "), "}\n");
    }
  }

  const BatchSpec& b = spec.batch;
  if (b.size == 0) {
    out += "batch: null\n";
  } else if (b.padded) {
    std::vector<std::string> values;
    for (const auto& [field, value] : b.padding_values) {
      values.push_back(absl::StrCat(YamlString(field), ": ", FormatDouble(value)));
    }
    absl::StrAppend(&out, "padded_batch: {size: ", b.size,
                    ", drop_remainder: ", b.drop_remainder ? "true" : "false",
                    ", padding_value: ", FormatDouble(b.padding_value), ", padding_values: {",
                    absl::StrJoin(values, ", "), "}}\n");
  } else {
    absl::StrAppend(&out, "batch: {size: ", b.size,
                    ", drop_remainder: ", b.drop_remainder ? "true" : "false", "}\n");
  }
  absl::StrAppend(&out, "shuffle_buffer: ", spec.shuffle_buffer, "\n");
  absl::StrAppend(&out, "prefetch: ", spec.prefetch, "\n");
  absl::StrAppend(&out, "epochs: ", spec.epochs, "\n");
  absl::StrAppend(&out, "take: ", spec.take, "\n");
  std::string threads = spec.options.threads == 0 ? "auto" : absl::StrCat(spec.options.threads);
  absl::StrAppend(&out, "options: {deterministic: ", spec.options.deterministic ? "true" : "false",
                  ", threads: ", threads, ", on_error: ", OnErrorName(spec.options.on_error));
  const ops::InputLimits defaults;
  if (spec.options.limits.max_image_pixels != defaults.max_image_pixels) {
    absl::StrAppend(&out, ", max_image_pixels: ", spec.options.limits.max_image_pixels);
  }
  if (spec.options.limits.max_file_bytes != defaults.max_file_bytes) {
    absl::StrAppend(&out, ", max_file_bytes: ", spec.options.limits.max_file_bytes);
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

std::string Fingerprint(const PipelineSpec& spec) {
  // FNV-1a, 64 bits: fixed constants, so the value is the same in every process.
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : ToCanonicalJson(spec)) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, hash);
  return buf;
}

Status CheckSpecRanges(const PipelineSpec& spec) {
  using L = SpecLimits;
  auto check = [](const char* field, int64_t v, int64_t min, int64_t max,
                  const char* minus_one = nullptr) -> Status {
    std::string rule = RangeRule(v, min, max, minus_one);
    if (rule.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", rule));
  };
  if (spec.batch.size != 0) {
    SLUICE_RETURN_IF_ERROR(check("batch.size", spec.batch.size, 1, L::kMaxBatchSize));
  }
  SLUICE_RETURN_IF_ERROR(check("prefetch", spec.prefetch, 0, L::kMaxPrefetch));
  SLUICE_RETURN_IF_ERROR(check("shuffle_buffer", spec.shuffle_buffer, 0, L::kMaxShuffleBuffer));
  SLUICE_RETURN_IF_ERROR(check("epochs", spec.epochs, 1, L::kMaxEpochs, "to repeat forever"));
  SLUICE_RETURN_IF_ERROR(check("take", spec.take, 0, L::kMaxTake, "for all samples"));
  if (spec.options.threads != 0) {
    SLUICE_RETURN_IF_ERROR(check("options.threads", spec.options.threads, 1, L::kMaxThreads));
  }
  auto finite = [](const std::string& field, double v) -> Status {
    if (std::isfinite(v) && std::abs(v) <= L::kMaxPaddingValue) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be a finite number in [-", FormatDouble(L::kMaxPaddingValue),
                     ", ", FormatDouble(L::kMaxPaddingValue), "], got ", FormatDouble(v)));
  };
  SLUICE_RETURN_IF_ERROR(finite("padded_batch.padding_value", spec.batch.padding_value));
  for (const auto& [field, value] : spec.batch.padding_values) {
    SLUICE_RETURN_IF_ERROR(finite(absl::StrCat("padded_batch.padding_values.", field), value));
  }
  return absl::OkStatus();
}

bool operator==(const OpSpec& a, const OpSpec& b) {
  return a.name == b.name && CanonicalArgs(a) == CanonicalArgs(b);
}

bool operator==(const SourceSpec& a, const SourceSpec& b) {
  return a.files == b.files && a.manifest == b.manifest && a.shards == b.shards &&
         a.data == b.data && a.label == b.label && a.label_member == b.label_member &&
         a.shuffle == b.shuffle && a.shard_order == b.shard_order && a.seed == b.seed &&
         a.even == b.even;
}

bool operator==(const BatchSpec& a, const BatchSpec& b) {
  return a.size == b.size && a.drop_remainder == b.drop_remainder && a.padded == b.padded &&
         a.padding_value == b.padding_value && a.padding_values == b.padding_values;
}

bool operator==(const Options& a, const Options& b) {
  return a.deterministic == b.deterministic && a.threads == b.threads &&
         a.on_error == b.on_error && a.limits.max_image_pixels == b.limits.max_image_pixels &&
         a.limits.max_file_bytes == b.limits.max_file_bytes;
}

bool operator==(const PipelineSpec& a, const PipelineSpec& b) {
  return a.source == b.source && a.ops == b.ops && a.batch == b.batch &&
         a.shuffle_buffer == b.shuffle_buffer && a.prefetch == b.prefetch && a.epochs == b.epochs &&
         a.take == b.take && a.options == b.options;
}

bool HasLabel(const SourceSpec& source) { return source.label != LabelMode::kNone; }

bool FirstOpReadsSample(const PipelineSpec& spec, const ops::Registry& registry) {
  if (spec.ops.empty()) return false;
  const ops::OpDef* def = registry.Find(spec.ops[0].name);
  return def != nullptr && def->schema.reads_sample;
}

}  // namespace sluice::pipeline
