// AVX-512 (F, BW, VL, DQ, VNNI) kernels: quantized gemms via simd_gemm.h with 256-bit VNNI dpbusd (one
// instruction replaces maddubs+madd; same exact int32 lanes, so results equal AVX2's and the ref's bit for
// bit), float-weight gemms on 512-bit vectors with masked tails, and the activation quantizer primitives.
// Compiled with TERN_AVX512_FLAGS; only reached through the dispatch after isa_supported(kAvx512). The test
// binaries also link its SIMDe twin (core/avx512.h), which runs these same lines on hosts without AVX-512.
// Not yet: 512-bit decoding of two quantized blocks per instruction (the next step for prefill speed).
// GCC 12 reports a false (-Wmaybe)-uninitialized inside its own avx512fintrin.h (the undefined-vector idiom).
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (and no such report)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "core/avx512.h"
#include "quant/avx2/simd_gemm.h"

namespace tern::quant {
namespace {

struct OpsVnni {
  // int32 lane k = sum of u[e]*s[e] over bytes 4k..4k+3 (AVX512-VNNI + VL, non-saturating).
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
};

struct Load512F32 {
  using T = float;
  static __m512 load(const T* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct Load512F16 {
  using T = uint16_t;
  static __m512 load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
struct Load512BF16 {
  using T = uint16_t;
  static __m512 widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
  static __m512 load(const T* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load(const T* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

// 2 accumulators x 16 lanes per token over 32-element steps; the tail (< 32) goes through masked 16-steps
// into the first accumulator (masked-off lanes add 0*0). Order depends on n alone.
template <class L>
struct FloatRow512 {
  template <int NT>
  static void row(const uint8_t* wrow, const uint8_t* const* xr, int64_t n, float* const* out) {
    const auto* w = reinterpret_cast<const typename L::T*>(wrow);
    const float* x[NT];
    __m512 a0[NT], a1[NT];
    for (int t = 0; t < NT; ++t) {
      x[t] = reinterpret_cast<const float*>(xr[t]);
      a0[t] = _mm512_setzero_ps(), a1[t] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 w0 = L::load(w + i), w1 = L::load(w + i + 16);
      for (int t = 0; t < NT; ++t) {
        a0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), a0[t]);
        a1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), a1[t]);
      }
    }
    for (; i < n; i += 16) {
      const int64_t r = n - i < 16 ? n - i : 16;
      const __mmask16 m = static_cast<__mmask16>((1u << r) - 1u);
      const __m512 w0 = L::load(w + i, m);
      for (int t = 0; t < NT; ++t) a0[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x[t] + i), a0[t]);
    }
    for (int t = 0; t < NT; ++t) *out[t] = _mm512_reduce_add_ps(_mm512_add_ps(a0[t], a1[t]));
  }
};

float amax_avx512(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  return _mm512_reduce_max_ps(m);  // max is exact in any order
}

void scale_round_avx512(const float* x, float id, int8_t* q, int64_t n) {
  const __m512 mul = _mm512_set1_ps(id);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), mul),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r)));
  }
}

}  // namespace

TERN_AVX512_BEGIN
#define TERN_GEMM_AVX512(name, ...) \
  void name(const GemmArgs& a) { drive<__VA_ARGS__>(a); }
TERN_GEMM_AVX512(gemm_f32_f32_avx512, FloatRow512<Load512F32>)
TERN_GEMM_AVX512(gemm_f16_f32_avx512, FloatRow512<Load512F16>)
TERN_GEMM_AVX512(gemm_bf16_f32_avx512, FloatRow512<Load512BF16>)
TERN_GEMM_AVX512(gemm_q4_0_q8_0_avx512, Legacy<DecQ4_0, OpsVnni>)
TERN_GEMM_AVX512(gemm_q4_1_q8_1_avx512, Legacy<DecQ4_1, OpsVnni>)
TERN_GEMM_AVX512(gemm_q5_0_q8_0_avx512, Legacy<DecQ5_0, OpsVnni>)
TERN_GEMM_AVX512(gemm_q5_1_q8_1_avx512, Legacy<DecQ5_1, OpsVnni>)
TERN_GEMM_AVX512(gemm_q8_0_q8_0_avx512, Legacy<DecQ8_0, OpsVnni>)
TERN_GEMM_AVX512(gemm_iq4_nl_q8_0_avx512, Legacy<DecIQ4_NL, OpsVnni>)
TERN_GEMM_AVX512(gemm_q2_k_q8_k_avx512, KQuant<DecQ2_K, OpsVnni>)
TERN_GEMM_AVX512(gemm_q3_k_q8_k_avx512, KQuant<DecQ3_K, OpsVnni>)
TERN_GEMM_AVX512(gemm_q4_k_q8_k_avx512, KQuant<DecQ4_K, OpsVnni>)
TERN_GEMM_AVX512(gemm_q5_k_q8_k_avx512, KQuant<DecQ5_K, OpsVnni>)
TERN_GEMM_AVX512(gemm_q6_k_q8_k_avx512, KQuant<DecQ6_K, OpsVnni>)
TERN_GEMM_AVX512(gemm_iq4_xs_q8_k_avx512, KQuant<DecIQ4_XS, OpsVnni>)
#undef TERN_GEMM_AVX512

GemmFn gemm_fn_avx512(Type w) {
  switch (w) {
#define TERN_CASE(wn, an, T) \
  case Type::T: return &gemm_##wn##_##an##_avx512;
    TERN_KERNEL_LIST(TERN_CASE)
#undef TERN_CASE
    default: return nullptr;
  }
}

ActPrims act_prims_avx512() { return {&amax_avx512, &scale_round_avx512}; }
TERN_AVX512_END

}  // namespace tern::quant
