// sluice._core: the pybind11 module under the `sluice` Python package (python/sluice/).
//
// It exposes what the pure-Python package needs and nothing more:
//   - spec functions: parse/load a spec into its canonical JSON (the Python builder's
//     interchange form), YAML spelling, fingerprint, op-chain checks, op schemas;
//   - Batch: one delivered batch (or sample); its tensors become NumPy arrays that share the
//     C++ buffers (no copy; each array keeps its buffer alive through a capsule);
//   - Loader: runtime::PolicyRunner (any policy: none, fixed, sluice/auto, fastflow) driven
//     from Python. next() waits for the next batch with the GIL released and wakes every
//     50 ms to let Python handle signals (Ctrl-C), so an interrupted wait loses nothing: the
//     batch being fetched is returned by the next call. The consumer's step and wait, which
//     the planners measure, are read on Python's thread (when next() was called, when the
//     previous batch was handed over), not on the fetch thread.
//     The planners' notes and decisions are queued on the C++ side and drained by Python
//     (drain_log) onto the `sluice` logger: no C++ thread ever calls into Python.
//
// Errors cross as Python exceptions with the C++ message: InvalidArgument and OutOfRange
// raise ValueError, NotFound FileNotFoundError, Unavailable ConnectionError,
// PermissionDenied/Unauthenticated PermissionError, everything else RuntimeError.
//
// Thread-safety: the Python objects are used under the GIL; a Loader's fetch thread never
// touches Python.
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/core/sample_digests.h"
#include "sluice/core/allocator.h"
#include "sluice/core/clock.h"
#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/core/tensor.h"
#include "sluice/metrics/http_server.h"
#include "sluice/ops/registry.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/shard.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/spec.h"
#include "sluice/rpc/grpc_worker_server.h"
#include "sluice/runtime/loader.h"
#include "sluice/runtime/policy_runner.h"
#include "sluice/runtime/train.h"
#include "sluice/runtime/trainer_metrics.h"

namespace py = pybind11;

namespace sluice::python {
namespace {

[[noreturn]] void ThrowStatus(const Status& status) {
  PyObject* type = PyExc_RuntimeError;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      type = PyExc_ValueError;
      break;
    case absl::StatusCode::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case absl::StatusCode::kUnavailable:
      type = PyExc_ConnectionError;
      break;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      type = PyExc_PermissionError;
      break;
    default:
      break;
  }
  PyErr_SetString(type, std::string(status.message()).c_str());
  throw py::error_already_set();
}

template <typename T>
T ValueOrThrow(StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return *std::move(value);
}

StatusOr<pipeline::PipelineSpec> SpecFromJson(const std::string& json) {
  return pipeline::ParseSpec(json, "spec");
}

// A Python int as int64, or an error naming the argument when it does not fit (Python ints
// are unbounded; the spec's are 64-bit, as the YAML reader's).
StatusOr<int64_t> ToInt64(const std::string& name, const py::handle& value) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": integer out of range: ", std::string(py::str(value))));
  }
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<int64_t>(v);
}

// Python value -> op argument, read as the YAML reader reads the same literal: bool, int,
// float, str, and lists of numbers (a list with any float is a list of floats).
StatusOr<ops::ArgValue> ToArgValue(const std::string& name, const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return ops::ArgValue(value.cast<bool>());
  if (py::isinstance<py::int_>(value)) {
    SLUICE_ASSIGN_OR_RETURN(int64_t v, ToInt64(name, value));
    return ops::ArgValue(v);
  }
  if (py::isinstance<py::float_>(value)) return ops::ArgValue(value.cast<double>());
  if (py::isinstance<py::str>(value)) return ops::ArgValue(value.cast<std::string>());
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool any_float = false;
    for (const py::handle& item : value) {
      if (py::isinstance<py::bool_>(item)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": expected numbers in the list, got a bool"));
      }
      if (py::isinstance<py::int_>(item)) {
        SLUICE_ASSIGN_OR_RETURN(int64_t v, ToInt64(name, item));
        ints.push_back(v);
        floats.push_back(static_cast<double>(ints.back()));
      } else if (py::isinstance<py::float_>(item)) {
        any_float = true;
        floats.push_back(item.cast<double>());
        ints.push_back(0);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": expected numbers in the list, got ", std::string(py::str(item.get_type()))));
      }
    }
    if (any_float) return ops::ArgValue(std::move(floats));
    return ops::ArgValue(std::move(ints));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": expected a number, a bool, a string or a list of numbers, got ",
                   std::string(py::str(value.get_type()))));
}

