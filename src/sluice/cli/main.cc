#include "sluice/cli/cli.h"

int main(int argc, char** argv) { return sluice::cli::Main(argc, argv); }
