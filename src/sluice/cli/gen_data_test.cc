#include "sluice/cli/gen_data.h"

#include <turbojpeg.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAreArray;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Decodes with TurboJPEG, treating warnings (e.g. premature end of data) as errors.
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
  if (width) *width = w;
  if (height) *height = h;
  return ok;
}

class TempDir {
 public:
  TempDir() {
    std::string base = testing::TempDir() + "gen_data_test_XXXXXX";
    path_ = mkdtemp(base.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(SynthesizeImageTest, DeterministicPerSeedAndIndex) {
  JpegImageOptions opts{/*width=*/64, /*height=*/48, /*quality=*/90};
  EXPECT_EQ(SynthesizeImage(opts, /*seed=*/1, /*index=*/3), SynthesizeImage(opts, 1, 3));
  EXPECT_NE(SynthesizeImage(opts, 1, 3), SynthesizeImage(opts, 1, 4));
  EXPECT_NE(SynthesizeImage(opts, 1, 3), SynthesizeImage(opts, 2, 3));
  EXPECT_EQ(SynthesizeImage(opts, 1, 3).size(), 64u * 48 * 3);
}

TEST(SynthesizeImageTest, LooksLikeAPhotoNotAFlatColour) {
  JpegImageOptions opts{/*width=*/200, /*height=*/150, /*quality=*/90};
  const std::vector<uint8_t> px = SynthesizeImage(opts, 7, 0);
  // Many distinct values per channel, and neighbouring pixels differ (texture and noise).
  std::set<uint8_t> red;
  int64_t neighbour_diff = 0;
  for (size_t i = 0; i + 3 < px.size(); i += 3) {
    red.insert(px[i]);
    neighbour_diff += std::abs(static_cast<int>(px[i]) - static_cast<int>(px[i + 3]));
  }
  EXPECT_GT(red.size(), 100u);
  EXPECT_GT(static_cast<double>(neighbour_diff) / (px.size() / 3), 1.0);
}

TEST(SynthesizeJpegTest, DecodesToTheRequestedSizeWithPhotoLikeSize) {
  JpegImageOptions opts{/*width=*/500, /*height=*/375, /*quality=*/90};
  auto jpeg = SynthesizeJpeg(opts, 1, 0);
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  int w = 0, h = 0;
  ASSERT_TRUE(DecodesCleanly(*jpeg, &w, &h));
  EXPECT_EQ(w, 500);
  EXPECT_EQ(h, 375);
  // A flat image of this size compresses to a few KB; a photo to tens of KB or more.
  EXPECT_GT(jpeg->size(), 40000u);
}

TEST(ChooseCorruptTest, PlantsTheRequestedShareDeterministically) {
  const auto kinds = ChooseCorrupt(/*count=*/100, /*fraction=*/0.1, /*seed=*/5);
  int truncated = 0, garbage = 0;
  for (CorruptKind k : kinds) {
    truncated += k == CorruptKind::kTruncated;
    garbage += k == CorruptKind::kGarbage;
  }
  EXPECT_EQ(truncated, 5);
  EXPECT_EQ(garbage, 5);
  EXPECT_EQ(kinds, ChooseCorrupt(100, 0.1, 5));
  EXPECT_NE(kinds, ChooseCorrupt(100, 0.1, 6));
}

TEST(ChooseCorruptTest, ZeroFractionPlantsNothingAndTinyFractionPlantsOne) {
  for (CorruptKind k : ChooseCorrupt(50, 0, 1)) EXPECT_EQ(k, CorruptKind::kNone);
  const auto kinds = ChooseCorrupt(/*count=*/50, /*fraction=*/0.001, /*seed=*/1);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), CorruptKind::kTruncated), 1);
}

TEST(GenerateJpegDatasetTest, WritesClassFoldersAndCorruptList) {
  TempDir dir;
  GenDataOptions opts;
  opts.out_dir = dir.path().string();
  opts.count = 20;
  opts.classes = 3;
  opts.seed = 9;
  opts.corrupt_fraction = 0.2;
  opts.threads = 2;
  opts.image = JpegImageOptions{/*width=*/96, /*height=*/64, /*quality=*/85};
  auto result = GenerateJpegDataset(opts);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->files, 20);
  ASSERT_EQ(result->corrupt.size(), 4u);

  std::set<std::string> corrupt(result->corrupt.begin(), result->corrupt.end());
  std::vector<std::string> listed;
  std::istringstream list(ReadAll(dir.path() / "corrupt.txt"));
  for (std::string line; std::getline(list, line);) listed.push_back(line);
  EXPECT_THAT(listed, ElementsAreArray(result->corrupt));

  for (int64_t i = 0; i < 20; ++i) {
    const std::string rel = ImageRelativePath(i, 3);
    ASSERT_TRUE(fs::exists(dir.path() / rel)) << rel;
    const bool clean = DecodesCleanly(ReadAll(dir.path() / rel), nullptr, nullptr);
    EXPECT_EQ(clean, corrupt.count(rel) == 0) << rel;
  }
  EXPECT_EQ(ImageRelativePath(4, 3), "class_001/img_000004.jpg");
}

TEST(GenerateJpegDatasetTest, SameSeedSameBytesWhateverTheThreads) {
  TempDir a, b;
  GenDataOptions opts;
  opts.count = 6;
  opts.classes = 2;
  opts.seed = 3;
  opts.corrupt_fraction = 0.3;
  opts.image = JpegImageOptions{/*width=*/80, /*height=*/60, /*quality=*/90};
  opts.out_dir = a.path().string();
  opts.threads = 1;
  ASSERT_TRUE(GenerateJpegDataset(opts).ok());
  opts.out_dir = b.path().string();
  opts.threads = 3;
  ASSERT_TRUE(GenerateJpegDataset(opts).ok());
  for (int64_t i = 0; i < 6; ++i) {
    const std::string rel = ImageRelativePath(i, 2);
    EXPECT_EQ(ReadAll(a.path() / rel), ReadAll(b.path() / rel)) << rel;
  }
}

TEST(GenerateJpegDatasetTest, RejectsBadOptions) {
  GenDataOptions opts;
  opts.out_dir = "unused";
  opts.count = 1;
  opts.image.quality = 0;
  EXPECT_EQ(GenerateJpegDataset(opts).status().code(), absl::StatusCode::kInvalidArgument);
  opts.image.quality = 90;
  opts.classes = 0;
  EXPECT_EQ(GenerateJpegDataset(opts).status().code(), absl::StatusCode::kInvalidArgument);
  opts.classes = 1;
  opts.corrupt_fraction = 2;
  EXPECT_EQ(GenerateJpegDataset(opts).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GenerateJpegDatasetTest, UnwritableFolderIsAnErrorNamingThePath) {
  TempDir dir;
  const fs::path blocker = dir.path() / "file";
  std::ofstream(blocker) << "x";
  GenDataOptions opts;
  opts.out_dir = (blocker / "sub").string();
  opts.count = 2;
  auto result = GenerateJpegDataset(opts);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), ::testing::HasSubstr(blocker.string()));
}

}  // namespace
}  // namespace sluice::cli