py::object ArgToPython(const ops::ArgValue& value) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, value);
}

// Builds the op chain [(name, {arg: value})] on the source's schema, as a Loader would: the
// errors are the ones a spec file gets ("ops[2].random_resized_crop: size: ...").
std::vector<py::dict> CheckOps(const py::list& chain, const std::string& label, uint64_t seed) {
  std::vector<pipeline::OpSpec> specs;
  int position = 0;
  for (const py::handle& entry : chain) {
    auto pair = entry.cast<py::tuple>();
    pipeline::OpSpec op;
    op.name = pair[0].cast<std::string>();
    for (const auto& [key, value] : pair[1].cast<py::dict>()) {
      const std::string arg = key.cast<std::string>();
      StatusOr<ops::ArgValue> v = ToArgValue(arg, value);
      if (!v.ok()) ThrowStatus(Annotate(v.status(), pipeline::OpLabel(position, op.name)));
      op.args[arg] = *std::move(v);
    }
    specs.push_back(std::move(op));
    ++position;
  }
  const pipeline::LabelMode mode =
      label == "parent_dir" ? pipeline::LabelMode::kParentDir : pipeline::LabelMode::kNone;
  pipeline::BuiltOps built = ValueOrThrow(pipeline::BuildOps(
      specs, seed, ops::Registry::Builtin(), pipeline::SourceSchema(mode)));
  // The bound arguments (defaults filled in) of each op, for the builder to keep.
  std::vector<py::dict> bound;
  for (const auto& op : built.ops) {
    py::dict args;
    for (const auto& [name, value] : op->args().values()) args[py::str(name)] = ArgToPython(value);
    bound.push_back(std::move(args));
  }
  return bound;
}

py::list OpSchemas() {
  py::list out;
  const ops::Registry& registry = ops::Registry::Builtin();
  for (const std::string& name : registry.Names()) {
    const ops::OpSchema& s = registry.Find(name)->schema;
    py::list args;
    for (const ops::ArgSchema& a : s.args) {
      py::dict d;
      d["name"] = a.name;
      d["type"] = std::string(ops::ArgTypeName(a.type));
      d["required"] = !a.default_value.has_value();
      d["default"] = a.default_value.has_value() ? ArgToPython(*a.default_value) : py::none();
      d["doc"] = a.doc;
      d["list_length"] = a.list_length;
      d["choices"] = a.choices;
      d["min"] = a.min.has_value() ? py::cast(*a.min) : py::none();
      d["max"] = a.max.has_value() ? py::cast(*a.max) : py::none();
      args.append(std::move(d));
    }
    py::dict op;
    op["name"] = s.name;
    op["doc"] = s.doc;
    op["random"] = s.random;
    op["args"] = std::move(args);
    out.append(std::move(op));
  }
  return out;
}

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kI16:
      return py::dtype::of<int16_t>();
    case DType::kI32:
      return py::dtype::of<int32_t>();
    case DType::kI64:
      return py::dtype::of<int64_t>();
    case DType::kF16:
      return py::dtype("float16");
    case DType::kF32:
      return py::dtype::of<float>();
    case DType::kF64:
      return py::dtype::of<double>();
    case DType::kU8:
    case DType::kBytes:
    default:
      return py::dtype::of<uint8_t>();
  }
}

// A NumPy array over `tensor`'s bytes; the capsule holds a reference to the buffer.
py::array ToArray(const Tensor& tensor) {
  const size_t item = DTypeSize(tensor.dtype());
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(item);
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= std::max<py::ssize_t>(shape[i], 1);
  }
  if (tensor.buffer() == nullptr || tensor.raw() == nullptr) {
    return py::array(NumpyDType(tensor.dtype()), shape, strides);
  }
  auto* hold = new std::shared_ptr<Buffer>(tensor.buffer());
  py::capsule base(hold, [](void* p) { delete static_cast<std::shared_ptr<Buffer>*>(p); });
  return py::array(NumpyDType(tensor.dtype()), shape, strides, tensor.raw(), base);
}

// One delivered batch (or sample without batching).
class Batch {
 public:
  Batch(Element element, Schema schema) : element_(std::move(element)), schema_(std::move(schema)) {}

