#include "sluice/cli/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/ops/registry.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif

namespace sluice::cli {
namespace {

constexpr const char* kUsage =
    "usage: sluice <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  gen-data  write a synthetic data set (JPEGs or WAVs in class folders, or tar shards)\n"
    "  index     write SHARD.idx beside tar shards (member ranges, for reading them remotely)\n"
    "  run       run a pipeline locally and print what each op costs\n"
    "  ops       list the operators and their arguments\n"
    "  worker    serve offloaded pipeline work to trainers (until SIGINT/SIGTERM)\n"
    "  train     a training loop with an emulated accelerator, offloading to workers\n"
    "  plan      measure briefly and show the offloading plan, with every candidate\n"
    "  bench     run a scenario on an emulated cluster under several policies (root)\n"
    "  version   print the version\n"
    "  help      show this help, or `sluice help <command>` for one command\n"
    "\n"
    "exit codes: 0 ok, 1 runtime failure, 2 bad arguments or spec\n";

// Word-wraps `text` to `width` columns, each line starting with `indent`.
std::string Wrap(const std::string& text, const std::string& indent, size_t width) {
  std::string out;
  std::string line = indent;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, line, "\n");
      line = indent;
    }
    absl::StrAppend(&line, line.size() > indent.size() ? " " : "", word);
  }
  if (line.size() > indent.size()) absl::StrAppend(&out, line, "\n");
  return out;
}

int VersionCommand(const std::vector<std::string>& args) {
  FlagParser flags("version", "");
  if (Status s = flags.Parse(args); !s.ok()) {
    return UsageError("version", std::string(s.message()), flags.Usage());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) {
    return UsageError("version", "takes no arguments", flags.Usage());
  }
  std::printf("sluice %s\n", SLUICE_VERSION);
  return kExitOk;
}

int Dispatch(const std::string& command, const std::vector<std::string>& args) {
  if (command == "gen-data") return GenDataCommand(args);
  if (command == "index") return IndexCommand(args);
  if (command == "run") return RunCommand(args);
  if (command == "ops") return OpsCommand(args);
  if (command == "worker") return WorkerCommand(args);
  if (command == "train") return TrainCommand(args);
  if (command == "plan") return PlanCommand(args);
  if (command == "bench") return BenchCommand(args);
  if (command == "version" || command == "--version") return VersionCommand(args);
  std::fprintf(stderr, "sluice: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace

int ReportError(const std::string& command, const Status& status) {
  std::fprintf(stderr, "sluice %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
      return kExitUsage;
    default:
      return kExitRuntime;
  }
}

int UsageError(const std::string& command, const std::string& message, const std::string& usage) {
  std::fprintf(stderr, "sluice %s: %s\n\n%s", command.c_str(), message.c_str(), usage.c_str());
  return kExitUsage;
}

Status WriteOutput(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    return absl::OkStatus();
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::optional<int> ParsePipelineCommand(const std::string& command, FlagParser& flags,
                                        const std::vector<std::string>& args) {
  if (Status s = flags.Parse(args); !s.ok()) {
    return UsageError(command, std::string(s.message()), flags.Usage());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (flags.positional().size() != 1) {
    return UsageError(
        command,
        flags.positional().empty() ? "missing PIPELINE.yaml" : "expected exactly one pipeline file",
        flags.Usage());
  }
  return std::nullopt;
}

std::optional<pipeline::PipelineSpec> LoadPipelineForCommand(const std::string& command,
                                                             const FlagParser& flags,
                                                             const std::string& files) {
  StatusOr<pipeline::PipelineSpec> loaded = pipeline::LoadSpec(flags.positional()[0]);
  if (!loaded.ok()) {
    std::fprintf(stderr, "sluice %s: %s\n", command.c_str(),
                 std::string(loaded.status().message()).c_str());
    return std::nullopt;
  }
  if (flags.IsSet("files") && !loaded->source.shards.empty()) {
    loaded->source.shards = {files};  // a shards spec: the shards to read instead
  } else if (flags.IsSet("files")) {
    loaded->source.files = {files};
    loaded->source.manifest.clear();
  }
  return *std::move(loaded);
}

void AddShardFlags(FlagParser& flags, ShardFlags* shard) {
  flags.AddInt("rank", &shard->rank, "R",
               "this trainer's rank among --world-size data-parallel trainers: it loads only its "
               "share of every epoch",
               0);
  flags.AddInt("world-size", &shard->world_size, "N",
               "data-parallel trainers sharing every epoch (the spec's source.even makes their "
               "counts equal)",
               1);
}

StatusOr<pipeline::Shard> ShardFromFlags(const FlagParser& flags, const ShardFlags& shard) {
  if (flags.IsSet("rank") && !flags.IsSet("world-size")) {
    return absl::InvalidArgumentError("--rank needs --world-size");
  }
  if (shard.rank >= shard.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", shard.rank, " is out of range for --world-size ", shard.world_size,
                     ": give 0..", shard.world_size - 1));
  }
  return pipeline::Shard{shard.rank, shard.world_size};
}

int OpsCommand(const std::vector<std::string>& args) {
  FlagParser flags("ops", "");
  if (Status s = flags.Parse(args); !s.ok()) {
    return UsageError("ops", std::string(s.message()), flags.Usage());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (!flags.positional().empty()) return UsageError("ops", "takes no arguments", flags.Usage());

  const ops::Registry& registry = ops::Registry::Builtin();
  std::string out;
  for (const std::string& name : registry.Names()) {
    const ops::OpSchema& schema = registry.Find(name)->schema;
    absl::StrAppend(&out, schema.name, schema.random ? "  (random: seeded by sample id)" : "",
                    "\n");
    if (!schema.doc.empty()) absl::StrAppend(&out, Wrap(schema.doc, "    ", 96));
    for (const ops::ArgSchema& arg : schema.args) {
      std::string type(ops::ArgTypeName(arg.type));
      if (arg.list_length > 0) absl::StrAppend(&type, "[", arg.list_length, "]");
      absl::StrAppend(&out, "    ", arg.name, ": ", type);
      if (arg.default_value) {
        absl::StrAppend(&out, " = ", ops::ArgValueToString(*arg.default_value));
      } else {
        absl::StrAppend(&out, " (required)");
      }
      if (!arg.choices.empty()) {
        absl::StrAppend(&out, " {", absl::StrJoin(arg.choices, "|"), "}");
      }
      if (arg.min || arg.max) {
        absl::StrAppend(&out, " in [", arg.min ? absl::StrCat(*arg.min) : "-inf", ", ",
                        arg.max ? absl::StrCat(*arg.max) : "inf", "]");
      }
      if (!arg.doc.empty()) absl::StrAppend(&out, "  ", arg.doc);
      absl::StrAppend(&out, "\n");
    }
    absl::StrAppend(&out, "\n");
  }
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}

int Main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const std::string command = words[0];
  std::vector<std::string> args(words.begin() + 1, words.end());
  if (command == "help" || command == "--help" || command == "-h") {
    if (args.empty()) {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (args.size() == 1) {
      // `sluice help run` is `sluice run --help`.
      const std::string target = args[0];
      if (target != "help" && target != "--help" && target != "-h")
        return Dispatch(target, {"--help"});
    }
    std::fprintf(stderr, "sluice help: expected at most one command name\n\n%s", kUsage);
    return kExitUsage;
  }
  return Dispatch(command, args);
}

}  // namespace sluice::cli
