// AVX2 (+FMA, F16C) op kernels: the 8-lane vector policy V8 for the shared kernels in ops/simd/*.h. Compiled with
// TERN_AVX2_FLAGS and -ffp-contract=off (every FMA is written out, none is added by the compiler); reached only
// through ops::kernels(Isa::kAvx2), after isa_supported.
#include <immintrin.h>

#include <cstring>

#include "ops/simd/simd_kernels.h"

namespace tern::ops {
namespace {

struct V8 {
  using R = __m256;
  using D = __m256d;
  using M = __m256;
  static constexpr int64_t kL = 8;
  static constexpr int kGemmNV = 2;  // 4 rows x 2 vectors of accumulators: 8 of the 16 registers

  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float x) { return _mm256_set1_ps(x); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static __m256i mask(int64_t n) {  // lanes [0, n) set, 0 <= n <= 8
    static const int32_t tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tab + 8 - n));
  }
  // n lanes from p (only those are read), the rest = fill.
  static R load_n(const float* p, int64_t n, float fill) {
    const __m256i m = mask(n);
    return _mm256_blendv_ps(set1(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store_n(float* p, R x, int64_t n) { _mm256_maskstore_ps(p, mask(n), x); }

  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }    // a b + c, one rounding
  // One Walsh-Hadamard stage of span h < kL inside the vector: lane j (bit h clear) gets x[j] + x[j + h], lane
  // j + h gets x[j] - x[j + h] (the twin's a + c and a - c, so the same bits).
  static R butterfly(R x, int64_t h) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i hv = _mm256_set1_epi32(static_cast<int>(h));
    const R p = _mm256_permutevar8x32_ps(x, _mm256_xor_si256(lane, hv));  // the partner of every lane
    const R upper = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(lane, hv), hv));
    return _mm256_blendv_ps(_mm256_add_ps(x, p), _mm256_sub_ps(p, x), upper);
  }
  static R fnma(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a b, one rounding
  static R neg(R x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }
  // maxps returns its second operand when either is NaN: a NaN in x leaves acc (the ref's `x > m ? x : m`).
  static R max_keep(R acc, R x) { return _mm256_max_ps(x, acc); }
  // ... and here a NaN x passes through both.
  static R clamp(R x, float lo, float hi) { return _mm256_min_ps(set1(hi), _mm256_max_ps(set1(lo), x)); }
  static R round(R x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R pow2i(R n) {  // 2^n for integral n in [-126, 127]
    const auto e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static R frexp(R x, R* e) {  // x positive normal: mantissa in [0.5, 1), exponent as float
    const __m256i b = _mm256_castps_si256(x);
    *e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(126)));
    const __m256i m = _mm256_and_si256(b, _mm256_set1_epi32(0x007fffff));
    return _mm256_castsi256_ps(_mm256_or_si256(m, _mm256_set1_epi32(0x3f000000)));
  }
  static M lt(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M eq(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static R select(M m, R a, R b) { return _mm256_blendv_ps(b, a, m); }  // m ? a : b
  static R swap_pairs(R x) { return _mm256_permute_ps(x, 0xB1); }         // lanes (1, 0, 3, 2, ...)
  // Fixed tree: (l0+l4, l1+l5, l2+l6, l3+l7) -> (b0+b2, b1+b3) -> c0+c1.
  static float hsum(R x) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
  }
  static float hmax(R x) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
  }

  static D dzero() { return _mm256_setzero_pd(); }
  static D dset1(double x) { return _mm256_set1_pd(x); }
  static D cvt_lo(R x) { return _mm256_cvtps_pd(_mm256_castps256_ps128(x)); }
  static D cvt_hi(R x) { return _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)); }
  static D dadd(D a, D b) { return _mm256_add_pd(a, b); }
  static D dfma(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static double dhsum(D x) {
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  }

  static R load_h(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static R load_h_n(const uint16_t* p, int64_t n) {
    uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tmp, p, static_cast<size_t>(n) * 2);
    return load_h(tmp);
  }
  // A q4_0 block's 16 bytes -> its 32 values nibble - 8 (low nibbles are elements 0..15), 4 vectors.
  static void load_q4(const uint8_t* p, R* c) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, m), e);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), e);
    c[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    c[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
    c[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    c[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
  }
  // Vectors u0, u0 + 1 (u0 = 0: elements 0..15, the low nibbles; 2: 16..31, the high ones) of a q4_0 block's values.
  static void load_q4_pair(const uint8_t* p, int64_t u0, R* c) {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if (u0 != 0) b = _mm_srli_epi16(b, 4);
    b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
    c[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    c[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
  }
  static float h2f(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }
  // 8 int8 -> floats.
  static R load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static void store_h(uint16_t* p, R x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  static void store_h_n(uint16_t* p, R x, int64_t n) {
    uint16_t tmp[8];
    store_h(tmp, x);
    std::memcpy(p, tmp, static_cast<size_t>(n) * 2);
  }
};

}  // namespace

const Kernels& kernels_avx2() {
  // delta_chunk_min: never; the recurrence measured faster at every length (table in delta_rule.h).
  static const Kernels k = make_kernels<V8>(Isa::kAvx2, int64_t{1} << 40);
  return k;
}

}  // namespace tern::ops
