// Numeric helpers shared by the reference quantizers; each reproduces the exact float behaviour of the
// corresponding ggml idiom so that quantized bytes match ggml bit for bit (including NaN / inf inputs,
// where ggml's x86 build relies on cvttss2si returning INT32_MIN).
#pragma once
#include <bit>
#include <cstdint>

#include "core/fp16.h"

namespace tern::quant::ref {

// ggml nearest_int: round half to even by adding 1.5 * 2^23 and reading the mantissa. Exact for
// |f| <= 2^22; larger or non-finite inputs give a deterministic (meaningless) value, as in ggml.
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  return (std::bit_cast<int32_t>(v) & 0x007fffff) - 0x00400000;
}

// C's float -> integer conversion as x86-64 executes it (cvttss2si): truncation toward zero, and
// INT32_MIN for NaN or out-of-range values (where C++ would be undefined).
inline int32_t trunc_i32(float f) {
  if (!(f > -2147483904.0f && f < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(f);
}
// (int8_t)f and (uint8_t)f in ggml: the low byte of the 32-bit conversion.
inline int8_t trunc_i8(float f) { return static_cast<int8_t>(trunc_i32(f)); }
inline uint8_t trunc_u8(float f) { return static_cast<uint8_t>(trunc_i32(f)); }

inline float h2f(uint16_t h) { return fp16_to_fp32(h); }
inline uint16_t f2h(float f) { return fp32_to_fp16(f); }

// Smallest group max treated as non-zero by the K-quant and IQ4 scale searches (ggml GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

}  // namespace tern::quant::ref
