// Tensor-type conversion, scalar reference: ggml type <-> float, bit-exact with ggml (dequantize_row_* and
// the reference quantizers quantize_row_*_ref; IQ4_NL / IQ4_XS as quantize_iq4_nl / quantize_iq4_xs with no
// importance matrix). Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K..Q6_K, Q8_K,
// IQ4_NL, IQ4_XS. Non-goals: speed (see quant/kernels), imatrix-weighted quantization.
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace tern::quant {

bool can_dequantize(Type t);
bool can_quantize(Type t);

// dst[0..n) = decoded src, where src holds row_size(traits(t), n) bytes. A whole tensor is one row with
// n = its element count. Throws tern::Error if t is unsupported or n is negative or not a multiple of the
// block size.
void dequantize_row(Type t, const void* src, float* dst, int64_t n);

// dst (row_size(traits(t), n) bytes) = ggml's reference encoding of src[0..n). Same errors as above.
// NaN / inf inputs never crash; the resulting bytes are whatever ggml's x86 build would produce.
void quantize_row_ref(Type t, const float* src, void* dst, int64_t n);

}  // namespace tern::quant
