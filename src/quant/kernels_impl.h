// Internal to the kernels: the argument pack every gemm shares, per-ISA kernel lookup, and the few scalar
// steps the ref and the SIMD kernels must perform identically (static, so each ISA's translation unit keeps
// its own copy: no inline function compiled with AVX-512 flags can be picked by the linker for other code).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "quant/repack_impl.h"
#include "quant/types.h"

namespace tern::quant {

struct GemmArgs {
  const void* w;      // [n_out rows of w_stride bytes]
  size_t w_stride;
  const void* x;      // [n_tok rows of x_stride bytes], activation format
  size_t x_stride;
  int64_t n_in;
  int64_t row_begin, row_end, n_tok;
  float* y;           // y[t*ldy + i - y_col0]
  int64_t ldy;
  const int32_t* x_rows = nullptr;  // token t reads activation row x_rows[t] (nullptr: row t)
  int64_t y_col0 = 0;
};

using GemmFn = void (*)(const GemmArgs&);
// The ISA-specific half of activation quantization; the block formats (Q8_0/Q8_1/Q8_K scales and sums) are
// written by shared scalar code in kernels.cpp, so every ISA produces the same bytes by construction.
struct ActPrims {
  float (*amax)(const float* x, int64_t n);                         // max |x|, n a multiple of 32
  void (*scale_round)(const float* x, float id, int8_t* q, int64_t n);  // q = nearbyint(x*id), ties to even
};

// Per-ISA lookups: nullptr when that ISA has no kernel for the type.
GemmFn gemm_fn_ref(Type w);
GemmFn gemm_fn_avx2(Type w);
GemmFn gemm_fn_avx512(Type w);
ActPrims act_prims_ref();
ActPrims act_prims_avx2();
ActPrims act_prims_avx512();

// The same entry points from the AVX-512 unit's SIMDe twin (core/avx512.h); only test binaries link it.
namespace simde_twin {
GemmFn gemm_fn_avx512(Type w);
ActPrims act_prims_avx512();
}  // namespace simde_twin

// Test hook: while set, the dispatch sends Isa::kAvx512 to these entry points and accepts it on any host. The
// SIMDe twin comes in this way rather than as an Isa value, so nothing the engine can select or name changes
// (best_isa(), active_isa(), isa_name()) and the tern binary does not even link the twin.
struct Avx512Entries {
  GemmFn (*gemm_fn)(Type w);
  ActPrims (*act_prims)();
  RepackFn (*repack_fn)(Type w);  // the repacked (x8) kernels
};
void set_avx512_entries(const Avx512Entries* e);  // nullptr: the native unit again
const Avx512Entries* avx512_entries();            // the hook's current value (nullptr: native)

// Scalar ref dot products: one weight row against one activation row of n elements.
#define TERN_KERNEL_LIST(X)                                                                                  \
  X(f32, f32, F32) X(f16, f32, F16) X(bf16, f32, BF16) X(q4_0, q8_0, Q4_0) X(q4_1, q8_1, Q4_1)              \
  X(q5_0, q8_0, Q5_0) X(q5_1, q8_1, Q5_1) X(q8_0, q8_0, Q8_0) X(iq4_nl, q8_0, IQ4_NL) X(q2_k, q8_k, Q2_K)   \
  X(q3_k, q8_k, Q3_K) X(q4_k, q8_k, Q4_K) X(q5_k, q8_k, Q5_K) X(q6_k, q8_k, Q6_K) X(iq4_xs, q8_k, IQ4_XS)
#define TERN_DECLARE_REF_DOT(w, a, T) float dot_##w##_##a##_ref(const void* w_row, const void* x_row, int64_t n);
TERN_KERNEL_LIST(TERN_DECLARE_REF_DOT)
#undef TERN_DECLARE_REF_DOT

namespace detail {

// Horizontal sum of the 8 float lanes of the legacy-block accumulator, in the tree the SIMD kernels use:
// (a0+a4, a1+a5, a2+a6, a3+a7) -> (b0+b2, b1+b3) -> c0+c1.
static inline float hsum8_tree(const float a[8]) {
  const float b0 = a[0] + a[4], b1 = a[1] + a[5], b2 = a[2] + a[6], b3 = a[3] + a[7];
  const float c0 = b0 + b2, c1 = b1 + b3;
  return c0 + c1;
}

// One K-quant super-block's contribution: acc += (d*dx)*isum - (dmin*dx)*msum, in this order, with explicit
// fused multiply-adds: the compiler may contract a*b+c in FMA-enabled units but never in the baseline ref, so
// every step that must match across ISAs spells out its fma.
static inline float kquant_step(float acc, float d, float dmin, float dx, int32_t isum, int32_t msum) {
  const float dd = d * dx;
  acc = std::fma(dd, static_cast<float>(isum), acc);
  const float dm = dmin * dx;
  return std::fma(-dm, static_cast<float>(msum), acc);
}

// Unpack Q3_K's 12 bytes of 6-bit scales into 16 signed scales (already minus 32); layout as ggml q3_K:
// bytes 0-7 hold the low nibbles of scales 0-7 / 8-15, bytes 8-11 the high 2 bits, 2 bits per scale.
static inline void unpack_q3_k_scales(const uint8_t* s, int32_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = (lo | (hi << 4)) - 32;
  }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7); layout as ggml get_scale_min_k4.
static inline void scale_min_k4(int j, const uint8_t* q, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// IQ4_XS 6-bit scale of sub-block ib (0..7), minus 32.
static inline int32_t iq4_xs_scale(uint16_t scales_h, const uint8_t* scales_l, int ib) {
  const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
  return ls - 32;
}

}  // namespace detail
}  // namespace tern::quant
