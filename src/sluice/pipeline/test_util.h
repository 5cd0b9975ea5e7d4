// Helpers for the pipeline tests only: a registry of small test ops, a temporary folder of
// files, draining iterators, and a watchdog that turns a hang into a failure.
#ifndef SLUICE_PIPELINE_TEST_UTIL_H_
#define SLUICE_PIPELINE_TEST_UTIL_H_

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <opencv2/core.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/core/clock.h"
#include "sluice/core/element.h"
#include "sluice/ops/op.h"
#include "sluice/ops/registry.h"
#include "sluice/pipeline/iterator.h"
#include "sluice/pipeline/source.h"

namespace sluice::pipeline::testing_util {

// An op whose behaviour is a closure; geometry is configurable for decoder wiring tests.
class LambdaOp : public ops::Op {
 public:
  using Fn = std::function<Status(Element&, const ops::OpContext&)>;
  LambdaOp(const ops::OpSchema* schema, ops::Args args, Schema input, Schema output, Fn fn,
           ops::Geometry geometry)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        fn_(std::move(fn)),
        geometry_(geometry) {}

  Status Apply(Element& element, const ops::OpContext& ctx) const override {
    return fn_(element, ctx);
  }
  ops::Geometry geometry() const override { return geometry_; }
  void SetScaleConsumer(const ops::Op* consumer, ops::OpContext ctx) override {
    scale_consumer = consumer;
    scale_consumer_ctx = ctx;
  }

  const ops::Op* scale_consumer = nullptr;
  ops::OpContext scale_consumer_ctx;

