// Small process helpers for the testbed: run a program (no shell) and collect its exit code
// and output. Thread-safe (each call forks its own child).
#ifndef SLUICE_TESTBED_EXEC_H_
#define SLUICE_TESTBED_EXEC_H_

#include <string>
#include <vector>

#include "sluice/core/status.h"

namespace sluice::testbed {

struct ProgramResult {
  int exit_code = -1;  // the exit status, or 128 + signal number when killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs `argv` (argv[0] looked up on PATH) to completion. Fails only if it cannot be started.
// REQUIRES: !argv.empty().
StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv);

// Runs `argv`; an exit code other than 0 is an Internal error carrying the command line and
// its output.
Status RunChecked(const std::vector<std::string>& argv);

// The words of `argv` joined by spaces (for messages).
std::string JoinArgv(const std::vector<std::string>& argv);

}  // namespace sluice::testbed

#endif  // SLUICE_TESTBED_EXEC_H_
