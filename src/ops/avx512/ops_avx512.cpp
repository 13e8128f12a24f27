// AVX-512 (F, BW, VL, DQ) op kernels: the 16-lane vector policy V16 for the shared kernels in ops/simd/*.h, masked
// loads for tails. Compiled with TERN_AVX512_FLAGS and -ffp-contract=off (every FMA is written out); reached only
// through ops::kernels(Isa::kAvx512), after isa_supported. Built a second time as its SIMDe twin for the tests
// (tern_add_avx512_sources, core/avx512.h): the intrinsics below stay within what that twin provides.
// GCC 12 reports a false (-Wmaybe)-uninitialized inside its own avx512fintrin.h (the undefined-vector idiom).
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (and no such report)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "core/avx512.h"  // first: immintrin.h, or SIMDe for the twin

#include <cstring>

#include "ops/simd/simd_kernels.h"

namespace tern::ops {
namespace {

struct V16 {
  using R = __m512;
  using D = __m512d;
  using M = __mmask16;
  static constexpr int64_t kL = 16;
  static constexpr int kGemmNV = 4;  // 4 rows x 4 vectors of accumulators: 16 of the 32 registers

  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float x) { return _mm512_set1_ps(x); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static M mask(int64_t n) { return static_cast<M>((1u << n) - 1u); }  // lanes [0, n), 0 <= n <= 16
  static R load_n(const float* p, int64_t n, float fill) {
    const M m = mask(n);
    return _mm512_mask_blend_ps(m, set1(fill), _mm512_maskz_loadu_ps(m, p));
  }
  // Tail stores through a stack copy (only n floats are written): masked stores are missing from Debian 12's SIMDe,
  // which builds this unit's SIMDe twin for tests.
  static void store_n(float* p, R x, int64_t n) {
    alignas(64) float tmp[16];
    _mm512_store_ps(tmp, x);
    std::memcpy(p, tmp, static_cast<size_t>(n) * sizeof(float));
  }

  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }    // a b + c, one rounding
  // One Walsh-Hadamard stage of span h < kL inside the vector: lane j (bit h clear) gets x[j] + x[j + h], lane
  // j + h gets x[j] - x[j + h] (the twin's a + c and a - c, so the same bits).
  static R butterfly(R x, int64_t h) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i hv = _mm512_set1_epi32(static_cast<int>(h));
    const R p = _mm512_permutexvar_ps(_mm512_xor_si512(lane, hv), x);  // the partner of every lane
    const __mmask16 upper = _mm512_test_epi32_mask(lane, hv);
    return _mm512_mask_blend_ps(upper, _mm512_add_ps(x, p), _mm512_sub_ps(p, x));
  }
  static R fnma(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b, one rounding
  static R neg(R x) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  }
  // vmaxps returns its second operand when either is NaN: a NaN in x leaves acc (the ref's `x > m ? x : m`).
  static R max_keep(R acc, R x) { return _mm512_max_ps(x, acc); }
  // ... and here a NaN x passes through both.
  static R clamp(R x, float lo, float hi) { return _mm512_min_ps(set1(hi), _mm512_max_ps(set1(lo), x)); }
  static R round(R x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R pow2i(R n) {  // 2^n for integral n in [-126, 127]
    const auto e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static R frexp(R x, R* e) {  // x positive normal: mantissa in [0.5, 1), exponent as float
    const __m512i b = _mm512_castps_si512(x);
    // exponent field E as a float: bits 0x4B000000 | E are 2^23 + E exactly (no int -> float conversion, which
    // Debian 12's SIMDe lacks for 512 bits)
    const __m512i biased = _mm512_or_si512(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(0x4B000000));
    *e = _mm512_sub_ps(_mm512_castsi512_ps(biased), set1(8388608.0f + 126.0f));
    const __m512i m = _mm512_and_si512(b, _mm512_set1_epi32(0x007fffff));
    return _mm512_castsi512_ps(_mm512_or_si512(m, _mm512_set1_epi32(0x3f000000)));
  }
  static M lt(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M eq(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static R select(M m, R a, R b) { return _mm512_mask_blend_ps(m, b, a); }  // m ? a : b
  static R swap_pairs(R x) { return _mm512_shuffle_ps(x, x, 0xB1); }        // lanes (1, 0, 3, 2, ...)
  static float hsum(R x) { return _mm512_reduce_add_ps(x); }  // GCC's fixed tree (halves, len 8, 4, 2, 1)
  static float hmax(R x) { return _mm512_reduce_max_ps(x); }

  // Double sums and f16 rows go through 256-bit halves: Debian 12's SIMDe (the SIMDe twin of this unit) lacks
  // _mm512_cvtps_pd, _mm512_reduce_add_pd and _mm512_cvtps_ph; these run only in norms, softmax sums and kv_store.
  static D widen(__m256 h) {
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(h)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(h, 1));
    return _mm512_insertf64x4(_mm512_castpd256_pd512(lo), hi, 1);
  }
  static __m256 hi_half(R x) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)); }  // clang: constant lane
  static D dzero() { return _mm512_setzero_pd(); }
  static D dset1(double x) { return _mm512_set1_pd(x); }
  static D cvt_lo(R x) { return widen(_mm512_castps512_ps256(x)); }
  static D cvt_hi(R x) { return widen(hi_half(x)); }
  static D dadd(D a, D b) { return _mm512_add_pd(a, b); }
  static D dfma(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  // Fixed tree: 256-bit halves, then 128-bit halves, then the two lanes.
  static double dhsum(D x) {
    const __m256d q = _mm256_add_pd(_mm512_castpd512_pd256(x), _mm512_extractf64x4_pd(x, 1));
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  }

  static R load_h(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static R load_h_n(const uint16_t* p, int64_t n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p)); }
  static void store_h(uint16_t* p, R x) {
    const __m128i lo = _mm256_cvtps_ph(_mm512_castps512_ps256(x), _MM_FROUND_TO_NEAREST_INT);
    const __m128i hi = _mm256_cvtps_ph(hi_half(x), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), hi);
  }
  // A q4_0 block's 16 bytes -> its 32 values nibble - 8 (low nibbles are elements 0..15), 2 vectors.
  static void load_q4(const uint8_t* p, R* c) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
    c[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(b, m), e)));
    c[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), e)));
  }
  // Vectors u0, u0 + 1 (u0 = 0: the whole block, low then high nibbles) of a q4_0 block's values.
  static void load_q4_pair(const uint8_t* p, int64_t, R* c) { load_q4(p, c); }
  static float h2f(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }
  // 16 int8 -> floats.
  static R load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void store_h_n(uint16_t* p, R x, int64_t n) {
    alignas(32) uint16_t tmp[16];
    store_h(tmp, x);
    std::memcpy(p, tmp, static_cast<size_t>(n) * 2);
  }
};

}  // namespace

TERN_AVX512_BEGIN
const Kernels& kernels_avx512() {
  // delta_chunk_min: never; the recurrence measured faster at every length (table in delta_rule.h).
  static const Kernels k = make_kernels<V16>(Isa::kAvx512, int64_t{1} << 40);
  return k;
}
TERN_AVX512_END

}  // namespace tern::ops
