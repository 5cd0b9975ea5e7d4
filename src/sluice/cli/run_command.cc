// `sluice run PIPELINE.yaml`: runs a pipeline locally and reports what each op costs.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/core/sample_digests.h"
#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/cli/progress.h"
#include "sluice/cli/report.h"
#include "sluice/core/clock.h"
#include "sluice/core/cpu_budget.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/pipeline/spec.h"

namespace sluice::cli {
namespace {

// Batches the run will deliver, or -1 when unknown (endless epochs, no --steps).
int64_t ExpectedBatches(const pipeline::PipelineSpec& spec, int64_t samples_per_epoch,
                        int64_t steps) {
  int64_t batches = -1;
  if (spec.epochs > 0) {
    const int64_t samples = samples_per_epoch * spec.epochs;
    const int64_t size = spec.batch.size;
    if (size <= 0) {
      batches = samples;
    } else {
      batches = spec.batch.drop_remainder ? samples / size : (samples + size - 1) / size;
    }
  }
  if (steps > 0) batches = batches < 0 ? steps : std::min(batches, steps);
  return batches;
}

}  // namespace

int RunCommand(const std::vector<std::string>& args) {
  const std::string kCommand = "run";
  int64_t threads = 0;
  int64_t steps = 0;
  int64_t epochs = 0;
  std::string files;
  std::string json_path;
  bool dump_checksum = false;

  ShardFlags shard_flags;
  FlagParser flags(kCommand,
                   "PIPELINE.yaml [--threads N] [--steps N] [--epochs N] [--files GLOB] "
                   "[--rank R --world-size N] [--json OUT]");
  flags.AddInt("threads", &threads, "N",
               "pipeline threads (0: the spec's options.threads, else the CPU budget)", 0,
               pipeline::SpecLimits::kMaxThreads);
  flags.AddInt("steps", &steps, "N", "stop after N batches (0: run every epoch)", 0);
  flags.AddInt("epochs", &epochs, "N", "override the spec's epochs (-1: forever; 0: keep)", -1,
               pipeline::SpecLimits::kMaxEpochs);
  flags.AddString("files", &files, "GLOB",
                  "override source.files (source.shards in a shards spec; \"**\" crosses folders)");
  flags.AddString("json", &json_path, "OUT", "also write the report as JSON to OUT (- : stdout)");
  AddShardFlags(flags, &shard_flags);
  // For tests: per-sample content digests in SampleId order on stdout (core/sample_digests.h); the
  // table then goes to stderr.
  flags.AddBool("dump-checksum", &dump_checksum, "print per-sample digests", /*hidden=*/true);

  if (std::optional<int> stop = ParsePipelineCommand(kCommand, flags, args)) return *stop;
  if (json_path == "-" && dump_checksum) {
    return UsageError(kCommand, "--json - and --dump-checksum both want stdout", flags.Usage());
  }
  StatusOr<pipeline::Shard> shard = ShardFromFlags(flags, shard_flags);
  if (!shard.ok()) {
    return UsageError(kCommand, std::string(shard.status().message()), flags.Usage());
  }

  std::optional<pipeline::PipelineSpec> loaded = LoadPipelineForCommand(kCommand, flags, files);
  if (!loaded) return kExitUsage;
  pipeline::PipelineSpec spec = *std::move(loaded);
  if (epochs != 0) spec.epochs = epochs;

  pipeline::ExecutorOptions options;
  options.threads = static_cast<int>(threads);
  options.shard = *shard;
  const int64_t start = NowNanos();
  StatusOr<std::unique_ptr<pipeline::LocalExecutor>> created =
      pipeline::LocalExecutor::Create(spec, options);
  if (!created.ok()) return ReportError(kCommand, created.status());
  std::unique_ptr<pipeline::LocalExecutor> executor = *std::move(created);

  const uint64_t per_epoch = static_cast<uint64_t>(executor->samples_per_epoch());
  if (shard->sharded()) {
    std::fprintf(stderr, "sluice %s: %s\n", kCommand.c_str(),
                 pipeline::DescribeShard(*shard, spec.source.even, per_epoch).c_str());
  }
  const int64_t expected = ExpectedBatches(
      spec, static_cast<int64_t>(pipeline::SamplesPerRank(per_epoch, *shard, spec.source.even)),
      steps);
  ProgressLine progress(stderr, isatty(STDERR_FILENO) == 1, start);
  SampleDigests digests;
  Element batch;
  int64_t batches = 0;
  while (steps == 0 || batches < steps) {
    bool end = false;
    Status status = executor->GetNext(&batch, &end);
    if (!status.ok()) {
      progress.Finish();
      std::fprintf(stderr, "sluice %s: %s\n", kCommand.c_str(),
                   std::string(status.message()).c_str());
      return kExitRuntime;
    }
    if (end) break;
    ++batches;
    if (dump_checksum) digests.Add(batch);
    const int64_t now = NowNanos();
    if (progress.Due(now)) {
      const int64_t samples = executor->stats().samples_out.load(std::memory_order_relaxed);
      const double elapsed = (now - start) / 1e9;
      progress.Update(
          now, absl::StrFormat("run: %d%s batches, %d samples, %.1f samples/s, %.1f s", batches,
                               expected >= 0 ? absl::StrCat("/", expected) : "", samples,
                               samples / elapsed, elapsed));
    }
  }
  const double wall_s = (NowNanos() - start) / 1e9;
  executor->Cancel();
  progress.Finish();

  const pipeline::PipelineStats& stats = executor->stats();
  RunReport report;
  report.ops = stats.SnapshotOps();
  report.source_samples = stats.source_samples.load();
  report.samples = stats.samples_out.load();
  report.batches = batches;
  report.wall_s = wall_s;
  report.threads = executor->threads();
  report.cpu_budget = ProbeCpuBudget().cpus();
  report.batches_in_place = stats.batches_in_place.load();
  report.skipped = stats.skipped();
  report.skipped_names = stats.skipped_names();
  report.fingerprint = pipeline::Fingerprint(spec);
  executor.reset();  // joins the pipeline threads before the peak is read
  report.peak_rss_bytes = PeakRssBytes();

  if (dump_checksum) {
    std::fputs(digests.ToString().c_str(), stdout);
    std::fputs(FormatTable(report).c_str(), stderr);
  } else {
    std::fputs(FormatTable(report).c_str(), stdout);
  }
  std::fflush(stdout);
  if (!json_path.empty()) {
    Status written = WriteOutput(json_path, ToJson(report).dump(2) + "\n");
    if (!written.ok()) {
      std::fprintf(stderr, "sluice %s: %s\n", kCommand.c_str(),
                   std::string(written.message()).c_str());
      return kExitRuntime;
    }
  }
  return kExitOk;
}

}  // namespace sluice::cli
