#include "sluice/policy/profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::policy {

using nlohmann::json;

std::optional<CodecCost> Costs::CostOf(Codec codec) const {
  for (const CodecCost& c : codecs) {
    if (c.codec == codec) return c;
  }
  if (codec == Codec::kNone) return CodecCost{};
  return std::nullopt;
}

std::optional<CodecCost> Costs::CostAt(Codec codec, int cut, int num_ops) const {
  const bool output = cut == kCutAfterBatch || cut == num_ops;
  const CodecCost* any = nullptr;
  const CodecCost* at_output = nullptr;
  for (const CodecCost& c : codecs) {
    if (c.codec != codec) continue;
    if (c.measured_at_cut == cut) return c;
    if (c.measured_at_cut == kAnyCut && any == nullptr) any = &c;
    if (output && at_output == nullptr &&
        (c.measured_at_cut == num_ops || c.measured_at_cut == kCutAfterBatch)) {
      at_output = &c;
    }
  }
  if (any != nullptr) return *any;
  if (at_output != nullptr) return *at_output;
  std::optional<CodecCost> first = CostOf(codec);
  if (first.has_value()) first->ratio = 1;
  return first;
}

double Costs::CpuSeconds(int begin, int end) const {
  double sum = 0;
  for (int i = std::max(begin, 0); i < end && i < static_cast<int>(ops.size()); ++i) {
    sum += ops[i].cpu_s_per_sample;
  }
  return sum;
}

double Costs::StageCpuSeconds(int begin, int end) const {
  const int n = static_cast<int>(ops.size());
  const int stages = std::max(0, std::min(end, n) - std::max(begin, 0));
  return n > 0 ? local_cpu_s_per_sample * stages / n : 0;
}

double Costs::TrainerCpuSeconds(int begin, int end) const {
  return CpuSeconds(begin, end) + StageCpuSeconds(begin, end);
}

void Costs::ScaleLocalCpu(double factor) {
  for (OpCost& op : ops) op.cpu_s_per_sample *= factor;
  batch_cpu_s_per_sample *= factor;
  local_cpu_s_per_sample *= factor;
}

double ConsumerProfile::DemandSamplesPerS() const {
  if (!(step_s > 0)) return std::numeric_limits<double>::infinity();
  return std::max(batch_size, 1) / step_s;
}

double WorkerProfile::OpCpuSeconds(const Costs& costs, int position) const {
  for (const OpCost& op : ops) {
    if (op.position == position) return op.cpu_s_per_sample;
  }
  if (position < 0 || position >= static_cast<int>(costs.ops.size())) return 0;
  const double speed = speed_factor > 0 ? speed_factor : 1;
  return costs.ops[position].cpu_s_per_sample / speed;
}

bool Profile::first_op_reads() const {
  // A profile (and the metric store it is saved to) carries op names only, and the policy
  // module does not see the op registry: the name of the one op with
  // OpSchema::reads_sample. pipeline::FirstOpReadsSample is the check wherever a spec is.
  return !costs.ops.empty() && costs.ops[0].name == "read_file";
}

namespace {

Status CheckNonNegative(double v, const std::string& field) {
  if (!std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile: ", field, " must be a finite number >= 0, got ", v));
  }
  return absl::OkStatus();
}

Status CheckOps(const std::vector<OpCost>& ops, const std::string& where) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string f = absl::StrCat(where, "[", i, "]");
    SLUICE_RETURN_IF_ERROR(CheckNonNegative(ops[i].cpu_s_per_sample, f + ".cpu_s_per_sample"));
    SLUICE_RETURN_IF_ERROR(
        CheckNonNegative(ops[i].bytes_out_per_sample, f + ".bytes_out_per_sample"));
  }
  return absl::OkStatus();
}

}  // namespace

