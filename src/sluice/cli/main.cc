#include "sluice/cli/cli.h"
#include "sluice/core/allocator.h"

int main(int argc, char** argv) {
  sluice::ConfigureAllocator();
  return sluice::cli::Main(argc, argv);
}
