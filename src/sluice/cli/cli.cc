#include "sluice/cli/cli.h"

#include <cstdio>

namespace sluice::cli {

int Main(int argc, char** argv) {
  std::fprintf(stderr, "usage: sluice <gen-data|run> ...\n");
  return 2;
}

}  // namespace sluice::cli
