// End to end over the real built-in ops: JPEG files on disk -> read, decode, random crop,
// flip, normalize -> batches.
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/pipeline/test_util.h"

namespace sluice::pipeline {
namespace {

using ::testing::HasSubstr;
using testing_util::TempDir;

class BuiltinPipelineTest : public ::testing::Test {
 protected:
  // A JPEG of noise (libjpeg-turbo, the library the decoder is tested against elsewhere).
  static std::string EncodeJpeg(int height, int width, uint32_t seed) {
    std::vector<unsigned char> pixels(static_cast<size_t>(height) * width * 3);
    uint32_t x = seed * 2654435761u + 1;
    for (unsigned char& p : pixels) {
      x = x * 1664525u + 1013904223u;
      p = static_cast<unsigned char>(x >> 24);
    }
    tjhandle handle = tjInitCompress();
    unsigned char* jpeg = nullptr;
    unsigned long size = 0;
    int rc = tjCompress2(handle, pixels.data(), width, 0, height, TJPF_RGB, &jpeg, &size,
                         TJSAMP_420, 90, 0);
    std::string out = rc == 0 ? std::string(reinterpret_cast<char*>(jpeg), size) : "";
    tjFree(jpeg);
    tjDestroy(handle);
    return out;
  }

  void SetUp() override {
    for (int i = 0; i < 12; ++i) {
      std::string jpeg = EncodeJpeg(48 + 8 * (i % 3), 64 + 8 * (i % 4), i);
      ASSERT_FALSE(jpeg.empty());
      dir_.Write(absl::StrCat(i % 2 ? "b" : "a", "/img", i, ".jpg"), jpeg);
    }
  }

  PipelineSpec Spec() const {
    PipelineSpec spec;
    spec.source.files = {dir_.path() + "/**/*.jpg"};
    spec.source.label = LabelMode::kParentDir;
    spec.source.seed = 1234;
    spec.ops = {
        {"read_file", {}},
        {"decode_jpeg", {}},
        {"random_resized_crop", {{"size", std::vector<int64_t>{32, 32}}}},
        {"random_flip", {}},
        {"normalize",
         {{"mean", std::vector<double>{0.5, 0.5, 0.5}}, {"std", std::vector<double>{0.25}}}},
    };
    spec.batch.size = 4;
    spec.prefetch = 2;
    return spec;
  }

  static std::unique_ptr<LocalExecutor> Make(const PipelineSpec& spec, int threads) {
    ExecutorOptions options;
    options.threads = threads;
    StatusOr<std::unique_ptr<LocalExecutor>> ex = LocalExecutor::Create(spec, options);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return ex.ok() ? *std::move(ex) : nullptr;
  }

  // Every sample's image bytes, keyed by its identity.
  static std::map<SampleId, std::string> Run(const PipelineSpec& spec, int threads) {
    std::map<SampleId, std::string> out;
    auto ex = Make(spec, threads);
    if (ex == nullptr) return out;
    int image = ex->output_schema().IndexOf("image");
    EXPECT_GE(image, 0);
    for (;;) {
      Element b;
      bool eos = false;
      Status s = ex->GetNext(&b, &eos);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok() || eos) break;
      const Tensor& t = b.tensors[image];
      EXPECT_EQ(t.dtype(), DType::kF32);
      EXPECT_EQ(t.shape(), (Shape{static_cast<int64_t>(b.members.size()), 3, 32, 32}));
      for (size_t i = 0; i < b.members.size(); ++i) {
        out[b.members[i]] = std::string(t.Slice(i, i + 1).bytes());
      }
    }
    return out;
  }

  TempDir dir_;
};

TEST_F(BuiltinPipelineTest, SchemaAndBatches) {
  auto ex = Make(Spec(), 2);
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(ex->output_schema().ToString(),
            "{path: bytes[?,?], label: i64[?], image: f32[?,3,32,32]}");
  int batches = 0;
  for (;;) {
    Element b;
    bool eos = false;
    Status s = ex->GetNext(&b, &eos);
    ASSERT_TRUE(s.ok()) << s;
    if (eos) break;
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  std::vector<OpStatsSnapshot> ops = ex->stats().SnapshotOps();
  ASSERT_EQ(ops.size(), 5u);
  EXPECT_EQ(ops[1].name, "decode_jpeg");
  EXPECT_EQ(ops[1].samples, 12);
  EXPECT_GT(ops[1].cpu_ns, 0);
  EXPECT_GE(ops[4].bytes_per_sample(), 3 * 32 * 32 * 4);
}

TEST_F(BuiltinPipelineTest, RandomOpsGiveTheSameSamplesForOneAndFourThreads) {
  PipelineSpec spec = Spec();
  spec.epochs = 2;
  std::map<SampleId, std::string> one = Run(spec, 1);
  std::map<SampleId, std::string> four = Run(spec, 4);
  ASSERT_EQ(one.size(), 24u);
  EXPECT_TRUE(one == four);
  // The crops really are random per identity: epoch 0 and 1 of a sample differ.
  EXPECT_NE(one[(SampleId{0, 0})], one[(SampleId{1, 0})]);
}

TEST_F(BuiltinPipelineTest, CorruptFileFailsOrIsSkipped) {
  dir_.Write("a/zz_corrupt.jpg", "\xff\xd8\xff this is not really a jpeg");
  PipelineSpec spec = Spec();
  auto ex = Make(spec, 2);
  ASSERT_NE(ex, nullptr);
  Status s;
  for (int i = 0; i < 10 && s.ok(); ++i) {
    Element b;
    bool eos = false;
    s = ex->GetNext(&b, &eos);
    ASSERT_FALSE(eos) << "the corrupt file went through";
  }
  EXPECT_THAT(std::string(s.message()),
              ::testing::StartsWith(
                  absl::StrCat("ops[1].decode_jpeg: ", dir_.path(), "/a/zz_corrupt.jpg: ")));

  spec.options.on_error = OnError::kSkip;
  ex = Make(spec, 2);
  int64_t samples = 0;
  for (;;) {
    Element b;
    bool eos = false;
    ASSERT_TRUE(ex->GetNext(&b, &eos).ok());
    if (eos) break;
    samples += static_cast<int64_t>(b.members.size());
  }
  EXPECT_EQ(samples, 12);
  EXPECT_EQ(ex->stats().skipped(), 1);
  ASSERT_EQ(ex->stats().skipped_names().size(), 1u);
  EXPECT_THAT(ex->stats().skipped_names()[0],
              ::testing::StartsWith(dir_.path() + "/a/zz_corrupt.jpg: ops[1].decode_jpeg: "));
}

}  // namespace
}  // namespace sluice::pipeline