Status ValidateProfile(const Profile& p) {
  const Costs& c = p.costs;
  SLUICE_RETURN_IF_ERROR(CheckOps(c.ops, "costs.ops"));
  SLUICE_RETURN_IF_ERROR(
      CheckNonNegative(c.source_bytes_per_sample, "costs.source_bytes_per_sample"));
  SLUICE_RETURN_IF_ERROR(CheckNonNegative(c.raw_bytes_per_sample, "costs.raw_bytes_per_sample"));
  SLUICE_RETURN_IF_ERROR(
      CheckNonNegative(c.batch_cpu_s_per_sample, "costs.batch_cpu_s_per_sample"));
  SLUICE_RETURN_IF_ERROR(
      CheckNonNegative(c.local_cpu_s_per_sample, "costs.local_cpu_s_per_sample"));
  SLUICE_RETURN_IF_ERROR(CheckNonNegative(c.recv_cpu_s_per_sample, "costs.recv_cpu_s_per_sample"));
  SLUICE_RETURN_IF_ERROR(
      CheckNonNegative(c.recv_fit_bytes_per_element, "costs.recv_fit_bytes_per_element"));
  SLUICE_RETURN_IF_ERROR(CheckNonNegative(c.send_cpu_s_per_byte, "costs.send_cpu_s_per_byte"));
  SLUICE_RETURN_IF_ERROR(
      CheckNonNegative(c.worker_send_cpu_s_per_byte, "costs.worker_send_cpu_s_per_byte"));
  SLUICE_RETURN_IF_ERROR(
      CheckNonNegative(c.worker_cpu_s_per_sample, "costs.worker_cpu_s_per_sample"));
  if (c.worker_cpu_readings < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile: costs.worker_cpu_readings must be >= 0, got ", c.worker_cpu_readings));
  }
  for (size_t i = 0; i < c.codecs.size(); ++i) {
    const std::string f = absl::StrCat("costs.codecs[", i, "]");
    if (!std::isfinite(c.codecs[i].ratio) || c.codecs[i].ratio < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("profile: ", f, ".ratio must be >= 1, got ", c.codecs[i].ratio));
    }
    SLUICE_RETURN_IF_ERROR(
        CheckNonNegative(c.codecs[i].worker_cpu_s_per_byte, f + ".worker_cpu_s_per_byte"));
    SLUICE_RETURN_IF_ERROR(
        CheckNonNegative(c.codecs[i].trainer_cpu_s_per_byte, f + ".trainer_cpu_s_per_byte"));
  }
  SLUICE_RETURN_IF_ERROR(CheckNonNegative(p.consumer.step_s, "consumer.step_s"));
  if (p.consumer.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile: consumer.batch_size must be >= 1, got ", p.consumer.batch_size));
  }
  if (!(p.consumer.stall_fraction >= 0 && p.consumer.stall_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile: consumer.stall_fraction must be in [0, 1], got ", p.consumer.stall_fraction));
  }
  if (!std::isfinite(p.trainer_cpu_budget) || p.trainer_cpu_budget <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile: trainer_cpu_budget must be > 0, got ", p.trainer_cpu_budget));
  }
  for (size_t i = 0; i < p.workers.size(); ++i) {
    const WorkerProfile& w = p.workers[i];
    const std::string f = absl::StrCat("workers[", i, "]");
    SLUICE_RETURN_IF_ERROR(CheckNonNegative(w.cpu_budget, f + ".cpu_budget"));
    SLUICE_RETURN_IF_ERROR(CheckNonNegative(w.rtt_s, f + ".rtt_s"));
    if (std::isnan(w.link_bytes_per_s) || std::isnan(w.storage_bytes_per_s)) {
      return absl::InvalidArgumentError(absl::StrCat("profile: ", f, " has a NaN bandwidth"));
    }
    if (!std::isfinite(w.speed_factor) || w.speed_factor <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("profile: ", f, ".speed_factor must be > 0, got ", w.speed_factor));
    }
    SLUICE_RETURN_IF_ERROR(CheckOps(w.ops, f + ".ops"));
  }
  return absl::OkStatus();
}

// ---- JSON ----

json ToJson(const OpCost& op) {
  return json{{"name", op.name},
              {"position", op.position},
              {"cpu_s_per_sample", op.cpu_s_per_sample},
              {"bytes_out_per_sample", op.bytes_out_per_sample}};
}

json ToJson(const CodecCost& c) {
  return json{{"codec", CodecName(c.codec)},
              {"ratio", c.ratio},
              {"worker_cpu_s_per_byte", c.worker_cpu_s_per_byte},
              {"trainer_cpu_s_per_byte", c.trainer_cpu_s_per_byte},
              {"measured_at_cut", c.measured_at_cut}};
}

namespace {

json OpsToJson(const std::vector<OpCost>& ops) {
  json a = json::array();
  for (const OpCost& op : ops) a.push_back(ToJson(op));
  return a;
}

// Typed field readers: absent fields keep the default, wrong types are errors.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status Object() const {
    if (!j_.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where_, ": expected an object"));
    }
    return absl::OkStatus();
  }
  const json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string Path(const char* key) const { return absl::StrCat(where_, ".", key); }

  Status Number(const char* key, double* out) const {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(Path(key), ": expected a number"));
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }
  Status Int(const char* key, int* out) const {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(Path(key), ": expected an integer"));
    }
    *out = v->get<int>();
    return absl::OkStatus();
  }
  Status Bool(const char* key, bool* out) const {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(Path(key), ": expected true or false"));
    }
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  Status String(const char* key, std::string* out) const {
    const json* v = Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(Path(key), ": expected a string"));
    }
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  Status Array(const char* key, const json** out) const {
    *out = Find(key);
    if (*out != nullptr && !(*out)->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(Path(key), ": expected an array"));
    }
    return absl::OkStatus();
  }

 private:
  const json& j_;
  std::string where_;
};

