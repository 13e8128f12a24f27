// Scalar reference (de)quantizers, one pair per ggml type, bit-exact with ggml's ggml-quants.c
// (dequantize_row_<type>, quantize_row_<type>_ref). These are the specification every fast kernel is
// tested against. n counts elements and must already be a multiple of the type's block size
// (quant/convert.cpp validates before dispatching here). Non-goal: imatrix-weighted quantization.
#pragma once
#include <cstdint>

#include "quant/blocks.h"

namespace tern::quant::ref {

// float.cpp: f32 copy, f16 / bf16 with round-to-nearest-even.
void dequantize_f32(const float* x, float* y, int64_t n);
void quantize_f32(const float* x, float* y, int64_t n);
void dequantize_f16(const uint16_t* x, float* y, int64_t n);
void quantize_f16(const float* x, uint16_t* y, int64_t n);
void dequantize_bf16(const uint16_t* x, float* y, int64_t n);
void quantize_bf16(const float* x, uint16_t* y, int64_t n);

// legacy.cpp: 32-element blocks.
void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t n);
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n);
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n);

// kquants.cpp: 256-element super-blocks.
void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t n);
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n);

// Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (ggml get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// iq4.cpp: non-linear 4-bit code book. Quantizers follow ggml's quantize_iq4_nl / quantize_iq4_xs with no
// importance matrix (7-step scale search), which is what ggml_quantize_chunk produces.
void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n);
void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n);
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n);

}  // namespace tern::quant::ref
