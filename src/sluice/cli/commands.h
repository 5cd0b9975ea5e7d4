// The subcommands of the `sluice` binary. Each takes the words after the command name and
// returns the process exit code (kExitOk, kExitRuntime, kExitUsage). They print results on
// stdout and messages, progress and usage on stderr. Called from the main thread only.
#ifndef SLUICE_CLI_COMMANDS_H_
#define SLUICE_CLI_COMMANDS_H_

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

#include "sluice/core/status.h"
#include "sluice/pipeline/shard.h"
#include "sluice/pipeline/spec.h"

namespace sluice::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;  // the work itself failed (I/O, corrupt data, ...)
inline constexpr int kExitUsage = 2;    // bad arguments, bad spec, nothing to read

int GenDataCommand(const std::vector<std::string>& args);
int IndexCommand(const std::vector<std::string>& args);   // index_command.cc
int RunCommand(const std::vector<std::string>& args);
int OpsCommand(const std::vector<std::string>& args);
int WorkerCommand(const std::vector<std::string>& args);  // worker_command.cc
int TrainCommand(const std::vector<std::string>& args);   // train_command.cc
int PlanCommand(const std::vector<std::string>& args);    // plan_command.cc
int BenchCommand(const std::vector<std::string>& args);   // bench_command.cc

// Prints "sluice <command>: <message>" on stderr and returns the exit code `status` maps
// to: kExitUsage for caller mistakes (InvalidArgument, NotFound, FailedPrecondition,
// OutOfRange, AlreadyExists), kExitRuntime for everything else.
int ReportError(const std::string& command, const Status& status);

// Prints a usage error, then the command's usage text, on stderr; returns kExitUsage.
int UsageError(const std::string& command, const std::string& message, const std::string& usage);

// True if a `--listen` address (HOST:PORT) only accepts connections from this machine:
// 127.0.0.0/8, localhost, ::1.
bool IsLoopbackListenAddress(const std::string& address);

// Writes `text` to the file at `path`, or to stdout when `path` is "-" (for --json OUT).
Status WriteOutput(const std::string& path, const std::string& text);

class FlagParser;
// For commands that take exactly one PIPELINE.yaml: parses `args` into `flags`. Returns the
// exit code when the command must stop here (bad flags or no single pipeline file:
// kExitUsage; --help: kExitOk, after printing the usage), nullopt when it should go on.
std::optional<int> ParsePipelineCommand(const std::string& command, FlagParser& flags,
                                        const std::vector<std::string>& args);
// Loads the pipeline file named by the first positional argument and applies a `--files`
// override when that flag was given. On error prints it and returns nullopt (kExitUsage).
std::optional<pipeline::PipelineSpec> LoadPipelineForCommand(const std::string& command,
                                                             const FlagParser& flags,
                                                             const std::string& files);

// `--rank R --world-size N` of `sluice run` and `sluice train`: this process is rank R of N
// data-parallel trainers and loads only its share of every epoch (docs/distributed.md).
struct ShardFlags {
  int64_t rank = 0;
  int64_t world_size = 1;
};
void AddShardFlags(FlagParser& flags, ShardFlags* shard);
// The shard the parsed flags give; InvalidArgument for --rank without --world-size or a rank
// out of range ("--rank 4 is out of range for --world-size 4: give 0..3").
StatusOr<pipeline::Shard> ShardFromFlags(const FlagParser& flags, const ShardFlags& shard);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_COMMANDS_H_
