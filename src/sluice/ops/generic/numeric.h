// Element-wise numeric access to tensors of any numeric dtype through double, for the generic
// ops (cast, one_hot) where generality matters more than speed. Pure functions.
#ifndef SLUICE_OPS_GENERIC_NUMERIC_H_
#define SLUICE_OPS_GENERIC_NUMERIC_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "sluice/core/tensor.h"
#include "sluice/ops/half.h"

namespace sluice::ops {

inline bool IsIntegerDType(DType d) {
  return d == DType::kU8 || d == DType::kI16 || d == DType::kI32 || d == DType::kI64;
}

// Element `i` of the raw array `base` of dtype `d`, as a double.
inline double LoadNumber(DType d, const uint8_t* base, int64_t i) {
  switch (d) {
    case DType::kU8:
    case DType::kBytes:
      return base[i];
    case DType::kI16:
      return reinterpret_cast<const int16_t*>(base)[i];
    case DType::kI32:
      return reinterpret_cast<const int32_t*>(base)[i];
    case DType::kI64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(base)[i]);
    case DType::kF16:
      return HalfToFloat(reinterpret_cast<const uint16_t*>(base)[i]);
    case DType::kF32:
      return reinterpret_cast<const float*>(base)[i];
    case DType::kF64:
      return reinterpret_cast<const double*>(base)[i];
  }
  return 0;
}

// Integers: truncation toward zero, saturated to the type's range; NaN becomes 0.
template <typename T>
T SaturateTo(double v) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) {
    return std::numeric_limits<T>::lowest();
  }
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

// Stores `v` as element `i` of the raw array `base` of dtype `d`.
inline void StoreNumber(DType d, uint8_t* base, int64_t i, double v) {
  switch (d) {
    case DType::kU8:
    case DType::kBytes:
      base[i] = SaturateTo<uint8_t>(v);
      break;
    case DType::kI16:
      reinterpret_cast<int16_t*>(base)[i] = SaturateTo<int16_t>(v);
      break;
    case DType::kI32:
      reinterpret_cast<int32_t*>(base)[i] = SaturateTo<int32_t>(v);
      break;
    case DType::kI64:
      reinterpret_cast<int64_t*>(base)[i] = SaturateTo<int64_t>(v);
      break;
    case DType::kF16:
      reinterpret_cast<uint16_t*>(base)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kF32:
      reinterpret_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      reinterpret_cast<double*>(base)[i] = v;
      break;
  }
}

}  // namespace sluice::ops

#endif  // SLUICE_OPS_GENERIC_NUMERIC_H_
