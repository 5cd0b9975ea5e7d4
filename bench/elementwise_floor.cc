// Element-wise ops against the memory floor: for each op, the thread CPU of applying it to a
// 224x224 RGB uint8 image (the standard pipeline's sample after its crop), beside the CPU of
// a plain copy of its output: a new tensor of the output's dtype and shape (the engine's
// allocator, as every op's output) filled by memcpy from a buffer of that size. Measured in
// the same run, interleaved, medians of `--repeats` rounds of `--iterations` calls each. The
// target (docs/BENCHMARKS.md): every op within 2x of its floor. The ops are built through
// the registry from the same YAML a pipeline would carry, so they are the engine's ops.
// Prints a table, and one JSON object with --json.
//
//   sluice_elementwise_floor [--iterations N] [--repeats N] [--json OUT]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/cli/flags.h"
#include "sluice/core/allocator.h"
#include "sluice/core/clock.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/spec.h"

namespace {

using sluice::DType;
using sluice::Element;
using sluice::Status;
using sluice::Tensor;
namespace pipeline = sluice::pipeline;

struct Case {
  const char* name;
  const char* yaml;  // one op
};

// The element-wise tail of the standard pipelines and the crops' copies.
const Case kCases[] = {
    {"normalize (u8 HWC -> f32 CHW)",
     "normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], layout: CHW, "
     "dtype: f32}"},
    {"normalize (u8 -> f16 CHW)",
     "normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], layout: CHW, "
     "dtype: f16}"},
    {"cast u8 -> f32", "cast: {dtype: f32}"},
    {"random_flip (p 1)", "random_flip: {p: 1.0}"},
    {"center_crop 200", "center_crop: {size: [200, 200]}"},
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t iterations = 300;
  int64_t repeats = 5;
  std::string json_path;
  sluice::cli::FlagParser flags("", "[--iterations N] [--repeats N] [--json OUT]",
                                "sluice_elementwise_floor");
  flags.AddInt("iterations", &iterations, "N", "calls per round", 1, 1000000);
  flags.AddInt("repeats", &repeats, "N", "rounds (the median is reported)", 1, 1000);
  flags.AddString("json", &json_path, "OUT", "write the JSON result there too");
  Status parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (parsed.ok() && flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!parsed.ok() || !flags.positional().empty()) {
    std::fprintf(stderr, "%s\n%s", parsed.ok() ? "takes no positional arguments"
                                               : std::string(parsed.message()).c_str(),
                 flags.Usage().c_str());
    return 2;
  }
  sluice::ConfigureAllocator();  // as the trainer and the worker do

  // A photo-like input: random bytes would do for these ops, but keep it deterministic.
  Tensor image = Tensor::Empty(DType::kU8, {224, 224, 3});
  std::mt19937 rng(1);
  for (int64_t i = 0; i < image.nbytes(); ++i) image.mutable_raw()[i] = rng() & 0xff;
  const sluice::Schema input({{"image", DType::kU8, {224, 224, 3}}});

  nlohmann::json out = nlohmann::json::array();
  std::printf("%-32s %12s %10s %10s %7s\n", "op", "output bytes", "op us", "copy us", "ratio");
  for (const Case& c : kCases) {
    const std::string yaml =
        std::string("source: {files: 'unused/*.jpg'}\nops:\n  - ") + c.yaml + "\n";
    auto spec = pipeline::ParseSpec(yaml, c.name);
    if (!spec.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, std::string(spec.status().message()).c_str());
      return 1;
    }
    auto built = pipeline::BuildOps(spec->ops, 1, sluice::ops::Registry::Builtin(), input);
    if (!built.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, std::string(built.status().message()).c_str());
      return 1;
    }
    // The output's size, from one call.
    Element probe;
    probe.tensors.push_back(image);
    if (Status s = built->ops[0]->Apply(probe, built->contexts[0]); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, std::string(s.message()).c_str());
      return 1;
    }
    const size_t bytes = probe.tensors[0].nbytes();
    std::vector<uint8_t> src(bytes, 1);
    const DType out_dtype = probe.tensors[0].dtype();
    const sluice::Shape out_shape = probe.tensors[0].shape();
    std::vector<double> op_us, copy_us;
    uint64_t sink = 0;
    for (int64_t r = 0; r < repeats; ++r) {
      int64_t t0 = sluice::ThreadCpuNanos();
      for (int64_t i = 0; i < iterations; ++i) {
        Element e;
        e.tensors.push_back(image);
        (void)built->ops[0]->Apply(e, built->contexts[0]);
        sink += e.tensors[0].raw()[bytes / 2];
      }
      op_us.push_back((sluice::ThreadCpuNanos() - t0) / 1e3 / iterations);
      t0 = sluice::ThreadCpuNanos();
      for (int64_t i = 0; i < iterations; ++i) {
        src[i % bytes] = static_cast<uint8_t>(i);
        Tensor copy = Tensor::Empty(out_dtype, out_shape);
        std::memcpy(copy.mutable_raw(), src.data(), bytes);
        sink += copy.raw()[bytes / 2];
      }
      copy_us.push_back((sluice::ThreadCpuNanos() - t0) / 1e3 / iterations);
    }
    const double op = Median(op_us), copy = Median(copy_us);
    std::printf("%-32s %12zu %10.1f %10.1f %6.2fx\n", c.name, bytes, op, copy, op / copy);
    out.push_back({{"op", c.name}, {"output_bytes", bytes}, {"op_us", op}, {"copy_us", copy},
                   {"ratio", op / copy}, {"sink", sink % 2}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  return 0;
}