StatusOr<OpCost> OpFromJson(const json& j, const std::string& where) {
  Reader r(j, where);
  SLUICE_RETURN_IF_ERROR(r.Object());
  OpCost op;
  SLUICE_RETURN_IF_ERROR(r.String("name", &op.name));
  SLUICE_RETURN_IF_ERROR(r.Int("position", &op.position));
  SLUICE_RETURN_IF_ERROR(r.Number("cpu_s_per_sample", &op.cpu_s_per_sample));
  SLUICE_RETURN_IF_ERROR(r.Number("bytes_out_per_sample", &op.bytes_out_per_sample));
  return op;
}

Status OpsFromJson(const Reader& r, const char* key, std::vector<OpCost>* out) {
  const json* a = nullptr;
  SLUICE_RETURN_IF_ERROR(r.Array(key, &a));
  if (a == nullptr) return absl::OkStatus();
  out->clear();
  for (size_t i = 0; i < a->size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(OpCost op, OpFromJson((*a)[i], absl::StrCat(r.Path(key), "[", i, "]")));
    out->push_back(std::move(op));
  }
  return absl::OkStatus();
}

StatusOr<CodecCost> CodecFromJson(const json& j, const std::string& where) {
  Reader r(j, where);
  SLUICE_RETURN_IF_ERROR(r.Object());
  CodecCost c;
  std::string name = "none";
  SLUICE_RETURN_IF_ERROR(r.String("codec", &name));
  StatusOr<Codec> codec = ParseCodec(name);
  if (!codec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.Path("codec"), ": unknown codec '", name, "' (none, lz4, zstd)"));
  }
  c.codec = *codec;
  SLUICE_RETURN_IF_ERROR(r.Number("ratio", &c.ratio));
  SLUICE_RETURN_IF_ERROR(r.Number("worker_cpu_s_per_byte", &c.worker_cpu_s_per_byte));
  SLUICE_RETURN_IF_ERROR(r.Number("trainer_cpu_s_per_byte", &c.trainer_cpu_s_per_byte));
  SLUICE_RETURN_IF_ERROR(r.Int("measured_at_cut", &c.measured_at_cut));
  return c;
}

StatusOr<Costs> CostsFromJsonAt(const json& j, const std::string& where) {
  Reader r(j, where);
  SLUICE_RETURN_IF_ERROR(r.Object());
  Costs c;
  SLUICE_RETURN_IF_ERROR(OpsFromJson(r, "ops", &c.ops));
  SLUICE_RETURN_IF_ERROR(r.Number("source_bytes_per_sample", &c.source_bytes_per_sample));
  SLUICE_RETURN_IF_ERROR(r.Number("raw_bytes_per_sample", &c.raw_bytes_per_sample));
  SLUICE_RETURN_IF_ERROR(r.Number("batch_cpu_s_per_sample", &c.batch_cpu_s_per_sample));
  SLUICE_RETURN_IF_ERROR(r.Number("local_cpu_s_per_sample", &c.local_cpu_s_per_sample));
  SLUICE_RETURN_IF_ERROR(r.Number("recv_cpu_s_per_sample", &c.recv_cpu_s_per_sample));
  SLUICE_RETURN_IF_ERROR(r.Number("recv_fit_bytes_per_element", &c.recv_fit_bytes_per_element));
  SLUICE_RETURN_IF_ERROR(r.Number("send_cpu_s_per_byte", &c.send_cpu_s_per_byte));
  SLUICE_RETURN_IF_ERROR(r.Number("worker_send_cpu_s_per_byte", &c.worker_send_cpu_s_per_byte));
  SLUICE_RETURN_IF_ERROR(r.Number("worker_cpu_s_per_sample", &c.worker_cpu_s_per_sample));
  SLUICE_RETURN_IF_ERROR(r.Int("worker_cpu_readings", &c.worker_cpu_readings));
  SLUICE_RETURN_IF_ERROR(r.Bool("receive_measured", &c.receive_measured));
  const json* codecs = nullptr;
  SLUICE_RETURN_IF_ERROR(r.Array("codecs", &codecs));
  if (codecs != nullptr) {
    for (size_t i = 0; i < codecs->size(); ++i) {
      SLUICE_ASSIGN_OR_RETURN(
          CodecCost cc, CodecFromJson((*codecs)[i], absl::StrCat(r.Path("codecs"), "[", i, "]")));
      c.codecs.push_back(cc);
    }
  }
  return c;
}

}  // namespace

