// Process-level tests of the `sluice` binary: each test runs it as a subprocess and checks
// its exit code, stdout, stderr and the files it writes.
//
// Determinism across thread counts is checked with the hidden `run --dump-checksum` flag:
// it prints one content digest per delivered sample, in SampleId order, so two runs that
// delivered the same samples with the same bytes print the same text whatever the order in
// which batches arrived.
#include <fcntl.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/substitute.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "offload_test_util.h"

namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using sluice::offload_test::Describe;
using sluice::offload_test::ReadAll;
using sluice::offload_test::Result;
using sluice::offload_test::RunSluice;

void WriteAll(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class TempDir {
 public:
  TempDir() {
    std::string base = testing::TempDir() + "sluice_cli_test_XXXXXX";
    path_ = mkdtemp(base.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs the sluice binary with `args` in `cwd`, capturing stdout and stderr through files in
// `scratch` (no pipes, so a chatty child can never block).
bool DecodesCleanly(const std::string& jpeg, int* width, int* height) {
  tjhandle handle = tjInitDecompress();
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  bool ok = tjDecompressHeader3(handle, reinterpret_cast<const unsigned char*>(jpeg.data()),
                                jpeg.size(), &w, &h, &subsamp, &colorspace) == 0;
  if (ok) {
    std::vector<unsigned char> rgb(static_cast<size_t>(w) * h * 3);
    ok = tjDecompress2(handle, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size(),
                       rgb.data(), w, 0, h, TJPF_RGB, TJFLAG_STOPONWARNING) == 0;
  }
  tjDestroy(handle);
  *width = w;
  *height = h;
  return ok;
}

std::vector<fs::path> JpegsUnder(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".jpg")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A small pipeline over `glob`; `on_error` is fail or skip.
std::string PipelineYaml(const std::string& glob, const std::string& on_error) {
  return absl::Substitute(R"(source:
  files: "$0"
  label: parent_dir
  shuffle: true
  seed: 7
ops:
  - read_file
  - decode_jpeg: {}
  - random_resized_crop: {size: [32, 32]}
  - random_flip: {p: 0.5}
  - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
batch: {size: 4, drop_remainder: false}
options: {on_error: $1}
)",
                          glob, on_error);
}

class CliTest : public ::testing::Test {
 protected:
  // Generates `count` small JPEGs under dir/name and returns the folder.
  fs::path GenData(const std::string& name, int count, double corrupt_fraction = 0, int seed = 1,
                   int threads = 1) {
    const fs::path out = dir_.path() / name;
    Result r = RunSluice({"gen-data", "--kind", "jpeg", "--count", std::to_string(count), "--out",
                          out.string(), "--width", "80", "--height", "60", "--classes", "3",
                          "--seed", std::to_string(seed), "--corrupt-fraction",
                          std::to_string(corrupt_fraction), "--threads", std::to_string(threads)},
                         dir_.path());
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return out;
  }

  fs::path WriteSpec(const std::string& name, const std::string& yaml) {
    const fs::path path = dir_.path() / name;
    WriteAll(path, yaml);
    return path;
  }

  Result Run(const std::vector<std::string>& args) { return RunSluice(args, dir_.path()); }

  TempDir dir_;
};

TEST_F(CliTest, GenDataWritesDecodableJpegsInClassFolders) {
  const fs::path data = GenData("set", 9);
  const std::vector<fs::path> files = JpegsUnder(data);
  ASSERT_EQ(files.size(), 9u);
  std::set<std::string> classes;
  for (const fs::path& f : files) {
    classes.insert(f.parent_path().filename().string());
    int w = 0, h = 0;
    EXPECT_TRUE(DecodesCleanly(ReadAll(f), &w, &h)) << f;
    EXPECT_EQ(w, 80);
    EXPECT_EQ(h, 60);
  }
  EXPECT_EQ(classes, (std::set<std::string>{"class_000", "class_001", "class_002"}));
  EXPECT_FALSE(fs::exists(data / "corrupt.txt"));
}

TEST_F(CliTest, GenDataIsDeterministicPerSeedWhateverTheThreads) {
  const fs::path a = GenData("a", 6, /*corrupt_fraction=*/0.34, /*seed=*/5, /*threads=*/1);
  const fs::path b = GenData("b", 6, /*corrupt_fraction=*/0.34, /*seed=*/5, /*threads=*/2);
  const fs::path c = GenData("c", 6, /*corrupt_fraction=*/0.34, /*seed=*/6, /*threads=*/1);
  const std::vector<fs::path> fa = JpegsUnder(a), fb = JpegsUnder(b), fc = JpegsUnder(c);
  ASSERT_EQ(fa.size(), 6u);
  ASSERT_EQ(fb.size(), 6u);
  ASSERT_EQ(fc.size(), 6u);
  int differing = 0;
  for (size_t i = 0; i < fa.size(); ++i) {
    EXPECT_EQ(fs::relative(fa[i], a), fs::relative(fb[i], b));
    EXPECT_EQ(ReadAll(fa[i]), ReadAll(fb[i])) << fa[i];
    differing += ReadAll(fa[i]) != ReadAll(fc[i]);
  }
  EXPECT_EQ(differing, 6);
  EXPECT_EQ(ReadAll(a / "corrupt.txt"), ReadAll(b / "corrupt.txt"));
}

TEST_F(CliTest, GenDataPlantsAndListsCorruptFiles) {
  const fs::path data = GenData("set", 20, /*corrupt_fraction=*/0.2);
  const std::vector<std::string> listed = Lines(ReadAll(data / "corrupt.txt"));
  ASSERT_EQ(listed.size(), 4u);
  const std::set<std::string> corrupt(listed.begin(), listed.end());
  int bad = 0;
  for (const fs::path& f : JpegsUnder(data)) {
    int w = 0, h = 0;
    const bool clean = DecodesCleanly(ReadAll(f), &w, &h);
    const bool planted = corrupt.count(fs::relative(f, data).string()) > 0;
    EXPECT_EQ(clean, !planted) << f;
    bad += !clean;
  }
  EXPECT_EQ(bad, 4);
}

TEST_F(CliTest, GenDataRejectsUnsupportedKind) {
  for (const std::string kind : {"text", "video"}) {
    Result r =
        Run({"gen-data", "--kind", kind, "--count", "3", "--out", (dir_.path() / "x").string()});
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
    EXPECT_THAT(r.err, HasSubstr("kind '" + kind + "' is "));
    EXPECT_THAT(r.err, HasSubstr("(supported: jpeg, wav)"));
  }
  EXPECT_FALSE(fs::exists(dir_.path() / "x"));
}

TEST_F(CliTest, GenDataRequiresCountAndOut) {
  Result no_count = Run({"gen-data", "--out", (dir_.path() / "x").string()});
  EXPECT_EQ(no_count.exit_code, 2);
  EXPECT_THAT(no_count.err, HasSubstr("--count is required"));
  EXPECT_THAT(no_count.err, HasSubstr("usage: sluice gen-data"));
  Result no_out = Run({"gen-data", "--count", "3"});
  EXPECT_EQ(no_out.exit_code, 2);
  EXPECT_THAT(no_out.err, HasSubstr("--out is required"));
  Result bad_quality = Run({"gen-data", "--count", "3", "--out", "x", "--quality", "0"});
  EXPECT_EQ(bad_quality.exit_code, 2);
  EXPECT_THAT(bad_quality.err, HasSubstr("--quality"));
}

TEST_F(CliTest, RunPrintsThePerOpTable) {
  const fs::path data = GenData("set", 10);
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml((data / "**/*.jpg").string(), "fail"));
  Result r = Run({"run", spec.string(), "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("samples/s"));
  EXPECT_THAT(r.out, HasSubstr("CPU ms/sample"));
  for (const char* op :
       {"read_file", "decode_jpeg", "random_resized_crop", "random_flip", "normalize"}) {
    EXPECT_THAT(r.out, HasSubstr(op));
  }
  EXPECT_THAT(r.out, HasSubstr("total:  10 samples in 3 batches"));
  EXPECT_THAT(r.out, HasSubstr("2 threads"));
  EXPECT_THAT(r.out, HasSubstr("skipped: 0"));
}

TEST_F(CliTest, RunJsonHasEveryDocumentedKey) {
  const fs::path data = GenData("set", 10);
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml((data / "**/*.jpg").string(), "fail"));
  const fs::path json_path = dir_.path() / "out.json";
  Result r = Run({"run", spec.string(), "--threads", "1", "--json", json_path.string()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  for (const char* key : {"samples_per_s", "batches", "samples", "wall_s", "threads", "cpu_budget",
                          "peak_rss_bytes", "stall_fraction", "plan", "time_to_plan_s", "ops",
                          "skipped", "skipped_names", "fingerprint"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["samples"], 10);
  EXPECT_EQ(j["batches"], 3);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_GT(j["samples_per_s"].get<double>(), 0);
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["stall_fraction"], 0.0);
  EXPECT_EQ(j["time_to_plan_s"], 0.0);
  EXPECT_EQ(j["plan"]["policy"], "none");
  EXPECT_TRUE(j["plan"]["cut"].is_null());
  EXPECT_TRUE(j["plan"]["read_mode"].is_null());
  EXPECT_EQ(j["plan"]["ratio"], 0.0);
  EXPECT_EQ(j["plan"]["compression"], "none");
  EXPECT_TRUE(j["plan"]["workers"].is_array());
  EXPECT_THAT(j["fingerprint"].get<std::string>(), MatchesRegex("[0-9a-f]{16}"));
  ASSERT_EQ(j["ops"].size(), 5u);
  EXPECT_EQ(j["ops"][1]["name"], "decode_jpeg");
  double share = 0;
  for (const auto& op : j["ops"]) {
    for (const char* key :
         {"name", "samples_per_s", "cpu_ms_per_sample", "bytes_per_sample", "cpu_share"}) {
      EXPECT_TRUE(op.contains(key)) << key;
    }
    EXPECT_EQ(op["samples"], 10);
    share += op["cpu_share"].get<double>();
  }
  EXPECT_NEAR(share, 1.0, 1e-9);
  // normalize writes f32 CHW: 3 * 32 * 32 * 4 bytes per sample, plus the path and label
  // that travel along.
  const double out_bytes = j["ops"][4]["bytes_per_sample"].get<double>();
  EXPECT_GE(out_bytes, 3 * 32 * 32 * 4);
  EXPECT_LT(out_bytes, 3 * 32 * 32 * 4 + 1024);
}

TEST_F(CliTest, RunFailsOnCorruptFileNamingIt) {
  const fs::path data = GenData("set", 12, /*corrupt_fraction=*/0.25);
  const std::vector<std::string> planted = Lines(ReadAll(data / "corrupt.txt"));
  ASSERT_EQ(planted.size(), 3u);
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml((data / "**/*.jpg").string(), "fail"));
  Result r = Run({"run", spec.string(), "--threads", "2"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  bool named = false;
  for (const std::string& rel : planted) named |= r.err.find(rel) != std::string::npos;
  EXPECT_TRUE(named) << r.err;
  EXPECT_THAT(r.err, HasSubstr("decode_jpeg"));
  EXPECT_THAT(r.err, HasSubstr("corrupt JPEG"));
}

TEST_F(CliTest, RunSkipsCorruptFilesAndCountsThem) {
  const fs::path data = GenData("set", 12, /*corrupt_fraction=*/0.25);
  const std::vector<std::string> planted = Lines(ReadAll(data / "corrupt.txt"));
  ASSERT_EQ(planted.size(), 3u);
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml((data / "**/*.jpg").string(), "skip"));
  const fs::path json_path = dir_.path() / "out.json";
  Result r = Run({"run", spec.string(), "--threads", "2", "--json", json_path.string()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(j["skipped"], 3);
  EXPECT_EQ(j["samples"], 9);
  ASSERT_EQ(j["skipped_names"].size(), 3u);
  for (const std::string& rel : planted) {
    bool found = false;
    for (const auto& name : j["skipped_names"]) {
      found |= name.get<std::string>().find(rel) != std::string::npos;
    }
    EXPECT_TRUE(found) << rel;
  }
  EXPECT_THAT(r.out, HasSubstr("skipped: 3"));
}

TEST_F(CliTest, SameSeedSameBytesForOneAndTwoThreads) {
  const fs::path data = GenData("set", 14);
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml((data / "**/*.jpg").string(), "fail"));
  Result one = Run({"run", spec.string(), "--threads", "1", "--epochs", "2", "--dump-checksum"});
  Result two = Run({"run", spec.string(), "--threads", "2", "--epochs", "2", "--dump-checksum"});
  ASSERT_EQ(one.exit_code, 0) << Describe(one);
  ASSERT_EQ(two.exit_code, 0) << Describe(two);
  // One line per sample of both epochs, plus the combined digest.
  EXPECT_EQ(Lines(one.out).size(), 2u * 14 + 1);
  EXPECT_EQ(one.out, two.out);
  // The table moved to stderr.
  EXPECT_THAT(one.err, HasSubstr("decode_jpeg"));

  // A different seed changes the crops, hence the digests.
  std::string yaml = PipelineYaml((data / "**/*.jpg").string(), "fail");
  yaml.replace(yaml.find("seed: 7"), 7, "seed: 8");
  const fs::path other = WriteSpec("q.yaml", yaml);
  Result three = Run({"run", other.string(), "--threads", "2", "--epochs", "2", "--dump-checksum"});
  ASSERT_EQ(three.exit_code, 0) << Describe(three);
  EXPECT_NE(one.out, three.out);
}

// `--rank R --world-size N` (docs/distributed.md): the ranks of `sluice run` deliver disjoint
// shares of the unsharded run's samples, with the same content, all of them but the
// remainder `even: drop` leaves out; `sluice train` reports its share; bad combinations of
// the flags are usage errors.
TEST_F(CliTest, RanksShareEveryEpochAndBadRankFlagsAreUsageErrors) {
  const fs::path data = GenData("set", 14);
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml((data / "**/*.jpg").string(), "fail"));
  Result whole = Run({"run", spec.string(), "--epochs", "2", "--dump-checksum"});
  ASSERT_EQ(whole.exit_code, 0) << Describe(whole);
  std::vector<std::string> lines = Lines(whole.out);
  const std::set<std::string> all(lines.begin(), lines.end() - 1);  // less the "all" line
  ASSERT_EQ(all.size(), 28u);
  std::set<std::string> shared;
  for (int rank = 0; rank < 3; ++rank) {
    Result r = Run({"run", spec.string(), "--epochs", "2", "--dump-checksum", "--rank",
                    std::to_string(rank), "--world-size", "3"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("rank ", rank,
                                              " of 3: 4 samples per epoch (even: "
                                              "drop leaves out 2 of the 14 samples")));
    lines = Lines(r.out);
    ASSERT_EQ(lines.size(), 2u * 4 + 1) << Describe(r);
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      EXPECT_EQ(all.count(lines[i]), 1u) << lines[i];
      EXPECT_TRUE(shared.insert(lines[i]).second) << lines[i] << " on two ranks";
    }
  }
  EXPECT_EQ(shared.size(), 24u);

  const fs::path json_path = dir_.path() / "train.json";
  Result train = Run({"train", spec.string(), "--policy", "none", "--accelerator-ms", "0", "--rank",
                      "1", "--world-size", "4", "--json", json_path.string()});
  ASSERT_EQ(train.exit_code, 0) << Describe(train);
  EXPECT_THAT(train.err, HasSubstr("sluice train: rank 1 of 4: 3 samples per epoch"));
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(j["samples"], 3);
  EXPECT_EQ(j["shard"]["samples_per_epoch"], 3);
  EXPECT_EQ(j["shard"]["dropped_per_epoch"], 2);

  Result no_size = Run({"run", spec.string(), "--rank", "1"});
  EXPECT_EQ(no_size.exit_code, 2);
  EXPECT_THAT(no_size.err, HasSubstr("--rank needs --world-size"));
  Result out_of_range =
      Run({"train", spec.string(), "--rank", "3", "--world-size", "3", "--check-flags"});
  EXPECT_EQ(out_of_range.exit_code, 2);
  EXPECT_THAT(out_of_range.err,
              HasSubstr("--rank 3 is out of range for --world-size 3: give 0..2"));
  Result zero = Run({"train", spec.string(), "--world-size", "0", "--check-flags"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--world-size: expected a value >= 1, got 0"));
  Result too_many = Run({"run", spec.string(), "--world-size", "15", "--rank", "0"});
  EXPECT_EQ(too_many.exit_code, 2);
  EXPECT_THAT(too_many.err, HasSubstr("world_size 15 is larger than the 14 samples of an epoch"));
}

TEST_F(CliTest, StepsAndFilesOverrideTheSpec) {
  const fs::path data = GenData("set", 20);
  // The spec points nowhere; --files replaces it.
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml("/nonexistent/**/*.jpg", "fail"));
  const fs::path json_path = dir_.path() / "out.json";
  Result r = Run({"run", spec.string(), "--files", (data / "**/*.jpg").string(), "--steps", "2",
                  "--json", json_path.string()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(j["batches"], 2);
  EXPECT_EQ(j["samples"], 8);
}

TEST_F(CliTest, BadSpecIsExitTwoWithLineAndColumn) {
  const std::string yaml =
      "source:\n"
      "  files: \"x/*.jpg\"\n"
      "ops:\n"
      "  - read_file\n"
      "  - random_resized_crop: {size: [1, 2, 3]}\n";
  const fs::path spec = WriteSpec("bad.yaml", yaml);
  Result r = Run({"run", spec.string()});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.err, MatchesRegex(".*bad\\.yaml:5:[0-9]+: .*size.*\n"));
  EXPECT_THAT(r.err, HasSubstr("ops[1].random_resized_crop.size"));

  const fs::path unknown_op = WriteSpec("op.yaml",
                                        "source: {files: \"x/*.jpg\"}\n"
                                        "ops:\n"
                                        "  - read_file\n"
                                        "  - decode_jpg\n");
  Result r2 = Run({"run", unknown_op.string()});
  EXPECT_EQ(r2.exit_code, 2) << Describe(r2);
  EXPECT_THAT(r2.err, AllOf(HasSubstr("op.yaml:4:"), HasSubstr("decode_jpg")));
}

TEST_F(CliTest, UnknownFlagMissingFileAndNoMatchesAreExitTwo) {
  const fs::path data = GenData("set", 2);
  const fs::path spec = WriteSpec("p.yaml", PipelineYaml((data / "**/*.jpg").string(), "fail"));

  Result flag = Run({"run", spec.string(), "--thredas", "2"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_THAT(flag.err, HasSubstr("unknown flag '--thredas'"));
  EXPECT_THAT(flag.err, HasSubstr("usage: sluice run"));
  EXPECT_TRUE(flag.out.empty());

  Result missing = Run({"run", (dir_.path() / "nope.yaml").string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("nope.yaml"));

  Result no_spec = Run({"run"});
  EXPECT_EQ(no_spec.exit_code, 2);
  EXPECT_THAT(no_spec.err, HasSubstr("missing PIPELINE.yaml"));

  Result no_files = Run({"run", spec.string(), "--files", (dir_.path() / "none/*.jpg").string()});
  EXPECT_EQ(no_files.exit_code, 2) << Describe(no_files);
  EXPECT_THAT(no_files.err, HasSubstr("none/*.jpg"));

  Result bad_value = Run({"run", spec.string(), "--threads", "two"});
  EXPECT_EQ(bad_value.exit_code, 2);
  EXPECT_THAT(bad_value.err, HasSubstr("--threads: expected an integer"));
}

TEST_F(CliTest, HelpVersionAndUnknownCommands) {
  Result none = Run({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("usage: sluice <command>"));

  Result help = Run({"help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, AllOf(HasSubstr("gen-data"), HasSubstr("run"), HasSubstr("ops")));

  Result run_help = Run({"run", "--help"});
  EXPECT_EQ(run_help.exit_code, 0);
  EXPECT_THAT(run_help.out,
              AllOf(HasSubstr("--threads"), HasSubstr("--steps"), HasSubstr("--epochs"),
                    HasSubstr("--files"), HasSubstr("--json"), Not(HasSubstr("dump-checksum"))));
  Result help_run = Run({"help", "gen-data"});
  EXPECT_EQ(help_run.exit_code, 0);
  EXPECT_THAT(help_run.out, HasSubstr("--corrupt-fraction"));

  Result version = Run({"version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.out, MatchesRegex("sluice [0-9]+\\.[0-9]+\\.[0-9]+\n"));

  Result unknown = Run({"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command 'frobnicate'"));
  EXPECT_THAT(unknown.err, HasSubstr("usage: sluice <command>"));
}

TEST_F(CliTest, OpsListsEveryOpWithItsArguments) {
  Result r = Run({"ops"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("decode_jpeg"));
  EXPECT_THAT(r.out, HasSubstr("random_resized_crop"));
  EXPECT_THAT(r.out, HasSubstr("size: int list[2] (required)"));
  EXPECT_THAT(r.out, HasSubstr("scale: float list[2] = [0.08,1.0]"));
  EXPECT_THAT(r.out, HasSubstr("layout: string = \"CHW\" {CHW|HWC}"));
}

TEST_F(CliTest, StandardExamplePipelineRunsOnGeneratedData) {
  const fs::path data = GenData("set", 6);
  const fs::path example =
      fs::path(SLUICE_SOURCE_DIR) / "examples" / "pipelines" / "imagenet_train.yaml";
  const fs::path json_path = dir_.path() / "out.json";
  Result r = Run({"run", example.string(), "--files", (data / "**/*.jpg").string(), "--json",
                  json_path.string()});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(j["samples"], 6);
  EXPECT_EQ(j["batches"], 1);  // batch 64, drop_remainder: false
  ASSERT_EQ(j["ops"].size(), 5u);
  const double out_bytes = j["ops"][4]["bytes_per_sample"].get<double>();
  EXPECT_GE(out_bytes, 3 * 224 * 224 * 4);
  EXPECT_LT(out_bytes, 3 * 224 * 224 * 4 + 1024);
}

}  // namespace