  py::dict Arrays() const {
    py::dict out;
    for (int i = 0; i < schema_.size() && i < static_cast<int>(element_.tensors.size()); ++i) {
      out[py::str(schema_.field(i).name)] = ToArray(element_.tensors[i]);
    }
    return out;
  }

  // int64 [n, 2]: (epoch, index) of every sample, in batch order.
  py::array_t<int64_t> Ids() const {
    std::vector<SampleId> ids = element_.members;
    if (ids.empty()) ids.push_back(element_.id);
    py::array_t<int64_t> out({static_cast<py::ssize_t>(ids.size()), py::ssize_t{2}});
    auto r = out.mutable_unchecked<2>();
    for (size_t i = 0; i < ids.size(); ++i) {
      r(i, 0) = ids[i].epoch;
      r(i, 1) = static_cast<int64_t>(ids[i].index);
    }
    return out;
  }

  int64_t NumSamples() const {
    return element_.members.empty() ? 1 : static_cast<int64_t>(element_.members.size());
  }

  // Debug: the address of each field's first byte in the C++ buffer.
  py::dict DataPointers() const {
    py::dict out;
    for (int i = 0; i < schema_.size() && i < static_cast<int>(element_.tensors.size()); ++i) {
      out[py::str(schema_.field(i).name)] =
          reinterpret_cast<uintptr_t>(element_.tensors[i].raw());
    }
    return out;
  }

  // Debug: per-sample content digests, as `sluice run --dump-checksum` prints them.
  std::string Digests() const {
    SampleDigests d;
    d.Add(element_);
    return d.ToString();
  }

  const Element& element() const { return element_; }

 private:
  Element element_;
  Schema schema_;
};

// A SourceProgress as the Python loader passes it: {"first_epoch": int, "consumed":
// {epoch: bytes}, "divided": {epoch: bytes}, "padded": [(epoch, index)], "finished":
// {epoch: bytes}}; a missing key is empty. The Python side checked the values.
pipeline::SourceProgress ProgressFromDict(const py::dict& d) {
  pipeline::SourceProgress p;
  if (d.contains("first_epoch")) p.first_epoch = d["first_epoch"].cast<uint32_t>();
  auto bitmaps = [&d](const char* key, std::map<uint32_t, std::vector<bool>>* out) {
    if (!d.contains(key)) return;
    for (const auto& [epoch, bits] : d[key].cast<py::dict>()) {
      (*out)[epoch.cast<uint32_t>()] =
          pipeline::SourceProgress::BitsFromBytes(bits.cast<std::string>());
    }
  };
  bitmaps("consumed", &p.consumed);
  bitmaps("divided", &p.divided);
  bitmaps("finished", &p.finished);
  if (d.contains("padded")) {
    for (const py::handle item : d["padded"]) {
      const auto [epoch, index] = item.cast<std::pair<uint32_t, uint64_t>>();
      p.padded.insert(SampleId{epoch, index});
    }
  }
  return p;
}

py::dict ProgressToDict(const pipeline::SourceProgress& p) {
  auto bitmaps = [](const std::map<uint32_t, std::vector<bool>>& in) {
    py::dict out;
    for (const auto& [epoch, bits] : in) {
      out[py::int_(epoch)] = py::bytes(pipeline::SourceProgress::BitsToBytes(bits));
    }
    return out;
  };
  py::list padded;
  for (const SampleId& id : p.padded) padded.append(py::make_tuple(id.epoch, id.index));
  py::dict d;
  d["first_epoch"] = p.first_epoch;
  d["consumed"] = bitmaps(p.consumed);
  d["divided"] = bitmaps(p.divided);
  d["padded"] = padded;
  d["finished"] = bitmaps(p.finished);
  return d;
}

struct LoaderArgs {
  std::string spec_json;
  std::vector<std::string> workers;
  std::string policy = "none";
  int threads = 0;
  int64_t epochs = 0;  // 0: the spec's
  std::string token;
  std::string token_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  double connect_timeout_s = 5;
  uint64_t split_size = 0;
  double session_weight = 1;  // LoaderOptions::session_weight
  // sluice/auto: seconds measured all-local before the first plan; the metric store's folder
  // ("": the default one, "off": none).
  double measure_s = 2.0;
  std::string metric_store;
  // Resume (nullopt: from the start of the pass).
  std::optional<pipeline::SourceProgress> resume;
  // Sharding by rank (pipeline/shard.h).
  pipeline::Shard shard;
  // Where this pass's metrics go (the Python Loader's metrics server; null: none).
  std::shared_ptr<runtime::TrainerMetrics> metrics;
};

