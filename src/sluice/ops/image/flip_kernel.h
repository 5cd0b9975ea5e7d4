// The hot loop of `random_flip` for the common image: u8 with 3 channels, mirrored left to
// right. OpenCV's flip moves 3-byte pixels one at a time (11x a copy of the image); this one
// moves 16 pixels per step with byte shuffles (32 with AVX2, 64 with AVX-512 VBMI's
// two-register byte permutes).
#ifndef SLUICE_OPS_IMAGE_FLIP_KERNEL_H_
#define SLUICE_OPS_IMAGE_FLIP_KERNEL_H_

#include <cstdint>

namespace sluice::ops {

// dst row y, pixel x = src row y, pixel width - 1 - x, for 3-byte pixels; rows are
// `width * 3` bytes apart in both. `src` and `dst` must not overlap.
// Uses the widest instruction set the machine has (AVX-512 VBMI, AVX2, SSSE3, plain C++).
void FlipRgbHorizontally(const uint8_t* src, int64_t height, int64_t width, uint8_t* dst);

// The same with one instruction set, for tests of every path on one machine. False (and
// nothing written) when the machine lacks it.
enum class FlipIsa { kScalar, kSsse3, kAvx2, kAvx512Vbmi };
bool FlipRgbHorizontallyWith(FlipIsa isa, const uint8_t* src, int64_t height, int64_t width,
                             uint8_t* dst);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_IMAGE_FLIP_KERNEL_H_
