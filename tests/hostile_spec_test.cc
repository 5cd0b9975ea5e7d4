// A worker survives hostile specs: specs with a huge batch size, thread count or op
// argument, and a decompression-bomb image, sent through `sluice train --policy fixed:...` to
// a real `sluice worker`. Each run fails (or skips the sample) with a message that names the
// field or the image, and the same worker then still serves a normal training run.
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "offload_test_util.h"
#include "sluice/ops/op_test_util.h"

namespace sluice::offload_test {
namespace {

using ::testing::HasSubstr;

constexpr int kImages = 24;

class HostileSpecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    GenerateImages(dir_->path(), kImages);
    // Two small files whose headers claim 60000x60000 pixels (3.6 G pixels, 10 GiB as RGB).
    fs::create_directories(dir_->path() / "bombs");
    const Tensor small = ops::test::TexturedImage(16, 16);
    std::ofstream(dir_->path() / "bombs" / "bomb.jpg", std::ios::binary)
        << ops::test::WithJpegSize(ops::test::EncodeJpeg(small), 60000, 60000);
    std::ofstream(dir_->path() / "bombs" / "bomb.png", std::ios::binary)
        << ops::test::WithPngSize(ops::test::EncodePng(small), 60000, 60000);
    worker_ = WorkerProcess::Start(dir_->path(), /*port=*/0, /*threads=*/2).release();
  }
  static void TearDownTestSuite() {
    delete worker_;
    delete dir_;
  }

  // The standard pipeline with `from` replaced by `to` in its YAML (each pair), written to
  // a file.
  static std::string WriteSpec(const std::string& name,
                               const std::vector<std::pair<std::string, std::string>>& edits) {
    std::string yaml = StandardPipelineYaml(dir_->path(), /*deterministic=*/false);
    for (const auto& [from, to] : edits) {
      const size_t at = yaml.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) yaml.replace(at, from.size(), to);
    }
    const fs::path path = dir_->path() / name;
    std::ofstream(path) << yaml;
    return path.string();
  }

  // `sluice train` on the worker: every sample decoded there (cut after decode_jpeg).
  static Result Train(const std::string& spec_path, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"train",
                                     spec_path,
                                     "--workers",
                                     worker_->address(),
                                     "--policy",
                                     "fixed:cut=2,ratio=1",
                                     "--threads",
                                     "1",
                                     "--connect-timeout",
                                     "5"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunSluice(args, dir_->path());
  }

  // A normal run on the same worker: it still serves, and does the work.
  static void ExpectTheWorkerStillServes() {
    ASSERT_TRUE(worker_->Alive()) << "the worker died";
    const std::string json = (dir_->path() / "normal.json").string();
    Result r = Train(WriteSpec("normal.yaml", {}), {"--json", json});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
    EXPECT_EQ(j["samples"].get<int64_t>(), kImages);
    EXPECT_GT(j["places"]["workers"][0]["samples"].get<int64_t>(), 0) << j.dump(2);
  }

  static TempDir* dir_;
  static WorkerProcess* worker_;
};

TempDir* HostileSpecTest::dir_ = nullptr;
WorkerProcess* HostileSpecTest::worker_ = nullptr;

TEST_F(HostileSpecTest, HugeBatchSizeThreadsAndArgumentsAreSpecErrors) {
  ASSERT_NE(worker_, nullptr);
  const struct {
    const char* name;
    const char* from;
    const char* to;
    const char* message;
  } cases[] = {
      {"batch.yaml", "batch: {size: 8,", "batch: {size: 1000000000000,",
       "batch.size: must be in [1, 65536], got 1000000000000"},
      {"threads.yaml", "threads: 2}", "threads: 2000000000}",
       "options.threads: must be \"auto\" or an int in [1, 1024], got 2000000000"},
      {"prefetch.yaml", "prefetch: 2", "prefetch: 100000000",
       "prefetch: must be in [0, 1024], got 100000000"},
      {"size.yaml", "size: [32, 32]", "size: [60000, 60000]",
       "ops[2].random_resized_crop.size: every entry must be in [1, 16384], got [60000,60000]"},
      {"std.yaml", "std: [0.229, 0.224, 0.225]", "std: [.nan, 0.224, 0.225]",
       "ops[4].normalize.std: every entry must be a finite number, got [nan,0.224,0.225]"},
      {"one_hot.yaml", "  - random_flip: {p: 0.5}\n",
       "  - random_flip: {p: 0.5}\n  - one_hot: {num_classes: 10000000000000}\n",
       "ops[4].one_hot.num_classes: must be in [1, 16777216], got 10000000000000"},
  };
  for (const auto& c : cases) {
    Result r = Train(WriteSpec(c.name, {{c.from, c.to}}));
    EXPECT_EQ(r.exit_code, 2) << c.name << "\n" << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.name << "\n" << Describe(r);
  }
  ExpectTheWorkerStillServes();
}

TEST_F(HostileSpecTest, DecompressionBombFailsItsSampleOnTheWorker) {
  ASSERT_NE(worker_, nullptr);
  // decode_image: the same limit for JPEG and PNG.
  const std::string spec = WriteSpec("bomb.yaml", {{"decode_jpeg", "decode_image"}});
  for (const char* file : {"bomb.jpg", "bomb.png"}) {
    // An absolute path inside the worker's data root.
    Result r = Train(spec, {"--files", (dir_->path() / "bombs" / file).string()});
    EXPECT_NE(r.exit_code, 0) << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat(
                           file,
                           ": image is 60000x60000 (3600000000 pixels), over the limit of "
                           "134217728 pixels (raise it with options.max_image_pixels, on a "
                           "worker with --max-image-pixels)")))
        << Describe(r);
  }
  // With on_error: skip the bombs are dropped and counted; the other images pass.
  const std::string skip = WriteSpec("skip.yaml", {{"decode_jpeg", "decode_image"},
                                                   {"threads: 2}", "threads: 2, on_error: skip}"}});
  const std::string json = (dir_->path() / "skip.json").string();
  Result r =
      Train(skip, {"--files", (dir_->path() / "**" / "*.[jp][pn]g").string(), "--json", json});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const nlohmann::json j = nlohmann::json::parse(ReadAll(json));
  EXPECT_EQ(j["skipped"].get<int64_t>(), 2) << j.dump(2);
  EXPECT_EQ(j["samples"].get<int64_t>(), kImages) << j.dump(2);
  ExpectTheWorkerStillServes();
}

}  // namespace
}  // namespace sluice::offload_test
