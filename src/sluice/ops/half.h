// IEEE 754 binary16 ("f16") conversions, round to nearest even. Pure functions.
#ifndef SLUICE_OPS_HALF_H_
#define SLUICE_OPS_HALF_H_

#include <cstdint>
#include <cstring>

namespace sluice::ops {

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mantissa = x & 0x7FFFFFu;
  const int exponent = static_cast<int>((x >> 23) & 0xFFu);
  if (exponent == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (mantissa ? 0x200u : 0u));
  const int e = exponent - 127 + 15;
  if (e >= 0x1F) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow: infinity
  if (e <= 0) {                                                 // subnormal half (or zero)
    if (e < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFFu;
  // A carry out of the mantissa correctly bumps the exponent (up to infinity).
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t x;
  if (exponent == 0x1F) {
    x = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    x = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    x = sign;
  } else {  // subnormal half: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    x = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

}  // namespace sluice::ops

#endif  // SLUICE_OPS_HALF_H_