// The Python Loader's metrics: one server for the Loader's whole life, fed by each pass.
class PyMetricsServer {
 public:
  explicit PyMetricsServer(const std::string& listen)
      : metrics_(std::make_shared<runtime::TrainerMetrics>()) {
    server_ = ValueOrThrow(metrics::MetricsServer::Start(
        listen, [m = metrics_] { return m->Families(); }));
  }
  std::string address() const { return server_->address(); }
  const std::shared_ptr<runtime::TrainerMetrics>& metrics() const { return metrics_; }
  void Close() {
    py::gil_scoped_release release;
    server_.reset();
  }

 private:
  std::shared_ptr<runtime::TrainerMetrics> metrics_;
  std::unique_ptr<metrics::MetricsServer> server_;
};

// Python's logging levels.
constexpr int kLogInfo = 20;
constexpr int kLogWarning = 30;

// runtime::PolicyRunner with a fetch thread, so that a Python wait can be interrupted.
class PyLoader {
 public:
  explicit PyLoader(const LoaderArgs& args) {
    pipeline::PipelineSpec spec = ValueOrThrow(SpecFromJson(args.spec_json));
    if (args.epochs != 0) spec.epochs = args.epochs;
    runtime::RunnerOptions options;
    options.policy =
        ValueOrThrow(runtime::ParsePolicy(args.policy, static_cast<int>(spec.ops.size())));
    options.base.threads = args.threads;
    options.base.split_size = args.split_size;
    options.base.session_weight = args.session_weight;
    options.measure_s = args.measure_s;
    options.metrics = args.metrics;
    if (args.metric_store != "off") {
      policy::MetricStoreOptions store;
      store.dir = args.metric_store;
      options.metric_store = store;
    }
    std::string token = args.token;
    if (options.policy.name != "none" && token.empty() && !args.token_file.empty()) {
      token = ValueOrThrow(rpc::ReadTokenFile(args.token_file));
    }
    if (options.policy.name != "none") {
      for (const std::string& address : args.workers) {
        rpc::ConnectOptions c;
        c.address = address;
        c.token = token;
        c.tls_ca_file = args.tls_ca;
        c.tls_cert_file = args.tls_cert;
        c.tls_key_file = args.tls_key;
        c.connect_timeout_s = args.connect_timeout_s;
        options.workers.push_back(std::move(c));
      }
    }
    options.base.warn = [this](const std::string& message) {
      std::lock_guard<std::mutex> lock(warn_mu_);
      if (warnings_.size() < 1000) warnings_.push_back(message);
    };
    options.log = [this](const std::string& message) {
      constexpr std::string_view kWarning = "warning: ";
      if (message.rfind(kWarning, 0) == 0) {
        QueueLog(kLogWarning, message.substr(kWarning.size()));
      } else {
        QueueLog(kLogInfo, message);
      }
    };
    options.on_decision = [this](const policy::TimelineEntry& entry) {
      QueueLog(kLogInfo, runtime::DescribeDecision(entry));
    };
    if (args.resume.has_value() && !args.resume->empty()) {
      options.base.resume = std::make_shared<const pipeline::SourceProgress>(*args.resume);
    }
    options.base.shard = args.shard;
    StatusOr<std::unique_ptr<runtime::PolicyRunner>> created;
    {
      py::gil_scoped_release release;
      created = runtime::PolicyRunner::Open(spec, std::move(options));
    }
    runner_ = ValueOrThrow(std::move(created));
    schema_ = runner_->output_schema();
    fetcher_ = std::thread([this] { FetchLoop(); });
  }

  ~PyLoader() {
    py::gil_scoped_release release;
    Shutdown();
  }