json ToJson(const Costs& c) {
  json codecs = json::array();
  for (const CodecCost& cc : c.codecs) codecs.push_back(ToJson(cc));
  return json{{"ops", OpsToJson(c.ops)},
              {"source_bytes_per_sample", c.source_bytes_per_sample},
              {"raw_bytes_per_sample", c.raw_bytes_per_sample},
              {"batch_cpu_s_per_sample", c.batch_cpu_s_per_sample},
              {"local_cpu_s_per_sample", c.local_cpu_s_per_sample},
              {"recv_cpu_s_per_sample", c.recv_cpu_s_per_sample},
              {"recv_fit_bytes_per_element", c.recv_fit_bytes_per_element},
              {"send_cpu_s_per_byte", c.send_cpu_s_per_byte},
              {"worker_send_cpu_s_per_byte", c.worker_send_cpu_s_per_byte},
              {"worker_cpu_s_per_sample", c.worker_cpu_s_per_sample},
              {"worker_cpu_readings", c.worker_cpu_readings},
              {"receive_measured", c.receive_measured},
              {"codecs", codecs}};
}

json ToJson(const ConsumerProfile& c) {
  return json{
      {"step_s", c.step_s}, {"batch_size", c.batch_size}, {"stall_fraction", c.stall_fraction}};
}

json ToJson(const WorkerProfile& w) {
  return json{{"address", w.address},
              {"cpu_budget", w.cpu_budget},
              {"link_bytes_per_s", w.link_bytes_per_s},
              {"rtt_s", w.rtt_s},
              {"has_storage", w.has_storage},
              {"storage_bytes_per_s", w.storage_bytes_per_s},
              {"ops", OpsToJson(w.ops)},
              {"speed_factor", w.speed_factor}};
}

json ToJson(const Profile& p) {
  json workers = json::array();
  for (const WorkerProfile& w : p.workers) workers.push_back(ToJson(w));
  return json{{"costs", ToJson(p.costs)},
              {"consumer", ToJson(p.consumer)},
              {"workers", workers},
              {"trainer_cpu_budget", p.trainer_cpu_budget}};
}

StatusOr<Costs> CostsFromJson(const json& j) { return CostsFromJsonAt(j, "costs"); }

StatusOr<Profile> ProfileFromJson(const json& j) {
  Reader r(j, "profile");
  SLUICE_RETURN_IF_ERROR(r.Object());
  Profile p;
  if (const json* costs = r.Find("costs")) {
    SLUICE_ASSIGN_OR_RETURN(p.costs, CostsFromJsonAt(*costs, "profile.costs"));
  }
  if (const json* consumer = r.Find("consumer")) {
    Reader c(*consumer, "profile.consumer");
    SLUICE_RETURN_IF_ERROR(c.Object());
    SLUICE_RETURN_IF_ERROR(c.Number("step_s", &p.consumer.step_s));
    SLUICE_RETURN_IF_ERROR(c.Int("batch_size", &p.consumer.batch_size));
    SLUICE_RETURN_IF_ERROR(c.Number("stall_fraction", &p.consumer.stall_fraction));
  }
  const json* workers = nullptr;
  SLUICE_RETURN_IF_ERROR(r.Array("workers", &workers));
  if (workers != nullptr) {
    for (size_t i = 0; i < workers->size(); ++i) {
      Reader wr((*workers)[i], absl::StrCat("profile.workers[", i, "]"));
      SLUICE_RETURN_IF_ERROR(wr.Object());
      WorkerProfile w;
      SLUICE_RETURN_IF_ERROR(wr.String("address", &w.address));
      SLUICE_RETURN_IF_ERROR(wr.Number("cpu_budget", &w.cpu_budget));
      SLUICE_RETURN_IF_ERROR(wr.Number("link_bytes_per_s", &w.link_bytes_per_s));
      SLUICE_RETURN_IF_ERROR(wr.Number("rtt_s", &w.rtt_s));
      SLUICE_RETURN_IF_ERROR(wr.Bool("has_storage", &w.has_storage));
      SLUICE_RETURN_IF_ERROR(wr.Number("storage_bytes_per_s", &w.storage_bytes_per_s));
      SLUICE_RETURN_IF_ERROR(OpsFromJson(wr, "ops", &w.ops));
      SLUICE_RETURN_IF_ERROR(wr.Number("speed_factor", &w.speed_factor));
      p.workers.push_back(std::move(w));
    }
  }
  SLUICE_RETURN_IF_ERROR(r.Number("trainer_cpu_budget", &p.trainer_cpu_budget));
  return p;
}

std::string ProfileToJsonString(const Profile& profile) { return ToJson(profile).dump(2); }

StatusOr<Profile> ParseProfileJson(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("profile: not valid JSON");
  return ProfileFromJson(j);
}

}  // namespace sluice::policy
