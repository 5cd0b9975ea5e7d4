#include "sluice/core/placement.h"

#include <cmath>
#include <iterator>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sluice {
namespace {

using nlohmann::json;

std::string Number(double v) { return absl::StrFormat("%.4g", v); }

bool AllEqual(const std::vector<double>& v) {
  for (double x : v) {
    if (x != v.front()) return false;
  }
  return true;
}

Status ParseCut(std::string_view value, int num_ops, int* cut) {
  if (value == "batch") {
    *cut = kCutAfterBatch;
    return absl::OkStatus();
  }
  if (!absl::SimpleAtoi(Av(value), cut) || *cut < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cut must be an op count or 'batch', got '", Av(value), "'"));
  }
  if (num_ops >= 0 && *cut > num_ops) {
    return absl::InvalidArgumentError(absl::StrCat("cut ", *cut, " is past the pipeline's ",
                                                   num_ops, " ops (0..", num_ops, " or batch)"));
  }
  return absl::OkStatus();
}

// "<key> must be <choices>, got '<value>'".
Status OneOf(std::string_view key, std::string_view choices, std::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat(Av(key), " must be ", Av(choices), ", got '", Av(value), "'"));
}

Status ParseShares(std::string_view value, std::vector<double>* shares) {
  for (absl::string_view item : absl::StrSplit(Av(value), '/')) {
    double s = 0;
    if (!absl::SimpleAtod(item, &s) || !std::isfinite(s) || s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shares must be numbers >= 0 separated by '/', got '", Av(value), "'"));
    }
    shares->push_back(s);
  }
  return absl::OkStatus();
}

}  // namespace

const char* ReadModeName(ReadMode mode) {
  return mode == ReadMode::kLocalRead ? "local_read" : "remote_read";
}

const char* CodecName(Codec codec) {
  constexpr const char* kNames[] = {"none", "lz4", "zstd"};  // by the codec's wire value
  const size_t i = static_cast<size_t>(codec);
  return i < std::size(kNames) ? kNames[i] : "none";
}

std::string CutName(int cut) {
  return cut == kCutAfterBatch ? std::string("batch") : absl::StrCat(cut);
}

StatusOr<ReadMode> ParseReadMode(std::string_view name) {
  if (name == "remote_read" || name == "remote") return ReadMode::kRemoteRead;
  if (name == "local_read" || name == "local") return ReadMode::kLocalRead;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown read mode '", Av(name), "' (expected remote_read or local_read)"));
}

StatusOr<Codec> ParseCodec(std::string_view name) {
  if (name == "none") return Codec::kNone;
  if (name == "lz4") return Codec::kLz4;
  if (name == "zstd") return Codec::kZstd;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec '", Av(name), "' (expected none, lz4 or zstd)"));
}

StatusOr<Placement> ParsePlacement(std::string_view text, int num_ops) {
  constexpr std::string_view kFixed = "fixed:";
  if (text.substr(0, kFixed.size()) != kFixed) {
    return absl::InvalidArgumentError("a placement starts with 'fixed:'");
  }
  Placement p;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(Av(text.substr(kFixed.size())), ',')) {
    const std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not key=value"));
    }
    const std::string& key = kv[0];
    const std::string& value = kv[1];
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(key, " given twice"));
    }
    if (key == "cut") {
      SLUICE_RETURN_IF_ERROR(ParseCut(value, num_ops, &p.cut));
    } else if (key == "ratio") {
      if (!absl::SimpleAtod(value, &p.ratio) || !(p.ratio >= 0 && p.ratio <= 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("ratio must be a number in [0, 1], got '", value, "'"));
      }
    } else if (key == "read") {
      StatusOr<ReadMode> mode = ParseReadMode(value);
      if (!mode.ok()) return OneOf("read", "local or remote", value);
      p.read_mode = *mode;
    } else if (key == "compress") {
      StatusOr<Codec> codec = ParseCodec(value);
      if (!codec.ok()) return OneOf("compress", "lz4, zstd or none", value);
      p.codec = *codec;
    } else if (key == "spill") {
      if (value != "all" && value != "workers") return OneOf("spill", "all or workers", value);
      p.local_spill_over = value == "all";
    } else if (key == "shares") {
      SLUICE_RETURN_IF_ERROR(ParseShares(value, &p.worker_shares));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "'"));
    }
  }
  if (!seen.count("cut")) return absl::InvalidArgumentError("cut is missing");
  if (!seen.count("ratio")) return absl::InvalidArgumentError("ratio is missing");
  return p;
}

std::ostream& operator<<(std::ostream& os, ReadMode mode) { return os << ReadModeName(mode); }
std::ostream& operator<<(std::ostream& os, Codec codec) { return os << CodecName(codec); }

std::string PlacementString(const Placement& p) {
  std::string out = absl::StrCat("fixed:cut=", CutName(p.cut), ",ratio=", Number(p.ratio),
                                 ",read=", p.read_mode == ReadMode::kLocalRead ? "local" : "remote",
                                 ",compress=", CodecName(p.codec));
  if (!p.local_spill_over) absl::StrAppend(&out, ",spill=workers");
  if (!AllEqual(p.worker_shares)) {
    absl::StrAppend(&out,
                    ",shares=", absl::StrJoin(p.worker_shares, "/", [](std::string* s, double v) {
                      absl::StrAppend(s, Number(v));
                    }));
  }
  return out;
}