  // The next batch, or None at the end. Raises the pipeline's error, or what a signal
  // handler raised (KeyboardInterrupt) while waiting.
  py::object Next() {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) {
      PyErr_SetString(PyExc_RuntimeError, "the loader is closed");
      throw py::error_already_set();
    }
    if (!requested_ && !ready_) {
      requested_ = true;
      times_.asked_ns = NowNanos();
      times_.took_previous_ns = last_took_ns_;
      cv_.notify_all();
    }
    while (!ready_) {
      bool got = false;
      {
        lock.unlock();
        {
          py::gil_scoped_release release;
          std::unique_lock<std::mutex> wait(mu_);
          got = cv_.wait_for(wait, std::chrono::milliseconds(50), [&] { return ready_; });
        }
        lock.lock();
      }
      if (got) break;
      lock.unlock();
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      lock.lock();
    }
    ready_ = false;
    Status status = std::move(status_);
    status_ = absl::OkStatus();
    const bool end = end_;
    Element element = std::move(element_);
    last_took_ns_ = NowNanos();
    lock.unlock();
    if (!status.ok()) ThrowStatus(status);
    if (end) return py::none();
    return py::cast(std::make_unique<Batch>(std::move(element), schema_));
  }

  void Cancel() {
    py::gil_scoped_release release;
    if (runner_ != nullptr) runner_->Cancel();
  }

  void Close() {
    py::gil_scoped_release release;
    Shutdown();
  }

  // The next pass on the same runner (runtime::PolicyRunner::NextPass): the plan and what the
  // planner measured carry over. A batch fetched for the pass that ends (a next() that a
  // signal interrupted) is dropped: it belongs to the old pass.
  void NextPass(int64_t epochs, const py::object& resume) {
    std::optional<pipeline::SourceProgress> progress;
    if (!resume.is_none()) progress = ProgressFromDict(resume.cast<py::dict>());
    Status status;
    {
      py::gil_scoped_release release;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (closed_) {
          status = absl::FailedPreconditionError("the loader is closed");
        } else {
          cv_.wait(lock, [&] { return !requested_ || stop_; });
          ready_ = false;
          end_ = false;
          status_ = absl::OkStatus();
          element_ = Element();
          last_took_ns_ = -1;  // the pause between passes is not the consumer's step
        }
      }
      if (status.ok()) {
        std::lock_guard<std::mutex> lock(runner_mu_);
        status = runner_->NextPass(
            epochs, progress.has_value()
                        ? std::make_shared<const pipeline::SourceProgress>(*std::move(progress))
                        : nullptr);
      }
    }
    if (!status.ok()) ThrowStatus(status);
  }

  // Saves what the planner measured to the metric store now (it is saved at close too).
  void Save() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(runner_mu_);
    if (runner_ == nullptr) return;
    if (Status saved = runner_->Finish(); !saved.ok()) {
      QueueLog(kLogWarning, absl::StrCat("metric store: ", saved.message()));
    }
  }

  py::dict Report() const {
    runtime::RunnerReport ran;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(runner_mu_);
      ran = runner_->Report();
    }
    const runtime::LoaderReport& r = ran.loader;
    const py::object loads = py::module_::import("json").attr("loads");
    py::dict d;
    d["policy"] = ran.policy;
    d["offloaded"] = r.offloaded;
    d["plan"] = loads(ran.PlanJson().dump());
    d["explanation"] = ran.plan.has_value() && !ran.plan->explanation.empty()
                           ? ran.plan->explanation
                           : ran.local_reason;
    d["local_reason"] = ran.local_reason;
    d["decisions"] = loads(ran.TimelineJson().dump());
    d["profile"] = loads(ran.profile.dump());
    d["time_to_plan_s"] = ran.time_to_plan_s.has_value() ? py::object(py::float_(*ran.time_to_plan_s))
                                                         : py::object(py::none());
    d["spill"] = r.local_spill_over ? "all" : "workers";
    d["threads"] = r.threads;
    d["samples_local"] = r.samples_local;
    d["samples_out"] = r.samples_out;
    d["batches_out"] = r.batches_out;
    d["duplicates_dropped"] = r.duplicates_dropped;
    d["requeued_samples"] = r.requeued_samples;
    d["skipped"] = r.skipped;
    d["shuffle_buffer_peak_samples"] = r.shuffle_buffer_peak_samples;
    d["shuffle_buffer_peak_bytes"] = r.shuffle_buffer_peak_bytes;
    py::list workers;
    for (const runtime::WorkerReport& w : r.workers) {
      py::dict wd;
      wd["address"] = w.address;
      wd["share"] = w.share;
      wd["samples"] = w.samples;
      wd["bytes_received"] = w.bytes_received;
      wd["cpu_share"] = w.cpu_share;
      wd["connected"] = w.connected;
      wd["bulk"] = w.bulk;
      wd["shared_memory"] = w.shared_memory;
      wd["shared_slots"] = w.shared_slots;
      wd["connects"] = w.connects;
      wd["failures"] = w.failures;
      wd["hangs"] = w.hangs;
      wd["drains"] = w.drains;
      wd["last_error"] = w.last_error;
      py::list metrics;
      for (const rpc::WorkerOpMetrics& m : w.metrics) {
        py::dict md;
        md["name"] = m.name;
        md["position"] = m.position;
        md["samples"] = m.samples;
        md["cpu_s"] = static_cast<double>(m.cpu_ns) / 1e9;
        md["bytes_out"] = m.bytes_out;
        md["errors"] = m.errors;
        metrics.append(std::move(md));
      }
      wd["ops"] = std::move(metrics);
      workers.append(std::move(wd));
    }
    d["workers"] = std::move(workers);
    py::list ops;
    for (const pipeline::OpStatsSnapshot& o : r.local_ops) {
      py::dict od;
      od["name"] = o.name;
      od["samples"] = o.samples;
      od["cpu_s"] = static_cast<double>(o.cpu_ns) / 1e9;
      od["cpu_ms_per_sample"] = o.cpu_ms_per_sample();
      od["bytes_per_sample"] = o.bytes_per_sample();
      od["errors"] = o.errors;
      ops.append(std::move(od));
    }
    d["ops"] = std::move(ops);
    d["warnings"] = r.warnings;
    return d;
  }

  // What the consumer has received so far, as ProgressToDict spells it. A batch the fetch
  // thread holds for the next next() (one that a signal interrupted fetched it) was counted
  // by the runner but not received by Python: it is left out, so a state_dict() taken after
  // Ctrl-C resumes with it.
  py::dict Progress() {
    pipeline::SourceProgress p;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> runner(runner_mu_);  // a fetch in flight ends first
      p = runner_->Progress();
      std::lock_guard<std::mutex> lock(mu_);
      if (ready_ && status_.ok() && !end_) {
        std::vector<SampleId> held = element_.members;
        if (held.empty()) held.push_back(element_.id);
        p = pipeline::Unreceive(std::move(p), held,
                                static_cast<uint64_t>(runner_->samples_per_epoch()));
      }
    }
    return ProgressToDict(p);
  }

  // For tests: what an interrupted next() leaves behind (the next batch fetched and held
  // for the next call), without a signal.
  void FetchAhead() {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return;
    if (!requested_ && !ready_) {
      requested_ = true;
      times_.asked_ns = NowNanos();
      times_.took_previous_ns = last_took_ns_;
      cv_.notify_all();
    }
    cv_.wait(lock, [&] { return ready_ || stop_; });
  }

  std::vector<std::string> DrainWarnings() {
    std::lock_guard<std::mutex> lock(warn_mu_);
    std::vector<std::string> out(warnings_.begin(), warnings_.end());
    warnings_.clear();
    return out;
  }

  // [(level, message)]: the planners' notes and decisions since the last call, for Python's
  // `logging` (levels as Python's: 20 INFO, 30 WARNING).
  std::vector<std::pair<int, std::string>> DrainLog() {
    std::lock_guard<std::mutex> lock(warn_mu_);
    std::vector<std::pair<int, std::string>> out(log_.begin(), log_.end());
    log_.clear();
    return out;
  }

  int64_t samples_per_epoch() const {
    std::lock_guard<std::mutex> lock(runner_mu_);
    return runner_->samples_per_epoch();
  }

  py::list Schema() const {
    py::list out;
    for (const FieldSpec& f : schema_.fields()) {
      out.append(py::make_tuple(f.name, std::string(DTypeName(f.dtype)), f.shape));
    }
    return out;
  }

 private:
  void FetchLoop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return requested_ || stop_; });
        if (stop_) return;
      }
      runtime::ConsumerTimes times;
      {
        std::lock_guard<std::mutex> lock(mu_);
        times = times_;
      }
      Element element;
      bool end = false;
      // The batch is handed over under runner_mu_: Progress() never sees it counted by the
      // runner and not yet held here.
      std::lock_guard<std::mutex> runner(runner_mu_);
      Status status = runner_->GetNext(&element, &end, times);
      std::lock_guard<std::mutex> lock(mu_);
      requested_ = false;
      ready_ = true;
      status_ = std::move(status);
      end_ = end;
      element_ = std::move(element);
      cv_.notify_all();
    }
  }

  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      stop_ = true;
      cv_.notify_all();
    }
    if (runner_ != nullptr) runner_->Cancel();
    if (fetcher_.joinable()) fetcher_.join();
    std::lock_guard<std::mutex> lock(runner_mu_);
    if (runner_ != nullptr) {
      runner_->Cancel();
      // The metric store keeps what this run measured for the next one.
      if (Status saved = runner_->Finish(); !saved.ok()) {
        QueueLog(kLogWarning, absl::StrCat("metric store: ", saved.message()));
      }
    }
  }

  void QueueLog(int level, std::string message) {
    std::lock_guard<std::mutex> lock(warn_mu_);
    if (log_.size() < 1000) log_.emplace_back(level, std::move(message));
  }

  // Held by the fetch thread around GetNext, and by whoever reads the runner's state (its
  // Loader is replaced inside GetNext when the plan changes).
  mutable std::mutex runner_mu_;
  std::unique_ptr<runtime::PolicyRunner> runner_;
  sluice::Schema schema_;
  std::thread fetcher_;
  int64_t last_took_ns_ = -1;  // Python's thread, under mu_

  std::mutex mu_;
  std::condition_variable cv_;
  bool requested_ = false;
  bool ready_ = false;
  bool stop_ = false;
  bool closed_ = false;
  bool end_ = false;
  Status status_;
  Element element_;
  runtime::ConsumerTimes times_;  // of the pending request

  mutable std::mutex warn_mu_;
  std::deque<std::string> warnings_;
  std::deque<std::pair<int, std::string>> log_;
};

}  // namespace
}  // namespace sluice::python

