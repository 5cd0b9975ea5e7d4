// `sluice gen-data`: writes a synthetic data set (see gen_data.h).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/cli/gen_data.h"
#include "sluice/cli/gen_wav.h"
#include "sluice/cli/progress.h"
#include "sluice/cli/report.h"
#include "sluice/core/clock.h"
#include "sluice/core/cpu_budget.h"

namespace sluice::cli {

int GenDataCommand(const std::vector<std::string>& args) {
  const std::string kCommand = "gen-data";
  std::string kind = "jpeg";
  int64_t count = 0;
  std::string out;
  int64_t width = 500, height = 375, quality = 90, classes = 10, seed = 1;
  double corrupt_fraction = 0;
  int64_t threads = ProbeCpuBudget().threads();
  int64_t sample_rate = 16000;
  bool boxes = false;
  std::string format = "files";
  int64_t shard_size = 1000;

  FlagParser flags(kCommand, "--kind jpeg --count N --out DIR [flags]");
  flags.AddString("kind", &kind, "KIND", "what to generate; supported: jpeg, wav");
  flags.AddInt("count", &count, "N", "number of files (required)", 1);
  flags.AddString("out", &out, "DIR", "output folder, created if needed (required)");
  flags.AddInt("width", &width, "PX", "image width", 8, 16384);
  flags.AddInt("height", &height, "PX", "image height", 8, 16384);
  flags.AddInt("quality", &quality, "Q", "JPEG quality", 1, 100);
  flags.AddInt("classes", &classes, "N", "class folders class_000 ... (image i goes to i % N)", 1,
               100000);
  flags.AddInt("seed", &seed, "S", "seed; the same seed writes the same bytes", 0);
  flags.AddDouble("corrupt-fraction", &corrupt_fraction, "F",
                  "share of files planted corrupt (truncated or garbage), listed in corrupt.txt",
                  0.0, 1.0);
  flags.AddInt("threads", &threads, "T", "threads used to generate", 1, 1024);
  flags.AddInt("sample-rate", &sample_rate, "HZ", "wav: 16000 or 22050", 8000, 48000);
  flags.AddBool("boxes", &boxes, "jpeg: write a NAME.box bounding-box sidecar per image");
  flags.AddString("format", &format, "F",
                  "files (loose files) or tar (also packs them into DIR/shards/shard-NNNNNN.tar, "
                  "WebDataset layout)");
  flags.AddInt("shard-size", &shard_size, "N", "tar: samples per shard", 1, int64_t{1} << 30);

  if (Status s = flags.Parse(args); !s.ok()) {
    return UsageError(kCommand, std::string(s.message()), flags.Usage());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    return UsageError(kCommand, "unexpected argument '" + flags.positional()[0] + "'",
                      flags.Usage());
  }
  if (kind != "jpeg" && kind != "wav") {
    const bool planned = kind == "text";
    std::fprintf(stderr, "sluice %s: kind '%s' is %s (supported: jpeg, wav)\n", kCommand.c_str(),
                 kind.c_str(), planned ? "not supported yet" : "unknown");
    return kExitUsage;
  }
  if (format != "files" && format != "tar") {
    return UsageError(kCommand, "--format must be files or tar, got '" + format + "'",
                      flags.Usage());
  }
  if (!flags.IsSet("count")) return UsageError(kCommand, "--count is required", flags.Usage());
  if (out.empty()) return UsageError(kCommand, "--out is required", flags.Usage());

  GenDataOptions options;
  options.out_dir = out;
  options.count = count;
  options.classes = classes;
  options.seed = static_cast<uint64_t>(seed);
  options.corrupt_fraction = corrupt_fraction;
  options.threads = static_cast<int>(threads);
  options.image = JpegImageOptions{static_cast<int>(width), static_cast<int>(height),
                                   static_cast<int>(quality)};
  const int64_t start = NowNanos();
  ProgressLine progress(stderr, isatty(STDERR_FILENO) == 1, start);
  options.progress = [&](int64_t done, int64_t total) {
    const int64_t now = NowNanos();
    if (!progress.Due(now)) return;
    progress.Update(now, absl::StrFormat("gen-data: %d/%d %s (%.0f%%), %.1f s", done, total,
                                         kind == "wav" ? "utterances" : "images",
                                         100.0 * done / total, (now - start) / 1e9));
  };
  StatusOr<GenDataResult> result =
      kind == "wav" ? GenerateWavDataset(options, WavOptions{static_cast<int>(sample_rate)})
                    : GenerateJpegDataset(options);
  progress.Finish();
  if (!result.ok()) return ReportError(kCommand, result.status());
  if (kind == "jpeg" && boxes) {
    if (Status s = WriteBoxSidecars(options); !s.ok()) return ReportError(kCommand, s);
  }

  int64_t shards = 0;
  if (format == "tar") {
    StatusOr<int64_t> packed = PackShards(out, kind == "wav" ? "wav" : "jpg", shard_size);
    if (!packed.ok()) return ReportError(kCommand, packed.status());
    shards = *packed;
  }
  const double seconds = (NowNanos() - start) / 1e9;
  std::printf("gen-data: wrote %lld %s (%s) to %s in %.1f s\n",
              static_cast<long long>(result->files), kind == "wav" ? "utterances" : "images",
              FormatBytes(static_cast<double>(result->bytes)).c_str(), out.c_str(), seconds);
  if (shards > 0) {
    std::printf("gen-data: packed them into %lld shards of up to %lld samples in %s/shards\n",
                static_cast<long long>(shards), static_cast<long long>(shard_size), out.c_str());
  }
  if (!result->corrupt.empty()) {
    std::printf("gen-data: %zu planted corrupt files listed in %s/corrupt.txt\n",
                result->corrupt.size(), out.c_str());
  }
  return kExitOk;
}

}  // namespace sluice::cli
