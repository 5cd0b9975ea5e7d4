#include "sluice/testbed/scenario.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace sluice::testbed {
namespace {

// Splits "12.5mbit" into 12.5 and "mbit"; fails on a missing or negative number.
StatusOr<std::pair<double, std::string>> SplitNumberUnit(std::string_view text) {
  std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' ||
                          s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-')) {
    // An 'e' followed by a letter starts the unit, not an exponent.
    if ((s[i] == 'e' || s[i] == 'E') &&
        (i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      break;
    }
    ++i;
  }
  if (i == 0) return absl::InvalidArgumentError(absl::StrCat("expected a number in '", s, "'"));
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(s.substr(0, i), &used);
    if (used != i) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(absl::StrCat("bad number in '", s, "'"));
  }
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", s, "' must be a non-negative number"));
  }
  std::string unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  return std::make_pair(value, unit);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  Status Error(const YAML::Node& node, const std::string& path, std::string_view message) const {
    std::string where = file_;
    const YAML::Mark mark = node.Mark();
    if (mark.line >= 0 && mark.column >= 0) {
      absl::StrAppend(&where, ":", mark.line + 1, ":", mark.column + 1);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", path.empty() ? "" : path + ": ", Av(message)));
  }

  Status CheckKeys(const YAML::Node& map, const std::string& path,
                   const std::set<std::string>& allowed) const {
    for (const auto& kv : map) {
      const std::string key = kv.first.as<std::string>();
      if (!allowed.count(key)) {
        std::string list;
        for (const std::string& a : allowed) absl::StrAppend(&list, list.empty() ? "" : ", ", a);
        return Error(kv.first, Join(path, key),
                     absl::StrCat("unknown key (expected one of: ", list, ")"));
      }
    }
    return absl::OkStatus();
  }

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  StatusOr<std::string> String(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) return Error(node, path, "expected a string");
    return node.as<std::string>();
  }

  StatusOr<double> Number(const YAML::Node& node, const std::string& path, double min,
                          bool exclusive_min) const {
    if (!node.IsScalar()) return Error(node, path, "expected a number");
    double v = 0;
    try {
      v = node.as<double>();
    } catch (const YAML::Exception&) {
      return Error(node, path,
                   absl::StrCat("expected a number, got '", node.as<std::string>(), "'"));
    }
    if (!std::isfinite(v) || (exclusive_min ? v <= min : v < min)) {
      return Error(node, path, absl::StrCat("must be ", exclusive_min ? "> " : ">= ", min));
    }
    return v;
  }

  StatusOr<int64_t> Integer(const YAML::Node& node, const std::string& path, int64_t min) const {
    if (!node.IsScalar()) return Error(node, path, "expected an integer");
    int64_t v = 0;
    try {
      v = node.as<int64_t>();
    } catch (const YAML::Exception&) {
      return Error(node, path,
                   absl::StrCat("expected an integer, got '", node.as<std::string>(), "'"));
    }
    if (v < min) return Error(node, path, absl::StrCat("must be >= ", min));
    return v;
  }

  // Wraps a value parser's error with the node's position.
  StatusOr<double> Unit(const YAML::Node& node, const std::string& path,
                        StatusOr<double> (*parse)(std::string_view)) const {
    SLUICE_ASSIGN_OR_RETURN(std::string text, String(node, path));
    StatusOr<double> v = parse(text);
    if (!v.ok()) return Error(node, path, Sv(v.status().message()));
    return v;
  }

  StatusOr<Scenario> Parse(const YAML::Node& root) {
    Scenario sc;
    sc.file = file_;
    if (!root.IsMap()) return Error(root, "", "a scenario is a mapping (name, pipeline, ...)");
    SLUICE_RETURN_IF_ERROR(CheckKeys(
        root, "",
        {"name", "pipeline", "data", "trainer", "trainers", "workers", "accelerator_ms", "steps",
         "events", "store"}));
    for (const char* required : {"name", "pipeline", "data", "workers", "steps"}) {
      if (!root[required]) return Error(root, required, "missing");
    }
    if (!root["trainer"] == !root["trainers"]) {
      return Error(root, "trainer", "give either trainer (one) or trainers (a list)");
    }
    SLUICE_ASSIGN_OR_RETURN(sc.name, String(root["name"], "name"));
    SLUICE_ASSIGN_OR_RETURN(sc.pipeline, String(root["pipeline"], "pipeline"));

    const YAML::Node data = root["data"];
    if (!data.IsMap()) return Error(data, "data", "expected a mapping {kind, count, seed, ...}");
    for (const auto& kv : data) {
      const std::string key = kv.first.as<std::string>();
      const std::string path = Join("data", key);
      if (key == "kind") {
        SLUICE_ASSIGN_OR_RETURN(sc.data_kind, String(kv.second, path));
        if (sc.data_kind != "jpeg" && sc.data_kind != "wav") {
          return Error(kv.second, path, "supported kinds: jpeg, wav");
        }
      } else if (key == "count") {
        SLUICE_ASSIGN_OR_RETURN(sc.data_count, Integer(kv.second, path, 1));
      } else if (key == "seed") {
        SLUICE_ASSIGN_OR_RETURN(int64_t seed, Integer(kv.second, path, 0));
        sc.data_seed = static_cast<uint64_t>(seed);
      } else if (key == "width" || key == "height" || key == "quality" || key == "classes") {
        SLUICE_ASSIGN_OR_RETURN(int64_t v, Integer(kv.second, path, 1));
        sc.data_options[key] = absl::StrCat(v);
      } else if (key == "sample_rate") {
        SLUICE_ASSIGN_OR_RETURN(int64_t v, Integer(kv.second, path, 1));
        if (v != 16000 && v != 22050) return Error(kv.second, path, "expected 16000 or 22050");
        sc.data_options["sample-rate"] = absl::StrCat(v);
      } else if (key == "format") {
        SLUICE_ASSIGN_OR_RETURN(std::string format, String(kv.second, path));
        if (format != "files" && format != "tar") {
          return Error(kv.second, path, "expected files or tar (shards)");
        }
        sc.data_shards = format == "tar";
        if (sc.data_shards) sc.data_options["format"] = "tar";
      } else if (key == "shard_size") {
        SLUICE_ASSIGN_OR_RETURN(int64_t v, Integer(kv.second, path, 1));
        sc.data_options["shard-size"] = absl::StrCat(v);
      } else if (key == "boxes") {
        bool boxes = false;
        if (!kv.second.IsScalar() || !YAML::convert<bool>::decode(kv.second, boxes)) {
          return Error(kv.second, path, "expected true or false");
        }
        if (boxes) sc.data_options["boxes"] = "";  // a flag without a value
      } else {
        return Error(kv.first, path,
                     "unknown key (expected one of: kind, count, seed, width, height, quality, "
                     "classes, boxes (jpeg), sample_rate (wav), format, shard_size)");
      }
    }
    if (sc.data_options.count("shard-size") && !sc.data_shards) {
      return Error(data["shard_size"], "data.shard_size", "applies to format: tar only");
    }
    // Options of one generator only.
    for (const char* jpeg_only : {"width", "height", "quality", "boxes"}) {
      if (sc.data_kind == "wav" && sc.data_options.count(jpeg_only)) {
        return Error(data[jpeg_only], Join("data", jpeg_only), "applies to kind: jpeg only");
      }
    }
    if (sc.data_kind == "jpeg" && sc.data_options.count("sample-rate")) {
      return Error(data["sample_rate"], "data.sample_rate", "applies to kind: wav only");
    }
    if (!data["count"]) return Error(data, "data.count", "missing");

    if (root["trainers"]) {
      const YAML::Node list = root["trainers"];
      if (!list.IsSequence() || list.size() == 0 || list.size() > 16) {
        return Error(list, "trainers", "expected a list of 1 to 16 trainers {cpus: N, start_s: S}");
      }
      for (size_t k = 0; k < list.size(); ++k) {
        const std::string path = absl::StrCat("trainers[", k, "]");
        const YAML::Node t = list[k];
        if (!t.IsMap()) return Error(t, path, "expected a mapping {cpus: N, start_s: S}");
        SLUICE_RETURN_IF_ERROR(CheckKeys(t, path, {"cpus", "start_s"}));
        if (!t["cpus"]) return Error(t, path + ".cpus", "missing");
        TrainerScenario ts;
        SLUICE_ASSIGN_OR_RETURN(ts.cpus, Number(t["cpus"], path + ".cpus", 0, true));
        if (t["start_s"]) {
          SLUICE_ASSIGN_OR_RETURN(ts.start_s, Number(t["start_s"], path + ".start_s", 0, false));
        }
        if (k == 0) {
          if (ts.start_s != 0) {
            return Error(t["start_s"], path + ".start_s", "the first trainer starts at 0");
          }
          sc.trainer_cpus = ts.cpus;
        } else {
          sc.more_trainers.push_back(ts);
        }
      }
    }
    const YAML::Node trainer = root["trainer"];
    if (!trainer) {
      // `trainers` given: parsed above.
    } else if (!trainer.IsMap()) {
      return Error(trainer, "trainer", "expected a mapping {cpus: N}");
    } else {
      SLUICE_RETURN_IF_ERROR(CheckKeys(trainer, "trainer", {"cpus", "frontend"}));
      if (!trainer["cpus"]) return Error(trainer, "trainer.cpus", "missing");
      SLUICE_ASSIGN_OR_RETURN(sc.trainer_cpus, Number(trainer["cpus"], "trainer.cpus", 0, true));
      if (trainer["frontend"]) {
        const YAML::Node f = trainer["frontend"];
        const std::string text = f.IsScalar() ? f.Scalar() : "";
        if (text != "cli" && text != "python") {
          return Error(f, "trainer.frontend",
                       "expected cli (sluice train) or python (a Python training loop)");
        }
        sc.trainer_frontend = text;
      }
    }

    const YAML::Node workers = root["workers"];
    if (!workers.IsSequence()) return Error(workers, "workers", "expected a list of workers");
    for (size_t i = 0; i < workers.size(); ++i) {
      const std::string path = absl::StrCat("workers[", i, "]");
      const YAML::Node w = workers[i];
      if (!w.IsMap()) return Error(w, path, "expected a mapping {cpus, bandwidth, ...}");
      SLUICE_RETURN_IF_ERROR(CheckKeys(w, path, {"cpus", "bandwidth", "latency", "storage"}));
      WorkerScenario ws;
      if (!w["cpus"]) return Error(w, path + ".cpus", "missing");
      SLUICE_ASSIGN_OR_RETURN(ws.cpus, Number(w["cpus"], path + ".cpus", 0, true));
      if (w["bandwidth"]) {
        SLUICE_ASSIGN_OR_RETURN(ws.bandwidth_bps,
                                Unit(w["bandwidth"], path + ".bandwidth", &ParseBandwidth));
        if (ws.bandwidth_bps < 8000) {
          return Error(w["bandwidth"], path + ".bandwidth", "must be at least 8kbit");
        }
      }
      if (w["latency"]) {
        SLUICE_ASSIGN_OR_RETURN(ws.latency_s, Unit(w["latency"], path + ".latency", &ParseLatency));
      }
      if (w["storage"]) {
        SLUICE_ASSIGN_OR_RETURN(std::string storage, String(w["storage"], path + ".storage"));
        if (storage == "shared") {
          ws.storage = StorageKind::kShared;
        } else if (storage == "none") {
          ws.storage = StorageKind::kNone;
        } else if (storage.rfind("slow:", 0) == 0) {
          ws.storage = StorageKind::kSlow;
          StatusOr<double> rate = ParseByteRate(std::string_view(storage).substr(5));
          if (!rate.ok())
            return Error(w["storage"], path + ".storage", Sv(rate.status().message()));
          if (*rate < 1) return Error(w["storage"], path + ".storage", "rate must be > 0");
          ws.storage_bytes_per_s = *rate;
        } else {
          return Error(w["storage"], path + ".storage",
                       absl::StrCat("expected shared, none or slow:<rate>, got '", storage, "'"));
        }
      }
      sc.workers.push_back(ws);
    }

    if (root["accelerator_ms"]) {
      SLUICE_ASSIGN_OR_RETURN(sc.accelerator_ms,
                              Number(root["accelerator_ms"], "accelerator_ms", 0, false));
    }
    SLUICE_ASSIGN_OR_RETURN(sc.steps, Integer(root["steps"], "steps", 1));

    if (const YAML::Node store = root["store"]) {
      const std::string text = store.IsScalar() ? store.Scalar() : "";
      if (text == "trainer") {
        sc.store = StoreAt::kTrainer;
      } else if (text == "workers") {
        sc.store = StoreAt::kWorkers;
      } else if (text != "none") {
        return Error(store, "store", "expected none, trainer or workers");
      }
      if (sc.store != StoreAt::kNone && !sc.data_shards) {
        return Error(store, "store",
                     "a store serves shards: the data set needs data: {format: tar}");
      }
    }

    if (const YAML::Node events = root["events"]) {
      if (!events.IsSequence()) return Error(events, "events", "expected a list of events");
      for (size_t i = 0; i < events.size(); ++i) {
        const std::string path = absl::StrCat("events[", i, "]");
        const YAML::Node e = events[i];
        if (!e.IsMap()) return Error(e, path, "expected a mapping {at_s, worker, cpus|kill}");
        SLUICE_RETURN_IF_ERROR(CheckKeys(e, path, {"at_s", "worker", "cpus", "kill"}));
        ScenarioEvent ev;
        if (!e["at_s"]) return Error(e, path + ".at_s", "missing");
        SLUICE_ASSIGN_OR_RETURN(ev.at_s, Number(e["at_s"], path + ".at_s", 0, false));
        if (!e["worker"]) return Error(e, path + ".worker", "missing");
        SLUICE_ASSIGN_OR_RETURN(int64_t worker, Integer(e["worker"], path + ".worker", 0));
        if (worker >= static_cast<int64_t>(sc.workers.size())) {
          return Error(e["worker"], path + ".worker",
                       absl::StrCat("there are ", sc.workers.size(), " workers"));
        }
        ev.worker = static_cast<int>(worker);
        if (e["cpus"]) {
          SLUICE_ASSIGN_OR_RETURN(double cpus, Number(e["cpus"], path + ".cpus", 0, true));
          ev.cpus = cpus;
        }
        if (e["kill"]) {
          try {
            ev.kill = e["kill"].as<bool>();
          } catch (const YAML::Exception&) {
            return Error(e["kill"], path + ".kill", "expected true or false");
          }
        }
        if (ev.cpus.has_value() == ev.kill) {
          return Error(e, path, "an event sets exactly one of cpus or kill: true");
        }
        sc.events.push_back(ev);
      }
    }
    return sc;
  }

 private:
  std::string file_;
};

}  // namespace

