// AVX-512 kernels of the compute-peak probe (core/peak_kernels.h): VNNI vpdpbusd for int8, zmm FMA for fp32.
// Compiled with TERN_AVX512_FLAGS; reached only after cpu_features() says avx512f/bw/vl/dq (and vnni for int8).
// The empty asms (at most 15 in-out operands each) take the input and every accumulator each iteration: without it GCC 12 merged the 16 vpdpbusd
// chains into one (they start equal and see equal inputs).
#include <immintrin.h>

#include <cstring>

#include "core/peak_kernels.h"

namespace tern::peak {
namespace {
template <typename V, typename T, int N>
double sum_lanes(const V (&v)[N]) {
  double s = 0;
  for (const V& x : v) {
    alignas(64) T l[sizeof(V) / sizeof(T)];
    std::memcpy(l, &x, sizeof x);
    for (T e : l) s += e;
  }
  return s;
}
}  // namespace

// 16 chains: vpdpbusd's latency (5 cycles) x up to 2 ports needs at least 10 in flight.
double int8_avx512vnni(int64_t iters) {
  const __m512i b = _mm512_set1_epi8(1);
  __m512i a = _mm512_set1_epi8(1);
  __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0,
          c9 = c0, c10 = c0, c11 = c0, c12 = c0, c13 = c0, c14 = c0, c15 = c0;
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+v"(a), "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7));
    __asm__ volatile("" : "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11), "+v"(c12), "+v"(c13), "+v"(c14), "+v"(c15));
    c0 = _mm512_dpbusd_epi32(c0, a, b), c1 = _mm512_dpbusd_epi32(c1, a, b);
    c2 = _mm512_dpbusd_epi32(c2, a, b), c3 = _mm512_dpbusd_epi32(c3, a, b);
    c4 = _mm512_dpbusd_epi32(c4, a, b), c5 = _mm512_dpbusd_epi32(c5, a, b);
    c6 = _mm512_dpbusd_epi32(c6, a, b), c7 = _mm512_dpbusd_epi32(c7, a, b);
    c8 = _mm512_dpbusd_epi32(c8, a, b), c9 = _mm512_dpbusd_epi32(c9, a, b);
    c10 = _mm512_dpbusd_epi32(c10, a, b), c11 = _mm512_dpbusd_epi32(c11, a, b);
    c12 = _mm512_dpbusd_epi32(c12, a, b), c13 = _mm512_dpbusd_epi32(c13, a, b);
    c14 = _mm512_dpbusd_epi32(c14, a, b), c15 = _mm512_dpbusd_epi32(c15, a, b);
  }
  const __m512i c[] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15};
  return sum_lanes<__m512i, int32_t>(c);
}

// 24 chains (of 32 zmm registers): FMA latency 4 x 2 ports needs 8; more covers parts with longer latency.
double fp32_avx512(int64_t iters) {
  const __m512 b = _mm512_set1_ps(1.0f);
  __m512 a = _mm512_set1_ps(1.0f);
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0,
         c10 = c0, c11 = c0, c12 = c0, c13 = c0, c14 = c0, c15 = c0, c16 = c0, c17 = c0, c18 = c0, c19 = c0,
         c20 = c0, c21 = c0, c22 = c0, c23 = c0;
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+v"(a), "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7),
                     "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
    __asm__ volatile("" : "+v"(c12), "+v"(c13), "+v"(c14), "+v"(c15), "+v"(c16), "+v"(c17), "+v"(c18), "+v"(c19),
                     "+v"(c20), "+v"(c21), "+v"(c22), "+v"(c23));
    c0 = _mm512_fmadd_ps(a, b, c0), c1 = _mm512_fmadd_ps(a, b, c1), c2 = _mm512_fmadd_ps(a, b, c2);
    c3 = _mm512_fmadd_ps(a, b, c3), c4 = _mm512_fmadd_ps(a, b, c4), c5 = _mm512_fmadd_ps(a, b, c5);
    c6 = _mm512_fmadd_ps(a, b, c6), c7 = _mm512_fmadd_ps(a, b, c7), c8 = _mm512_fmadd_ps(a, b, c8);
    c9 = _mm512_fmadd_ps(a, b, c9), c10 = _mm512_fmadd_ps(a, b, c10), c11 = _mm512_fmadd_ps(a, b, c11);
    c12 = _mm512_fmadd_ps(a, b, c12), c13 = _mm512_fmadd_ps(a, b, c13), c14 = _mm512_fmadd_ps(a, b, c14);
    c15 = _mm512_fmadd_ps(a, b, c15), c16 = _mm512_fmadd_ps(a, b, c16), c17 = _mm512_fmadd_ps(a, b, c17);
    c18 = _mm512_fmadd_ps(a, b, c18), c19 = _mm512_fmadd_ps(a, b, c19), c20 = _mm512_fmadd_ps(a, b, c20);
    c21 = _mm512_fmadd_ps(a, b, c21), c22 = _mm512_fmadd_ps(a, b, c22), c23 = _mm512_fmadd_ps(a, b, c23);
  }
  const __m512 c[] = {c0,  c1,  c2,  c3,  c4,  c5,  c6,  c7,  c8,  c9,  c10, c11,
                      c12, c13, c14, c15, c16, c17, c18, c19, c20, c21, c22, c23};
  return sum_lanes<__m512, float>(c);
}

}  // namespace tern::peak
