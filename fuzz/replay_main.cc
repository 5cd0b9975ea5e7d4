// A main for the fuzz harnesses in builds without libFuzzer (the normal gcc build): each
// argument is a file or a folder of files, and every file is passed once to
// LLVMFuzzerTestOneInput. `make test` runs every harness this way on its seeds and saved
// regressions (fuzz/CMakeLists.txt), so a harness that no longer compiles against the code it
// fuzzes, or traps on a committed input, fails the normal tests and not only `make fuzz`.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "sluice/core/files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// Replays one file; false (with the reason on stderr) when it cannot be read.
bool Replay(const fs::path& path) {
  auto bytes = sluice::ReadFile(path.string());
  if (!bytes) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code error;
    if (!fs::is_directory(arg, error)) {
      if (!Replay(arg)) return 1;
      ++replayed;
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(arg, error)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    if (error) {
      std::fprintf(stderr, "replay: cannot list %s: %s\n", argv[i], error.message().c_str());
      return 1;
    }
    for (const auto& file : files) {
      if (!Replay(file)) return 1;
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "replay: no inputs (give files or folders of files)\n");
    return 1;
  }
  std::printf("replay: %d inputs, none crashed\n", replayed);
  return 0;
}
