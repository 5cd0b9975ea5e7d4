#include "sluice/cli/gen_wav.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "sluice/ops/audio/audio_ops.h"

namespace sluice::cli {
namespace {

TEST(GenWavTest, UtterancesAreValidSpeechLikeWavs) {
  for (int rate : {16000, 22050}) {
    WavOptions options;
    options.sample_rate = rate;
    for (uint64_t index : {0u, 1u, 2u}) {
      const std::string bytes = SynthesizeWav(options, 7, index);
      EXPECT_EQ(bytes, SynthesizeWav(options, 7, index));  // a pure function of (seed, index)
      auto wav = ops::ParseWav(bytes, false);
      ASSERT_TRUE(wav.ok()) << wav.status();
      EXPECT_EQ(wav->sample_rate, rate);
      const double seconds = static_cast<double>(wav->samples.dim(0)) / rate;
      EXPECT_GE(seconds, 1.0);
      EXPECT_LE(seconds, 10.0);
      // Voiced: most energy below 4 kHz, and pauses make quiet frames beside loud ones.
      const float* x = wav->samples.data<float>();
      const int64_t frame = rate / 50;
      double quietest = 1e9, loudest = 0;
      for (int64_t f = 0; f + frame <= wav->samples.dim(0); f += frame) {
        double energy = 0;
        for (int64_t i = f; i < f + frame; ++i) energy += x[i] * x[i];
        quietest = std::min(quietest, energy);
        loudest = std::max(loudest, energy);
      }
      EXPECT_GT(loudest, 100 * quietest);
    }
  }
  EXPECT_NE(SynthesizeWav(WavOptions{}, 7, 0), SynthesizeWav(WavOptions{}, 8, 0));
}

TEST(GenWavTest, DatasetLayoutAndCorruptFiles) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "gen_wav_test_dataset";
  std::filesystem::remove_all(dir);
  GenDataOptions options;
  options.out_dir = dir.string();
  options.count = 6;
  options.classes = 2;
  options.corrupt_fraction = 0.34;
  options.threads = 2;
  WavOptions wav;
  wav.max_seconds = 1.5;
  auto result = GenerateWavDataset(options, wav);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->files, 6);
  EXPECT_EQ(result->corrupt.size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(dir / "class_001" / "utt_000005.wav"));
  EXPECT_TRUE(std::filesystem::exists(dir / "corrupt.txt"));
  for (const std::string& bad : result->corrupt) {
    std::ifstream in(dir / bad, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    EXPECT_FALSE(ops::ParseWav(bytes.str(), false).ok()) << bad;
  }
  wav.sample_rate = 44100;
  EXPECT_FALSE(GenerateWavDataset(options, wav).ok());
  std::filesystem::remove_all(dir);
}

TEST(GenWavTest, BoxesFitTheImageAndSidecarsAreWritten) {
  for (uint64_t i = 0; i < 200; ++i) {
    const auto box = SynthesizeBox(3, i, 320, 240);
    EXPECT_GE(box[0], 0);
    EXPECT_GE(box[1], 0);
    EXPECT_LE(box[2], 320);
    EXPECT_LE(box[3], 240);
    EXPECT_GE(box[2] - box[0], 96 - 1);
    EXPECT_GE(box[3] - box[1], 72 - 1);
  }
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "gen_wav_test_boxes";
  std::filesystem::remove_all(dir);
  GenDataOptions options;
  options.out_dir = dir.string();
  options.count = 3;
  options.classes = 1;
  options.image = JpegImageOptions{64, 48, 80};
  ASSERT_TRUE(GenerateJpegDataset(options).ok());
  ASSERT_TRUE(WriteBoxSidecars(options).ok());
  std::ifstream in(dir / "class_000" / "img_000002.box");
  int64_t v[4];
  ASSERT_TRUE(in >> v[0] >> v[1] >> v[2] >> v[3]);
  const auto want = SynthesizeBox(options.seed, 2, 64, 48);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(v[k], want[k]);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::cli
