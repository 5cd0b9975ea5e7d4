// The C++ half of the NumPy/SciPy reference comparison (tests/python/test_audio_reference.py):
// with SLUICE_REFERENCE_DIR set, runs every `*.wav` in that folder through the spectral ops
// at fixed settings and writes each result as raw little-endian f32 (`NAME.KIND.f32`) with
// its shape (`NAME.KIND.shape`, dims separated by spaces). The Python test writes the WAVs,
// runs this test, and compares. Without the variable there is nothing to compare against,
// and the test is skipped.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "sluice/ops/audio/audio_ops.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/ops/registry.h"

namespace sluice::ops {
namespace {

using Ops = std::vector<std::pair<std::string, std::map<std::string, ArgValue>>>;

// Runs `ops` on the WAV bytes and returns the last op's output field `field`.
Tensor RunChain(const std::string& wav, const Ops& ops, const std::string& field) {
  Schema schema({FieldSpec{"data", DType::kBytes, {kUnknownDim}}});
  Element e = test::MakeElement({Tensor::FromBytes(wav)}, 0);
  for (const auto& [name, args] : ops) {
    auto op = Registry::Builtin().Create(name, args, schema);
    EXPECT_TRUE(op.ok()) << name << ": " << op.status();
    if (!op.ok()) return Tensor();
    Status s = (*op)->Apply(e, OpContext{});
    EXPECT_TRUE(s.ok()) << name << ": " << s;
    schema = (*op)->output_schema();
  }
  return e.tensors[schema.IndexOf(field)];
}

void Write(const std::filesystem::path& base, const std::string& kind, const Tensor& t) {
  std::ofstream data(base.string() + "." + kind + ".f32", std::ios::binary);
  data.write(reinterpret_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  std::ofstream shape(base.string() + "." + kind + ".shape");
  shape << absl::StrJoin(t.shape(), " ") << "\n";
}

TEST(AudioReferenceDumpTest, WritesSpectralOutputsForThePythonReference) {
  const char* dir = std::getenv("SLUICE_REFERENCE_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by tests/python/test_audio_reference.py";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".wav") continue;
    ++files;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string wav = buffer.str();
    auto parsed = ParseWav(wav, /*mono=*/true);
    ASSERT_TRUE(parsed.ok()) << entry.path() << ": " << parsed.status();
    const int64_t decoded = parsed->sample_rate;
    const std::filesystem::path base = entry.path().parent_path() / entry.path().stem();
    const std::pair<std::string, std::map<std::string, ArgValue>> decode = {"decode_wav",
                                                                            {{"mono", true}}};
    const Ops power = {decode, {"spectrogram", {}}};
    const Ops magnitude = {decode,
                           {"spectrogram",
                            {{"n_fft", int64_t{512}},
                             {"hop", int64_t{128}},
                             {"window", std::string("hamming")},
                             {"power", int64_t{1}},
                             {"center", false}}}};
    Ops mel_htk = power;
    mel_htk.push_back({"mel", {{"sample_rate", decoded}, {"n_mels", int64_t{80}}}});
    Ops mel_slaney = power;
    mel_slaney.push_back({"mel",
                          {{"sample_rate", decoded},
                           {"n_mels", int64_t{64}},
                           {"f_min", 50.0},
                           {"f_max", 7000.0},
                           {"scale", std::string("slaney")},
                           {"norm", std::string("slaney")}}});
    Write(base, "spec_power", RunChain(wav, power, "spectrogram"));
    Write(base, "spec_magnitude", RunChain(wav, magnitude, "spectrogram"));
    Write(base, "mel_htk", RunChain(wav, mel_htk, "spectrogram"));
    Write(base, "mel_slaney", RunChain(wav, mel_slaney, "spectrogram"));
    Write(base, "rfft", RunChain(wav, {decode, {"rfft", {}}}, "fft"));
    Write(base, "rfft_frames",
          RunChain(wav, {decode, {"rfft", {{"n", int64_t{512}}, {"frames", true}}}}, "fft"));
  }
  EXPECT_GT(files, 0) << "no .wav files in " << dir;
}

}  // namespace
}  // namespace sluice::ops