StatusOr<double> ParseBandwidth(std::string_view text) {
  SLUICE_ASSIGN_OR_RETURN(auto nu, SplitNumberUnit(text));
  const std::string unit = Lower(nu.second);
  double scale = 0;
  if (unit == "bit") scale = 1;
  if (unit == "kbit") scale = 1e3;
  if (unit == "mbit") scale = 1e6;
  if (unit == "gbit") scale = 1e9;
  if (scale == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad bandwidth '", Av(text), "' (expected <number><bit|kbit|mbit|gbit>, e.g. 100mbit)"));
  }
  return nu.first * scale;
}

StatusOr<double> ParseLatency(std::string_view text) {
  SLUICE_ASSIGN_OR_RETURN(auto nu, SplitNumberUnit(text));
  const std::string unit = Lower(nu.second);
  double scale = 0;
  if (unit == "us") scale = 1e-6;
  if (unit == "ms") scale = 1e-3;
  if (unit == "s") scale = 1;
  if (scale == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad latency '", Av(text), "' (expected <number><us|ms|s>, e.g. 0.2ms)"));
  }
  return nu.first * scale;
}

StatusOr<double> ParseByteRate(std::string_view text) {
  SLUICE_ASSIGN_OR_RETURN(auto nu, SplitNumberUnit(text));
  std::string unit = nu.second;
  if (unit.size() > 2 && Lower(unit.substr(unit.size() - 2)) == "/s") {
    unit = unit.substr(0, unit.size() - 2);
  }
  double scale = 0;
  if (unit == "B") scale = 1;
  if (unit == "KB" || unit == "kB") scale = 1e3;
  if (unit == "MB") scale = 1e6;
  if (unit == "GB") scale = 1e9;
  if (unit == "KiB") scale = 1024.0;
  if (unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (scale == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad byte rate '", Av(text), "' (expected <number><B|KB|MB|GB|KiB|MiB|GiB>, e.g. 20MB)"));
  }
  return nu.first * scale;
}

StatusOr<Scenario> ParseScenario(std::string_view yaml, const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": cannot read YAML: ", e.what()));
  }
  try {
    return Parser(file).Parse(root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e.what()));
  }
}

StatusOr<Scenario> LoadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read scenario file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseScenario(ss.str(), path);
}

TestbedSpec Scenario::ToTestbedSpec() const {
  TestbedSpec spec;
  spec.trainer_cpus = trainer_cpus;
  for (const TrainerScenario& t : more_trainers) spec.more_trainer_cpus.push_back(t.cpus);
  for (const WorkerScenario& w : workers) {
    spec.workers.push_back({w.cpus, w.bandwidth_bps, w.latency_s});
  }
  return spec;
}

std::string Scenario::ResolvePipelinePath() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(pipeline, ec) || file.empty() || fs::path(pipeline).is_absolute()) return pipeline;
  // Beside the scenario file, or beside one of its parent folders (a scenario in
  // bench/scenarios/ names examples/... from the repository root).
  for (fs::path dir = fs::absolute(fs::path(file), ec).parent_path(); !dir.empty();
       dir = dir.parent_path()) {
    const fs::path candidate = dir / pipeline;
    if (fs::exists(candidate, ec)) return candidate.string();
    if (dir == dir.parent_path()) break;
  }
  return pipeline;
}

}  // namespace sluice::testbed
