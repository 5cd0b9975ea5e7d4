// The `sluice` command line. Main() dispatches to the subcommands; each returns the process
// exit code: 0 ok, 2 bad arguments or spec, 1 runtime failure.
#ifndef SLUICE_CLI_CLI_H_
#define SLUICE_CLI_CLI_H_

namespace sluice::cli {

int Main(int argc, char** argv);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_CLI_H_