PYBIND11_MODULE(_core, m) {
  using namespace sluice;
  using namespace sluice::python;
  ConfigureAllocator();
  m.doc() = "The C++ core of sluice (pipeline specs, ops, the loader). Use the `sluice` package.";
  m.attr("__version__") = SLUICE_VERSION;

  m.def("parse_spec", [](const std::string& text, const std::string& filename) {
    return pipeline::ToCanonicalJson(ValueOrThrow(pipeline::ParseSpec(text, filename)));
  }, py::arg("text"), py::arg("filename") = "spec",
        "Parses a YAML or JSON spec; returns its canonical JSON. ValueError on a bad spec.");
  m.def("load_spec", [](const std::string& path) {
    return pipeline::ToCanonicalJson(ValueOrThrow(pipeline::LoadSpec(path)));
  }, py::arg("path"), "Reads a spec file; returns its canonical JSON.");
  m.def("spec_to_yaml", [](const std::string& json) {
    return pipeline::ToYaml(ValueOrThrow(SpecFromJson(json)));
  });
  m.def("spec_fingerprint", [](const std::string& json) {
    return pipeline::Fingerprint(ValueOrThrow(SpecFromJson(json)));
  });
  m.def("samples_per_epoch", [](const std::string& json) {
    pipeline::PipelineSpec spec = ValueOrThrow(SpecFromJson(json));
    StatusOr<pipeline::SourceFiles> files;
    {
      py::gil_scoped_release release;
      files = pipeline::ResolveSource(spec.source);
    }
    return pipeline::SamplesPerEpoch(ValueOrThrow(std::move(files)), spec.take);
  }, "Resolves the spec's source; returns the samples of one epoch.");
  m.def("merge_progress", [](const std::vector<py::dict>& ranks) {
    std::vector<pipeline::SourceProgress> progress;
    for (const py::dict& d : ranks) progress.push_back(ProgressFromDict(d));
    return ProgressToDict(ValueOrThrow(pipeline::MergeRankProgress(progress)));
  }, py::arg("ranks"),
        "Merges the progress dicts of every rank of a sharded run (ranks[r]: rank r's) into "
        "one that any number of ranks resume. ValueError when the ranks are more than one "
        "epoch apart.");
  m.def("describe_shard", [](int64_t rank, int64_t world_size, const std::string& even,
                             uint64_t samples_per_epoch) {
    const pipeline::Shard shard{rank, world_size};
    if (Status checked = pipeline::CheckShard(shard); !checked.ok()) ThrowStatus(checked);
    return pipeline::DescribeShard(
        shard, even == "pad" ? pipeline::EvenRule::kPad : pipeline::EvenRule::kDrop,
        samples_per_epoch);
  }, py::arg("rank"), py::arg("world_size"), py::arg("even"), py::arg("samples_per_epoch"));
  m.def("check_ops", &CheckOps, py::arg("chain"), py::arg("label") = "none",
        py::arg("seed") = 0,
        "Builds [(name, args), ...] on the source schema; returns each op's bound arguments.");
  m.def("op_schemas", &OpSchemas, "The schema of every registered op.");
  m.def("check_policy", [](const std::string& text, int num_ops) {
    return ValueOrThrow(runtime::ParsePolicy(text, num_ops)).ToString();
  }, py::arg("text"), py::arg("num_ops") = -1);

  py::class_<Batch>(m, "Batch")
      .def("arrays", &Batch::Arrays, "{field: numpy array sharing the C++ buffer}")
      .def("ids", &Batch::Ids, "int64 [n, 2]: (epoch, index) of each sample")
      .def_property_readonly("num_samples", &Batch::NumSamples)
      .def("data_pointers", &Batch::DataPointers, "{field: address of the C++ buffer}")
      .def("digests", &Batch::Digests, "per-sample digests as `sluice run --dump-checksum`");

  py::class_<PyMetricsServer>(m, "MetricsServer")
      .def(py::init<const std::string&>(), py::arg("listen"),
           "serves the loader's metrics on http://LISTEN/metrics (HOST:PORT; port 0: any)")
      .def_property_readonly("address", &PyMetricsServer::address)
      .def("close", &PyMetricsServer::Close);

  py::class_<PyLoader>(m, "Loader")
      .def(py::init([](const std::string& spec_json, const std::vector<std::string>& workers,
                       const std::string& policy, int threads, int64_t epochs,
                       const std::string& token, const std::string& token_file,
                       const std::string& tls_ca, const std::string& tls_cert,
                       const std::string& tls_key, double connect_timeout_s,
                       uint64_t split_size, const py::object& resume, double measure_s,
                       const std::string& metric_store, const PyMetricsServer* metrics,
                       int64_t rank, int64_t world_size, double session_weight) {
             LoaderArgs a;
             a.spec_json = spec_json;
             a.workers = workers;
             a.policy = policy;
             a.threads = threads;
             a.epochs = epochs;
             a.token = token;
             a.token_file = token_file;
             a.tls_ca = tls_ca;
             a.tls_cert = tls_cert;
             a.tls_key = tls_key;
             a.connect_timeout_s = connect_timeout_s;
             a.split_size = split_size;
             a.session_weight = session_weight;
             if (!resume.is_none()) a.resume = ProgressFromDict(resume.cast<py::dict>());
             a.shard = pipeline::Shard{rank, world_size};
             a.measure_s = measure_s;
             a.metric_store = metric_store;
             if (metrics != nullptr) a.metrics = metrics->metrics();
             return std::make_unique<PyLoader>(a);
           }),
           py::arg("spec_json"), py::arg("workers") = std::vector<std::string>{},
           py::arg("policy") = "none", py::arg("threads") = 0, py::arg("epochs") = 0,
           py::arg("token") = "", py::arg("token_file") = "", py::arg("tls_ca") = "",
           py::arg("tls_cert") = "", py::arg("tls_key") = "", py::arg("connect_timeout_s") = 5.0,
           py::arg("split_size") = 0, py::arg("resume") = py::none(), py::arg("measure_s") = 2.0,
           py::arg("metric_store") = "", py::arg("metrics") = nullptr, py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("session_weight") = 1.0)
      .def("next", &PyLoader::Next)
      .def("cancel", &PyLoader::Cancel)
      .def("close", &PyLoader::Close)
      .def("next_pass", &PyLoader::NextPass, py::arg("epochs"), py::arg("resume") = py::none(),
           "starts the next pass (epochs end at `epochs`, from `resume`) keeping the plan")
      .def("save", &PyLoader::Save, "saves the planner's measured costs to the metric store")
      .def("report", &PyLoader::Report)
      .def("progress", &PyLoader::Progress)
      .def("_fetch_ahead", &PyLoader::FetchAhead)
      .def("drain_warnings", &PyLoader::DrainWarnings)
      .def("drain_log", &PyLoader::DrainLog)
      .def_property_readonly("samples_per_epoch", &PyLoader::samples_per_epoch)
      .def("schema", &PyLoader::Schema);
}