json PlacementToJson(const Placement& p, const std::vector<std::string>& worker_addresses) {
  json workers = json::array();
  for (size_t i = 0; i < std::max(worker_addresses.size(), p.worker_shares.size()); ++i) {
    json w = json::object();
    if (i < worker_addresses.size()) w["address"] = worker_addresses[i];
    if (i < p.worker_shares.size()) w["share"] = p.worker_shares[i];
    workers.push_back(std::move(w));
  }
  return json{{"cut", p.cut == kCutAfterBatch ? json("batch") : json(p.cut)},
              {"ratio", p.ratio},
              {"spill", p.local_spill_over ? "all" : "workers"},
              {"read_mode", ReadModeName(p.read_mode)},
              {"compression", CodecName(p.codec)},
              {"workers", workers}};
}

StatusOr<Placement> PlacementFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("placement: expected an object");
  Placement p;
  const auto string_at = [&j](const char* key, std::string* out) -> Status {
    if (!j.contains(key)) return absl::OkStatus();
    if (!j[key].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": expected a string"));
    }
    *out = j[key].get<std::string>();
    return absl::OkStatus();
  };
  if (!j.contains("cut")) return absl::InvalidArgumentError("cut is missing");
  const json& cut = j["cut"];
  if (cut.is_string()) {
    if (cut.get<std::string>() != "batch") {
      return absl::InvalidArgumentError("cut: expected an op count or \"batch\"");
    }
    p.cut = kCutAfterBatch;
  } else if (cut.is_number_integer() && cut.get<int64_t>() >= 0 &&
             cut.get<int64_t>() <= (int64_t{1} << 30)) {
    p.cut = cut.get<int>();
  } else {
    return absl::InvalidArgumentError("cut: expected an op count or \"batch\"");
  }
  if (!j.contains("ratio") || !j["ratio"].is_number()) {
    return absl::InvalidArgumentError("ratio: expected a number in [0, 1]");
  }
  p.ratio = j["ratio"].get<double>();
  if (!(p.ratio >= 0 && p.ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ratio: expected a number in [0, 1], got ", p.ratio));
  }
  std::string spill = "all";
  SLUICE_RETURN_IF_ERROR(string_at("spill", &spill));
  if (spill != "all" && spill != "workers") {
    return absl::InvalidArgumentError(
        absl::StrCat("spill: expected \"all\" or \"workers\", got \"", spill, "\""));
  }
  p.local_spill_over = spill == "all";
  std::string read = ReadModeName(p.read_mode);
  SLUICE_RETURN_IF_ERROR(string_at("read_mode", &read));
  StatusOr<ReadMode> mode = ParseReadMode(read);
  if (!mode.ok()) return Annotate(mode.status(), "read_mode");
  p.read_mode = *mode;
  std::string codec = CodecName(p.codec);
  SLUICE_RETURN_IF_ERROR(string_at("compression", &codec));
  StatusOr<Codec> c = ParseCodec(codec);
  if (!c.ok()) return Annotate(c.status(), "compression");
  p.codec = *c;
  if (j.contains("workers")) {
    const json& workers = j["workers"];
    if (!workers.is_array()) return absl::InvalidArgumentError("workers: expected an array");
    bool all_have_shares = !workers.empty();
    for (const json& w : workers) all_have_shares = all_have_shares && w.contains("share");
    for (size_t i = 0; all_have_shares && i < workers.size(); ++i) {
      const json& s = workers[i]["share"];
      if (!s.is_number() || !std::isfinite(s.get<double>()) || s.get<double>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("workers[", i, "].share: expected a number >= 0"));
      }
      p.worker_shares.push_back(s.get<double>());
    }
  }
  return p;
}

Status ValidatePlacement(const Placement& p, const PipelineShape& shape) {
  if (!(p.ratio >= 0 && p.ratio <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("ratio must be in [0, 1]; got ", p.ratio));
  }
  if (p.cut == kCutAfterBatch) {
    if (!shape.has_batch) {
      return absl::InvalidArgumentError("cut=batch needs a pipeline with a batch");
    }
  } else if (p.cut < 0 || p.cut > shape.num_ops) {
    return absl::InvalidArgumentError(
        absl::StrCat("cut ", p.cut, " is out of range: the pipeline has ", shape.num_ops,
                     " ops, so the cut is 0..", shape.num_ops, " or batch"));
  }
  if (p.read_mode == ReadMode::kLocalRead) {
    if (!shape.first_op_reads_file) {
      return absl::InvalidArgumentError("read=local needs read_file as the first op");
    }
    if (p.cut == 0) {
      return absl::InvalidArgumentError(
          "read=local needs a cut of at least 1 (the trainer runs read_file itself)");
    }
  }
  for (double s : p.worker_shares) {
    if (!(s >= 0) || !std::isfinite(s)) {
      return absl::InvalidArgumentError("worker shares must be >= 0");
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice
