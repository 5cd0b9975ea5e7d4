// Replays the inputs the fuzz targets (fuzz/, docs/fuzzing.md) once crashed on, saved in
// fuzz/regressions/<target>/, through the same parsers in the normal build: each must give
// an error with a message (or, for the parsers with a round-trip contract, a value that
// round-trips), and none may crash. The same seeds of fuzz/corpus/ are replayed too, as a
// check that the harnesses' inputs still parse the way they did.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/ops/audio/audio_ops.h"
#include "sluice/ops/image/codecs.h"
#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/tar.h"
#include "sluice/rpc/wire.h"
#include "sluice/runtime/train.h"
#include "sluice/testbed/scenario.h"

namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What a target's parser made of one input: ok, or the error's message.
struct Outcome {
  bool ok = false;
  std::string message;
};

template <typename T>
Outcome Of(const sluice::StatusOr<T>& result) {
  if (result.ok()) return {true, ""};
  return {false, std::string(result.status().message())};
}

// The same calls as fuzz/<target>_fuzz.cc, with gtest checks for their invariants.
Outcome Replay(const std::string& target, const std::string& bytes) {
  if (target == "spec") {
    auto spec = sluice::pipeline::ParseSpec(bytes, "fuzz.yaml");
    if (spec.ok()) {
      auto again = sluice::pipeline::ParseSpec(sluice::pipeline::ToCanonicalJson(*spec), "c.json");
      EXPECT_TRUE(again.ok()) << again.status();
      if (again.ok()) {
        EXPECT_TRUE(*again == *spec);
      }
    }
    return Of(spec);
  }
  if (target == "jpeg") {
    auto image = sluice::ops::DecodeJpeg(bytes, 3);
    auto planner = [](int64_t h, int64_t w) {
      return sluice::ops::DecodeRequest{0.25, w / 4, h / 4, w / 2, h / 2};
    };
    (void)sluice::ops::DecodeJpeg(bytes, 1, planner);
    return Of(image);
  }
  if (target == "png") {
    (void)sluice::ops::DecodePng(bytes, 1);
    return Of(sluice::ops::DecodePng(bytes, 3));
  }
  if (target == "wav") {
    (void)sluice::ops::ParseWav(bytes, /*mono=*/true);
    (void)sluice::ops::ParseWav(bytes, /*mono=*/false, [](int64_t frames) { return frames / 2; });
    return Of(sluice::ops::ParseWav(bytes, /*mono=*/false));
  }
  if (target == "wire") {
    if (bytes.size() < 4) return {false, "shorter than the length prefix"};
    uint32_t header_size = 0;
    for (int i = 0; i < 4; ++i) header_size |= uint32_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
    std::string rest = bytes.substr(4);
    if (header_size > rest.size()) header_size = static_cast<uint32_t>(rest.size());
    sluice::rpc::DecodeLimits limits;
    limits.max_raw_payload_bytes = size_t{64} << 20;
    return Of(sluice::rpc::DecodeElements(rest.substr(0, header_size), rest.substr(header_size),
                                          limits));
  }
  if (target == "policy") {
    if (bytes.empty()) return {false, "empty"};
    int num_ops = static_cast<uint8_t>(bytes[0]) % 16 - 1;
    auto policy = sluice::runtime::ParsePolicy(std::string_view(bytes).substr(1), num_ops);
    if (policy.ok()) {
      auto again = sluice::runtime::ParsePolicy(policy->ToString(), num_ops);
      EXPECT_TRUE(again.ok()) << again.status();
      if (again.ok()) {
        EXPECT_EQ(again->ToString(), policy->ToString());
      }
    }
    return Of(policy);
  }
  if (target == "scenario") {
    auto scenario = sluice::testbed::ParseScenario(bytes, "fuzz.yaml");
    if (scenario.ok()) (void)scenario->ToTestbedSpec();
    return Of(scenario);
  }
  if (target == "tar") {
    const sluice::pipeline::ReadAt read = [&bytes](int64_t offset, int64_t n)
        -> sluice::StatusOr<std::string> { return bytes.substr(offset, n); };
    auto scan = sluice::pipeline::ScanTar("fuzz.tar", static_cast<int64_t>(bytes.size()), read);
    if (!scan.ok()) return Of(scan);
    for (const auto& m : scan->members) {
      EXPECT_LE(m.offset + m.size, static_cast<int64_t>(bytes.size())) << m.name;
    }
    if (!scan->problem.empty()) return {false, scan->problem};
    EXPECT_FALSE(sluice::pipeline::GroupSamples(scan->members).empty());
    return {true, ""};
  }
  ADD_FAILURE() << "no replay for fuzz target " << target;
  return {};
}

std::vector<fs::path> FilesIn(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

const char* const kTargets[] = {"spec", "jpeg", "png", "wav", "wire", "policy", "scenario", "tar"};

// Every saved crash input now gives a clear error (an input whose fix made it valid keeps
// its round-trip checks in Replay).
TEST(FuzzRegressionTest, SavedCrashInputsGiveErrors) {
  for (const char* target : kTargets) {
    for (const auto& file : FilesIn(fs::path(SLUICE_SOURCE_DIR) / "fuzz/regressions" / target)) {
      SCOPED_TRACE(file.string());
      Outcome outcome = Replay(target, ReadFile(file));
      if (!outcome.ok) {
        EXPECT_FALSE(outcome.message.empty());
      }
    }
  }
}

// The committed seeds are valid inputs (the image, audio, wire, scenario and tar seeds
// decode),
// so the fuzzers start from inputs that reach deep into each parser.
TEST(FuzzRegressionTest, SeedsAreAccepted) {
  for (const char* target : {"jpeg", "png", "wav", "wire", "scenario", "tar"}) {
    auto files = FilesIn(fs::path(SLUICE_SOURCE_DIR) / "fuzz/corpus" / target);
    EXPECT_FALSE(files.empty()) << target;
    for (const auto& file : files) {
      Outcome outcome = Replay(target, ReadFile(file));
      EXPECT_TRUE(outcome.ok) << file << ": " << outcome.message;
    }
  }
}

}  // namespace