 private:
  Fn fn_;
  ops::Geometry geometry_;
};

// Makes an OpDef from a schema-computing function and an apply-maker.
inline ops::OpDef MakeDef(
    ops::OpSchema schema,
    std::function<StatusOr<Schema>(const ops::Args&, const Schema&)> out_schema,
    std::function<LambdaOp::Fn(const ops::Args&, const Schema& output)> make_fn,
    ops::Geometry geometry = ops::Geometry::kOther) {
  ops::OpDef def;
  def.schema = std::move(schema);
  def.factory = [out_schema, make_fn, geometry](
                    const ops::OpSchema& s, const ops::Args& args,
                    const Schema& input) -> StatusOr<std::unique_ptr<ops::Op>> {
    SLUICE_ASSIGN_OR_RETURN(Schema output, out_schema(args, input));
    LambdaOp::Fn fn = make_fn(args, output);
    return std::unique_ptr<ops::Op>(new LambdaOp(&s, args, input, output, std::move(fn), geometry));
  };
  return def;
}

inline ops::ArgSchema IntArg(std::string name, int64_t def) {
  ops::ArgSchema a;
  a.name = std::move(name);
  a.type = ops::ArgType::kInt;
  a.default_value = def;
  return a;
}

inline ops::ArgSchema IntListArg(std::string name) {
  ops::ArgSchema a;
  a.name = std::move(name);
  a.type = ops::ArgType::kIntList;
  a.default_value = std::vector<int64_t>{-1};
  return a;
}

inline StatusOr<Schema> SameSchema(const ops::Args&, const Schema& in) { return in; }

// The test ops:
//   tag        adds `tag` i64[] = 10 * index + epoch
//   sleep      sleeps `ms` ms (0: none), or `ms` + (index % `spread`) ms with a spread
//   burn       spins on the CPU for `us` microseconds
//   fail_on    fails on the indices in `ids` with "bad sample <index>"
//   throw_on   throws on the indices in `ids`: `kind` 0 std::bad_alloc, 1 std::length_error,
//              2 cv::Exception (out of memory), 3 std::runtime_error
//   rand       adds `rand` i64[] = first draw of ctx.MakeRng(element)
//   blob       adds `blob` u8[`bytes`] filled with index % 251
//   ragged     adds `seq` f32[?,2] with (index % 4) + 1 rows, every value = index
//   needs_tag  requires field `tag` (schema error otherwise)
//   decoder / flip / resize   no-ops with geometry kOther / kSizeIndependent / kScaleConsumer
inline std::unique_ptr<ops::Registry> TestRegistry() {
  auto r = std::make_unique<ops::Registry>();
  auto add = [&](ops::OpDef def) {
    Status s = r->Register(std::move(def));
    if (!s.ok()) ADD_FAILURE() << s;
  };
  auto add_scalar = [](const std::string& name, DType dtype, Shape shape) {
    return [name, dtype, shape](const ops::Args&, const Schema& in) -> StatusOr<Schema> {
      Schema out = in;
      out.Set(FieldSpec{name, dtype, shape});
      return out;
    };
  };

  add(MakeDef({"tag", "adds tag", {}}, add_scalar("tag", DType::kI64, {}),
              [](const ops::Args&, const Schema&) {
                return [](Element& e, const ops::OpContext&) {
                  e.tensors.push_back(
                      Tensor::Scalar(static_cast<int64_t>(e.id.index * 10 + e.id.epoch)));
                  return absl::OkStatus();
                };
              }));
  add(MakeDef({"sleep", "sleeps", {IntArg("ms", 1), IntArg("spread", 0)}}, SameSchema,
              [](const ops::Args& a, const Schema&) {
                int64_t ms = a.Int("ms"), spread = a.Int("spread");
                return [ms, spread](Element& e, const ops::OpContext&) {
                  int64_t total = ms + (spread > 0 ? static_cast<int64_t>(e.id.index) % spread : 0);
                  std::this_thread::sleep_for(std::chrono::milliseconds(total));
                  return absl::OkStatus();
                };
              }));
  add(MakeDef({"burn", "burns cpu", {IntArg("us", 100)}}, SameSchema,
              [](const ops::Args& a, const Schema&) {
                int64_t us = a.Int("us");
                return [us](Element&, const ops::OpContext&) {
                  int64_t end = ThreadCpuNanos() + us * 1000;
                  volatile uint64_t x = 0;
                  while (ThreadCpuNanos() < end) x = x + 1;
                  return absl::OkStatus();
                };
              }));
  add(MakeDef({"fail_on", "fails on ids", {IntListArg("ids")}}, SameSchema,
              [](const ops::Args& a, const Schema&) {
                std::vector<int64_t> ids = a.IntList("ids");
                std::set<uint64_t> bad(ids.begin(), ids.end());
                return [bad](Element& e, const ops::OpContext&) -> Status {
                  if (bad.count(e.id.index)) {
                    return absl::DataLossError(absl::StrCat("bad sample ", e.id.index));
                  }
                  return absl::OkStatus();
                };
              }));
  add(MakeDef({"throw_on", "throws on ids", {IntListArg("ids"), IntArg("kind", 0)}}, SameSchema,
              [](const ops::Args& a, const Schema&) {
                std::vector<int64_t> ids = a.IntList("ids");
                std::set<uint64_t> bad(ids.begin(), ids.end());
                int64_t kind = a.Int("kind");
                return [bad, kind](Element& e, const ops::OpContext&) -> Status {
                  if (!bad.count(e.id.index)) return absl::OkStatus();
                  if (kind == 1) {
                    std::vector<int> v;
                    v.reserve(v.max_size() + 1);  // std::length_error
                  } else if (kind == 2) {
                    throw cv::Exception(cv::Error::StsNoMem, "Failed to allocate 1 TB",
                                        "OutOfMemoryError", __FILE__, __LINE__);
                  } else if (kind == 3) {
                    throw std::runtime_error("something odd");
                  }
                  throw std::bad_alloc();
                };
              }));
  add(MakeDef({"rand", "adds a random draw", {}, /*random=*/true},
              add_scalar("rand", DType::kI64, {}), [](const ops::Args&, const Schema&) {
                return [](Element& e, const ops::OpContext& ctx) {
                  Rng rng = ctx.MakeRng(e);
                  e.tensors.push_back(Tensor::Scalar(static_cast<int64_t>(rng.NextU64() >> 1)));
                  return absl::OkStatus();
                };
              }));
  add(MakeDef(
      {"blob", "adds a blob", {IntArg("bytes", 1024)}},
      [](const ops::Args& a, const Schema& in) -> StatusOr<Schema> {
        Schema out = in;
        out.Set(FieldSpec{"blob", DType::kU8, {a.Int("bytes")}});
        return out;
      },
      [](const ops::Args& a, const Schema&) {
        int64_t bytes = a.Int("bytes");
        return [bytes](Element& e, const ops::OpContext&) {
          Tensor t = Tensor::Empty(DType::kU8, {bytes});
          std::memset(t.mutable_raw(), static_cast<int>(e.id.index % 251), t.nbytes());
          e.tensors.push_back(std::move(t));
          return absl::OkStatus();
        };
      }));
  add(MakeDef({"ragged", "adds a ragged field", {}},
              add_scalar("seq", DType::kF32, {kUnknownDim, 2}),
              [](const ops::Args&, const Schema&) {
                return [](Element& e, const ops::OpContext&) {
                  int64_t rows = static_cast<int64_t>(e.id.index % 4) + 1;
                  Tensor t = Tensor::Empty(DType::kF32, {rows, 2});
                  float* p = t.mutable_data<float>();
                  for (int64_t i = 0; i < rows * 2; ++i) p[i] = static_cast<float>(e.id.index);
                  e.tensors.push_back(std::move(t));
                  return absl::OkStatus();
                };
              }));
  add(MakeDef(
      {"needs_tag", "needs tag", {}},
      [](const ops::Args&, const Schema& in) -> StatusOr<Schema> {
        if (in.IndexOf("tag") < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("needs field 'tag', the element has ", in.ToString()));
        }
        return in;
      },
      [](const ops::Args&, const Schema&) {
        return [](Element&, const ops::OpContext&) { return absl::OkStatus(); };
      }));
  auto noop = [](const ops::Args&, const Schema&) {
    return [](Element&, const ops::OpContext&) { return absl::OkStatus(); };
  };
  add(MakeDef({"decoder", "", {}}, SameSchema, noop, ops::Geometry::kOther));
  add(MakeDef({"flip", "", {}}, SameSchema, noop, ops::Geometry::kSizeIndependent));
  add(MakeDef({"resize", "", {}}, SameSchema, noop, ops::Geometry::kScaleConsumer));
  return r;
}

