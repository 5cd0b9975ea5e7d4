// `sluice index SHARD...`: writes SHARD.idx beside each tar shard (pipeline/tar.h), so that a
// pipeline resolves the shard from one small file instead of scanning it (docs/shards.md).
#include <cstdio>
#include <string>
#include <vector>

#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/pipeline/tar.h"

namespace sluice::cli {

int IndexCommand(const std::vector<std::string>& args) {
  const std::string kCommand = "index";
  FlagParser flags(kCommand, "SHARD.tar...");
  if (Status s = flags.Parse(args); !s.ok()) {
    return UsageError(kCommand, std::string(s.message()), flags.Usage());
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return kExitOk;
  }
  if (flags.positional().empty()) {
    return UsageError(kCommand, "name at least one shard", flags.Usage());
  }
  int damaged = 0;
  for (const std::string& shard : flags.positional()) {
    StatusOr<pipeline::TarScan> scan = pipeline::WriteLocalShardIndex(shard);
    if (!scan.ok()) return ReportError(kCommand, scan.status());
    std::printf("index: %s.idx: %zu members, %zu samples\n", shard.c_str(),
                scan->members.size(), pipeline::GroupSamples(scan->members).size());
    if (!scan->problem.empty()) {
      std::fprintf(stderr, "sluice index: %s (the index records it)\n", scan->problem.c_str());
      ++damaged;
    }
  }
  return damaged > 0 ? kExitRuntime : kExitOk;
}

}  // namespace sluice::cli
