// Fuzzes the WAV parser behind decode_wav: stereo kept, mixed to mono, and with a
// frames_to_decode callback (the path pad_or_trim's NeededInput takes) asking for a count
// taken from the input's first byte.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sluice/ops/audio/audio_ops.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)sluice::ops::ParseWav(bytes, /*mono=*/false);
  (void)sluice::ops::ParseWav(bytes, /*mono=*/true);
  int64_t wanted = size > 0 ? data[0] : 0;
  (void)sluice::ops::ParseWav(bytes, /*mono=*/false,
                              [wanted](int64_t frames) { return frames < wanted ? frames : wanted; });
  return 0;
}
