// AVX2 (+FMA, F16C) kernels: quantized gemms via simd_gemm.h with maddubs+madd, float-weight gemms
// (f32 / f16 / bf16 converted in register, f32 activations), and the activation quantizer primitives.
// Compiled with TERN_AVX2_FLAGS; only reached through the dispatch after isa_supported(kAvx2).
#include "quant/avx2/simd_gemm.h"

namespace tern::quant {
namespace {

struct OpsAvx2 {
  // int32 lane k = sum of u[e]*s[e] over bytes 4k..4k+3; exact (|u*s| pair sums stay below 2^15).
  static __m256i dot(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)); }
};

// ---- float weights: 2 accumulators x 8 lanes per token over 16-element steps, then an 8-step, then a
// scalar tail; the order depends on n alone.
struct LoadF32 {
  using T = float;
  static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
  static float one(const T* p) { return *p; }
};
struct LoadF16 {
  using T = uint16_t;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float one(const T* p) { return _cvtsh_ss(*p); }
};
struct LoadBF16 {
  using T = uint16_t;
  static __m256 load(const T* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float one(const T* p) {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

template <class L>
struct FloatRow {
  template <int NT>
  static void row(const uint8_t* wrow, const uint8_t* const* xr, int64_t n, float* const* out) {
    const auto* w = reinterpret_cast<const typename L::T*>(wrow);
    const float* x[NT];
    __m256 a0[NT], a1[NT];
    for (int t = 0; t < NT; ++t) {
      x[t] = reinterpret_cast<const float*>(xr[t]);
      a0[t] = _mm256_setzero_ps(), a1[t] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256 w0 = L::load(w + i), w1 = L::load(w + i + 8);
      for (int t = 0; t < NT; ++t) {
        a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), a0[t]);
        a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), a1[t]);
      }
    }
    if (i + 8 <= n) {
      const __m256 w0 = L::load(w + i);
      for (int t = 0; t < NT; ++t) a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), a0[t]);
      i += 8;
    }
    for (int t = 0; t < NT; ++t) {
      float s = hsum_tree(_mm256_add_ps(a0[t], a1[t]));
      for (int64_t j = i; j < n; ++j) s += L::one(w + j) * x[t][j];
      *out[t] = s;
    }
  }
  // Rows r and r + 1 (at wrow and wrow + stride) for NT <= 2 tokens: out[t][0] and out[t][1]. Per element the same
  // sequence as row(); each activation vector is loaded once for both rows.
  template <int NT>
  static void row2(const uint8_t* wrow, size_t stride, const uint8_t* const* xr, int64_t n, float* const* out) {
    const auto* w = reinterpret_cast<const typename L::T*>(wrow);
    const auto* v = reinterpret_cast<const typename L::T*>(wrow + stride);
    const float* x[NT];
    __m256 a0[NT], a1[NT], b0[NT], b1[NT];
    for (int t = 0; t < NT; ++t) {
      x[t] = reinterpret_cast<const float*>(xr[t]);
      a0[t] = _mm256_setzero_ps(), a1[t] = _mm256_setzero_ps();
      b0[t] = _mm256_setzero_ps(), b1[t] = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256 w0 = L::load(w + i), w1 = L::load(w + i + 8);
      const __m256 v0 = L::load(v + i), v1 = L::load(v + i + 8);
      for (int t = 0; t < NT; ++t) {
        const __m256 x0 = _mm256_loadu_ps(x[t] + i), x1 = _mm256_loadu_ps(x[t] + i + 8);
        a0[t] = _mm256_fmadd_ps(w0, x0, a0[t]);
        a1[t] = _mm256_fmadd_ps(w1, x1, a1[t]);
        b0[t] = _mm256_fmadd_ps(v0, x0, b0[t]);
        b1[t] = _mm256_fmadd_ps(v1, x1, b1[t]);
      }
    }
    if (i + 8 <= n) {
      const __m256 w0 = L::load(w + i), v0 = L::load(v + i);
      for (int t = 0; t < NT; ++t) {
        const __m256 x0 = _mm256_loadu_ps(x[t] + i);
        a0[t] = _mm256_fmadd_ps(w0, x0, a0[t]);
        b0[t] = _mm256_fmadd_ps(v0, x0, b0[t]);
      }
      i += 8;
    }
    for (int t = 0; t < NT; ++t) {
      float s = hsum_tree(_mm256_add_ps(a0[t], a1[t]));
      for (int64_t j = i; j < n; ++j) s += L::one(w + j) * x[t][j];
      float r = hsum_tree(_mm256_add_ps(b0[t], b1[t]));
      for (int64_t j = i; j < n; ++j) r += L::one(v + j) * x[t][j];
      out[t][0] = s;
      out[t][1] = r;
    }
  }
};

// ---- activation quantizer primitives (same bytes as amax_ref / scale_round_ref) ----
float amax_avx2(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

void scale_round_avx2(const float* x, float id, int8_t* q, int64_t n) {
  const __m256 mul = _mm256_set1_ps(id);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undo packs' 128-bit lane interleave
  for (int64_t i = 0; i < n; i += 32) {
    __m256i v[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), mul),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v[k] = _mm256_cvtps_epi32(r);
    }
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), _mm256_permutevar8x32_epi32(p, order));
  }
}

}  // namespace

#define TERN_GEMM_AVX2(name, ...) \
  void name(const GemmArgs& a) { drive<__VA_ARGS__>(a); }
TERN_GEMM_AVX2(gemm_f32_f32_avx2, FloatRow<LoadF32>)
TERN_GEMM_AVX2(gemm_f16_f32_avx2, FloatRow<LoadF16>)
TERN_GEMM_AVX2(gemm_bf16_f32_avx2, FloatRow<LoadBF16>)
TERN_GEMM_AVX2(gemm_q4_0_q8_0_avx2, Legacy<DecQ4_0, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q4_1_q8_1_avx2, Legacy<DecQ4_1, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q5_0_q8_0_avx2, Legacy<DecQ5_0, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q5_1_q8_1_avx2, Legacy<DecQ5_1, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q8_0_q8_0_avx2, Legacy<DecQ8_0, OpsAvx2>)
TERN_GEMM_AVX2(gemm_iq4_nl_q8_0_avx2, Legacy<DecIQ4_NL, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q2_k_q8_k_avx2, KQuant<DecQ2_K, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q3_k_q8_k_avx2, KQuant<DecQ3_K, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q4_k_q8_k_avx2, KQuant<DecQ4_K, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q5_k_q8_k_avx2, KQuant<DecQ5_K, OpsAvx2>)
TERN_GEMM_AVX2(gemm_q6_k_q8_k_avx2, KQuant<DecQ6_K, OpsAvx2>)
TERN_GEMM_AVX2(gemm_iq4_xs_q8_k_avx2, KQuant<DecIQ4_XS, OpsAvx2>)
#undef TERN_GEMM_AVX2

GemmFn gemm_fn_avx2(Type w) {
  switch (w) {
#define TERN_CASE(wn, an, T) \
  case Type::T: return &gemm_##wn##_##an##_avx2;
    TERN_KERNEL_LIST(TERN_CASE)
#undef TERN_CASE
    default: return nullptr;
  }
}

ActPrims act_prims_avx2() { return {&amax_avx2, &scale_round_avx2}; }

}  // namespace tern::quant
