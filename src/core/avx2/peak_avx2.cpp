// AVX2 (+FMA) kernels of the compute-peak probe (core/peak_kernels.h). Compiled with TERN_AVX2_FLAGS; reached only
// after cpu_features() says avx2 and fma. The empty asm takes inputs and accumulators each round: without it GCC
// hoists the loop-invariant products, merges chains it proves equal, or reassociates and spills the sums.
#include <immintrin.h>

#include <cstring>

#include "core/peak_kernels.h"

namespace tern::peak {
namespace {
template <typename V, typename T, int N>
double sum_lanes(const V (&v)[N]) {
  double s = 0;
  for (const V& x : v) {
    alignas(32) T l[sizeof(V) / sizeof(T)];
    std::memcpy(l, &x, sizeof x);
    for (T e : l) s += e;
  }
  return s;
}
}  // namespace

// The sequence quantized AVX2 dot products use per 32 bytes (llama.cpp's mul_sum_us8_pairs_float, tern's
// OpsAvx2::dot): u8 x s8 pairs to int16, int16 pairs to int32 against ones, int32 add into the accumulator.
double int8_avx2(int64_t iters) {
  const __m256i b = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
  __m256i a0 = _mm256_set1_epi8(1), a1 = a0, a2 = a0, a3 = a0;
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
  for (int64_t i = 0; i < iters; ++i) {
    for (int r = 0; r < 3; ++r) {
      __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3));
      c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(a0, b), ones));
      c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(a1, b), ones));
      c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(_mm256_maddubs_epi16(a2, b), ones));
      c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(_mm256_maddubs_epi16(a3, b), ones));
    }
  }
  const __m256i c[] = {c0, c1, c2, c3};
  return sum_lanes<__m256i, int32_t>(c);
}

// 12 chains: FMA latency (4-5 cycles) x 2 ports needs at least 10 in flight.
double fp32_avx2(int64_t iters) {
  const __m256 b = _mm256_set1_ps(1.0f);
  __m256 a = _mm256_set1_ps(1.0f);
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0,
         c10 = c0, c11 = c0;
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+x"(a), "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7),
                     "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));
    c0 = _mm256_fmadd_ps(a, b, c0), c1 = _mm256_fmadd_ps(a, b, c1), c2 = _mm256_fmadd_ps(a, b, c2);
    c3 = _mm256_fmadd_ps(a, b, c3), c4 = _mm256_fmadd_ps(a, b, c4), c5 = _mm256_fmadd_ps(a, b, c5);
    c6 = _mm256_fmadd_ps(a, b, c6), c7 = _mm256_fmadd_ps(a, b, c7), c8 = _mm256_fmadd_ps(a, b, c8);
    c9 = _mm256_fmadd_ps(a, b, c9), c10 = _mm256_fmadd_ps(a, b, c10), c11 = _mm256_fmadd_ps(a, b, c11);
  }
  const __m256 c[] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11};
  return sum_lanes<__m256, float>(c);
}

}  // namespace tern::peak