// A fresh temporary folder, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("SLUICE_TEST_TMPDIR");
    std::string root = base != nullptr && *base ? base : ::testing::TempDir();
    std::filesystem::create_directories(root);
    std::string tmpl = root + "/sluice-pipeline-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* made = mkdtemp(buf.data());
    if (made == nullptr) {
      ADD_FAILURE() << "mkdtemp failed under " << root;
    } else {
      path_ = made;
    }
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Creates `relative` (and its folders) holding `contents`; returns the full path.
  std::string Write(const std::string& relative, const std::string& contents = "x") const {
    std::filesystem::path p = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << contents;
    return p.string();
  }
  // Creates n files "<folder>/f000.dat", ... and returns the glob matching them.
  std::string WriteFiles(int n, const std::string& folder = "data") const {
    for (int i = 0; i < n; ++i) {
      char name[32];
      std::snprintf(name, sizeof(name), "f%03d.dat", i);
      Write(folder + "/" + name);
    }
    return path_ + "/" + folder + "/*.dat";
  }

 private:
  std::string path_;
};

// Runs `fn` on another thread; if it has not returned after `seconds`, the test fails and
// the process aborts (a hang would otherwise block the whole suite).
inline void WithWatchdog(double seconds, const std::function<void()>& fn) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto state = std::make_shared<State>();
  std::thread worker([state, &fn] {
    fn();
    std::lock_guard<std::mutex> lock(state->mu);
    state->done = true;
    state->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(state->mu);
  bool ok =
      state->cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return state->done; });
  lock.unlock();
  if (!ok) {
    std::fprintf(stderr, "watchdog: still running after %.1f s (a hang); aborting\n", seconds);
    std::fflush(stderr);
    std::abort();
  }
  worker.join();
}

// Pulls everything; fails the test on an error.
inline std::vector<Element> Drain(Iterator& it, size_t limit = 1000000) {
  std::vector<Element> out;
  for (size_t i = 0; i < limit; ++i) {
    Element e;
    bool eos = false;
    Status s = it.GetNext(&e, &eos);
    if (!s.ok()) {
      ADD_FAILURE() << "GetNext failed: " << s;
      break;
    }
    if (eos) break;
    out.push_back(std::move(e));
  }
  return out;
}

// An iterator over given elements (for testing the stages after the source).
class VectorIterator : public Iterator {
 public:
  VectorIterator(Schema schema, std::vector<Element> elements, Status final_status = {})
      : schema_(std::move(schema)),
        elements_(std::move(elements)),
        final_status_(std::move(final_status)) {}
  Status GetNext(Element* out, bool* end_of_stream) override {
    if (cancelled_) return absl::CancelledError("cancelled");
    if (next_ < elements_.size()) {
      *out = elements_[next_++];
      *end_of_stream = false;
      return absl::OkStatus();
    }
    *end_of_stream = final_status_.ok();
    return final_status_;
  }
  void Cancel() override { cancelled_ = true; }
  const Schema& schema() const override { return schema_; }

 private:
  Schema schema_;
  std::vector<Element> elements_;
  Status final_status_;
  size_t next_ = 0;
  std::atomic<bool> cancelled_{false};
};

// An element with id {0, index}, origin "file<index>", and the given tensors.
inline Element MakeElement(uint64_t index, std::vector<Tensor> tensors) {
  Element e;
  e.id = SampleId{0, index};
  e.origin = absl::StrCat("file", index);
  e.tensors = std::move(tensors);
  return e;
}

// Files "/data/{even,odd}/<i>.jpg" (nothing on disk), labelled by parity when asked.
inline std::shared_ptr<const SourceFiles> FakeFiles(int n, bool labels = false) {
  auto f = std::make_shared<SourceFiles>();
  for (int i = 0; i < n; ++i) {
    f->paths.push_back(absl::StrCat("/data/", i % 2 ? "odd" : "even", "/", i, ".jpg"));
    if (labels) f->labels.push_back(i % 2);
  }
  if (labels) f->class_names = {"even", "odd"};
  return f;
}

inline int64_t Scalar(const Element& e, const Schema& schema, const std::string& field) {
  int i = schema.IndexOf(field);
  EXPECT_GE(i, 0) << "no field " << field;
  return i >= 0 ? e.tensors[i].scalar_int() : -1;
}

}  // namespace sluice::pipeline::testing_util

#endif  // SLUICE_PIPELINE_TEST_UTIL_H_
