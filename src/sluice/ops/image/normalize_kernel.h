// The hot loop of `normalize`: a 3-channel u8 HWC image to f32 (or f16) CHW planes.
#ifndef SLUICE_OPS_IMAGE_NORMALIZE_KERNEL_H_
#define SLUICE_OPS_IMAGE_NORMALIZE_KERNEL_H_

#include <cstdint>

namespace sluice::ops {

// out[k * pixels + i] = float(in[3 * i + k]) * scale[k] + shift[k] for k in 0..2: the product
// and the sum each rounded to float, never fused (this file is built with -ffp-contract=off),
// so the vector and the scalar code, and machines with and without AVX2, give the same bits.
// Uses the widest instruction set the machine has (AVX2 with F16C, plain C++).
void NormalizeRgbToPlanes(const uint8_t* in, int64_t pixels, const float scale[3],
                          const float shift[3], float* out);
// The same values as IEEE binary16, rounded to nearest even (FloatToHalf of each, half.h).
void NormalizeRgbToHalfPlanes(const uint8_t* in, int64_t pixels, const float scale[3],
                              const float shift[3], uint16_t* out);

// The same with one instruction set, for tests of every path on one machine. False (and
// nothing written) when the machine lacks it (kAvx2: AVX2 and F16C).
enum class NormalizeIsa { kScalar, kAvx2 };
bool NormalizeRgbToPlanesWith(NormalizeIsa isa, const uint8_t* in, int64_t pixels,
                              const float scale[3], const float shift[3], float* out);
bool NormalizeRgbToHalfPlanesWith(NormalizeIsa isa, const uint8_t* in, int64_t pixels,
                                  const float scale[3], const float shift[3], uint16_t* out);

// The same formula for one value: what the table of the other layouts holds.
float NormalizeValue(uint8_t v, float scale, float shift);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_IMAGE_NORMALIZE_KERNEL_H_
