// Float element types: f32 (copy), f16 and bf16 (round-to-nearest-even down, exact up), matching
// ggml_fp32_to_fp16_row / ggml_fp32_to_bf16_row_ref and their inverses.
#include <cstring>

#include "core/fp16.h"
#include "quant/ref/ref.h"

namespace tern::quant::ref {

void dequantize_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * 4); }
void quantize_f32(const float* x, float* y, int64_t n) { std::memcpy(y, x, static_cast<size_t>(n) * 4); }

void dequantize_f16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}
void quantize_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void dequantize_bf16(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}
void quantize_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

}  // namespace tern::quant::ref
