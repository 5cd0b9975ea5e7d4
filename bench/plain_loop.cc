// The engine-free reference for the engine-overhead benchmark: resolves the same files and
// builds the same ops from the same spec (through the registry) as `sluice run`, then calls
// the ops one sample after another on the calling thread. No queues, no threads, no
// iterators; "batching" is a plain copy of each sample's bytes into a reused batch buffer.
// Prints one JSON object: samples, batches, wall_s, cpu_s (utime + stime from
// /proc/self/stat), samples_per_s, cpu_ms_per_sample.
//
//   sluice_plain_loop PIPELINE.yaml [--files GLOB] [--epochs N] [--json OUT]
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "sluice/cli/flags.h"
#include "sluice/core/clock.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/spec.h"

namespace {

using sluice::Element;
using sluice::Status;
using sluice::StatusOr;
namespace pipeline = sluice::pipeline;

// User + system CPU seconds of this process, from /proc/self/stat (fields 14 and 15).
double ProcSelfCpuSeconds() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may contain spaces; fields are counted after its ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

struct LoopResult {
  int64_t samples = 0;
  int64_t batches = 0;
  int64_t skipped = 0;
  int64_t checksum = 0;  // keeps the copies observable
};

StatusOr<LoopResult> RunLoop(const pipeline::PipelineSpec& spec) {
  SLUICE_ASSIGN_OR_RETURN(pipeline::SourceFiles files, pipeline::ResolveSource(spec.source));
  const bool with_label = spec.source.label == pipeline::LabelMode::kParentDir;
  SLUICE_ASSIGN_OR_RETURN(
      pipeline::BuiltOps built,
      pipeline::BuildOps(spec.ops, spec.source.seed, sluice::ops::Registry::Builtin(),
                         pipeline::SourceSchema(spec.source.label)));
  const int64_t per_epoch = pipeline::SamplesPerEpoch(files, spec.take);
  const int64_t batch_size = spec.batch.size > 0 ? spec.batch.size : 1;

  LoopResult result;
  std::vector<uint8_t> batch_buffer;
  size_t batch_bytes = 0;
  int64_t in_batch = 0;
  auto flush = [&] {
    if (in_batch == 0) return;
    result.checksum += batch_buffer.empty() ? 0 : batch_buffer[batch_bytes / 2];
    ++result.batches;
    in_batch = 0;
    batch_bytes = 0;
  };
  for (int64_t epoch = 0; epoch < spec.epochs; ++epoch) {
    const std::vector<uint64_t> order =
        pipeline::EpochOrder(static_cast<uint64_t>(per_epoch), spec.source.shuffle,
                             spec.source.seed, static_cast<uint32_t>(epoch));
    for (uint64_t index : order) {
      Element element =
          pipeline::MakeSourceElement(files, with_label, static_cast<uint32_t>(epoch), index);
      Status status;
      for (size_t i = 0; i < built.ops.size() && status.ok(); ++i) {
        status = built.ops[i]->Apply(element, built.contexts[i]);
        if (!status.ok()) {
          status =
              sluice::Annotate(status, built.Label(static_cast<int>(i)) + ": " + element.origin);
        }
      }
      if (!status.ok()) {
        if (spec.options.on_error == pipeline::OnError::kFail) return status;
        ++result.skipped;
        continue;
      }
      for (const sluice::Tensor& t : element.tensors) {
        if (batch_buffer.size() < batch_bytes + t.nbytes()) {
          batch_buffer.resize((batch_bytes + t.nbytes()) * 2);
        }
        std::memcpy(batch_buffer.data() + batch_bytes, t.raw(), t.nbytes());
        batch_bytes += t.nbytes();
      }
      ++result.samples;
      if (++in_batch == batch_size) flush();
    }
  }
  if (!spec.batch.drop_remainder) {
    flush();
  } else {
    result.samples -= in_batch;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::string files;
  int64_t epochs = 0;
  std::string json_path;
  sluice::cli::FlagParser flags("", "PIPELINE.yaml [--files GLOB] [--epochs N] [--json OUT]",
                                "sluice_plain_loop");
  flags.AddString("files", &files, "GLOB", "override source.files");
  flags.AddInt("epochs", &epochs, "N", "override the spec's epochs (0: keep)", 0);
  flags.AddString("json", &json_path, "OUT", "write the JSON result there too");
  Status parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (parsed.ok() && flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!parsed.ok() || flags.positional().size() != 1) {
    std::fprintf(stderr, "%s\n%s",
                 parsed.ok() ? "expected one pipeline file" : std::string(parsed.message()).c_str(),
                 flags.Usage().c_str());
    return 2;
  }
  StatusOr<pipeline::PipelineSpec> spec = pipeline::LoadSpec(flags.positional()[0]);
  if (!spec.ok()) {
    std::fprintf(stderr, "plain_loop: %s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  if (!files.empty()) {
    spec->source.files = {files};
    spec->source.manifest.clear();
  }
  if (epochs > 0) spec->epochs = epochs;
  if (spec->epochs < 1) {
    std::fprintf(stderr, "plain_loop: needs a finite number of epochs\n");
    return 2;
  }

  const double cpu0 = ProcSelfCpuSeconds();
  const int64_t start = sluice::NowNanos();
  StatusOr<LoopResult> result = RunLoop(*spec);
  const double wall_s = (sluice::NowNanos() - start) / 1e9;
  const double cpu_s = ProcSelfCpuSeconds() - cpu0;
  if (!result.ok()) {
    std::fprintf(stderr, "plain_loop: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  nlohmann::json j = {
      {"samples", result->samples},
      {"batches", result->batches},
      {"skipped", result->skipped},
      {"wall_s", wall_s},
      {"cpu_s", cpu_s},
      {"samples_per_s", wall_s > 0 ? result->samples / wall_s : 0},
      {"cpu_ms_per_sample", result->samples ? cpu_s * 1e3 / result->samples : 0},
      {"checksum", result->checksum},
  };
  const std::string text = j.dump() + "\n";
  std::fputs(text.c_str(), stdout);
  if (!json_path.empty()) std::ofstream(json_path) << text;
  return 0;
}
