// Synthetic speech-like audio and bounding-box sidecars for `sluice gen-data`.
//
// Audio (`--kind wav`): each utterance is voiced speech in caricature: syllables of harmonic
// tones (up to 4 kHz, 1/k amplitudes shaped by two formant bumps) under a pitch contour that
// glides around a per-speaker base of 90-240 Hz, short pauses between syllables, and a low
// noise floor; 1 to 10 s long, 16-bit PCM mono at 16 kHz or 22.05 kHz. Layout:
// DIR/class_NNN/utt_NNNNNN.wav (utterance i in class i % classes); with a corrupt fraction,
// some files are truncated or random bytes (still .wav) and DIR/corrupt.txt lists them.
//
// Boxes (`--kind jpeg --boxes`): beside each image img_NNNNNN.jpg, a text file
// img_NNNNNN.box holding "x0 y0 x1 y1\n" (pixels, x1/y1 exclusive) of a box covering 30-90%
// of each side, drawn from (seed, index). The `read_box` op reads it.
//
// Everything is a pure function of (seed, index). All functions are thread-safe.
#ifndef SLUICE_CLI_GEN_WAV_H_
#define SLUICE_CLI_GEN_WAV_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/cli/gen_data.h"
#include "sluice/core/status.h"

namespace sluice::cli {

struct WavOptions {
  int sample_rate = 16000;  // 16000 or 22050
  double min_seconds = 1.0;
  double max_seconds = 10.0;
};

// The samples (in [-1, 1]) of utterance `index`.
std::vector<float> SynthesizeSpeech(const WavOptions& options, uint64_t seed, uint64_t index);

// The WAV file of utterance `index`.
std::string SynthesizeWav(const WavOptions& options, uint64_t seed, uint64_t index);

// "class_003/utt_000123.wav".
std::string WavRelativePath(int64_t index, int64_t classes);

// Writes the WAV set (count, classes, seed, corrupt_fraction, threads, progress of
// `options`; its image options are ignored). Errors as GenerateJpegDataset.
StatusOr<GenDataResult> GenerateWavDataset(const GenDataOptions& options, const WavOptions& wav);

// The box of image `index` for an image of width x height: {x0, y0, x1, y1}.
std::array<int64_t, 4> SynthesizeBox(uint64_t seed, uint64_t index, int width, int height);

// Writes the .box sidecar of every image of a JPEG set generated with the same options.
Status WriteBoxSidecars(const GenDataOptions& options);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_GEN_WAV_H_
