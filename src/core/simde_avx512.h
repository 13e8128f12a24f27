// The SIMDe twin's view of the AVX-512 intrinsics (only included under TERN_SIMDE, by core/avx512.h): SIMDe's
// native aliases turn every _mm512_* / AVX512VL / VNNI name into portable code (on AVX2 underneath), so the
// unchanged AVX-512 source compiles for a host without AVX-512. Below: intrinsics tern uses that Debian 12's SIMDe
// (0.7.4) lacks, written from Intel's pseudo-code; each steps aside when the installed SIMDe defines it.
// Non-goal: speed. Correctness of these few lines is what the twin's tests rest on, so they stay scalar and plain.
#pragma once
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

#include <cstdint>

namespace tern::simde_extra {

// Intel's REDUCE_ADD / REDUCE_MAX: lanes j and j+len added (maxed) for len = 8, 4, 2, 1 (GCC's order as well).
static inline float mm512_reduce_add_ps(simde__m512 a) {
  simde__m512_private p = simde__m512_to_private(a);
  for (int len = 8; len >= 1; len /= 2)
    for (int j = 0; j < len; ++j) p.f32[j] = p.f32[j] + p.f32[j + len];
  return p.f32[0];
}
static inline float mm512_reduce_max_ps(simde__m512 a) {
  simde__m512_private p = simde__m512_to_private(a);
  for (int len = 8; len >= 1; len /= 2)
    for (int j = 0; j < len; ++j) p.f32[j] = p.f32[j] > p.f32[j + len] ? p.f32[j] : p.f32[j + len];
  return p.f32[0];
}

// Masked loads read only the selected lanes (as the hardware: masked-off lanes never fault), so ASan in the
// sanitizer build checks the kernels' tail masks.
static inline simde__m512 mm512_maskz_loadu_ps(simde__mmask16 k, const void* mem) {
  const float* src = static_cast<const float*>(mem);
  simde__m512_private r;
  for (int i = 0; i < 16; ++i) r.f32[i] = (k >> i) & 1 ? src[i] : 0.0f;
  return simde__m512_from_private(r);
}
static inline simde__m256i mm256_maskz_loadu_epi16(simde__mmask16 k, const void* mem) {
  const int16_t* src = static_cast<const int16_t*>(mem);
  simde__m256i_private r;
  for (int i = 0; i < 16; ++i) r.i16[i] = (k >> i) & 1 ? src[i] : int16_t{0};
  return simde__m256i_from_private(r);
}

// Lane-wise conversions: the 256-bit form on each half.
static inline simde__m512 mm512_cvtph_ps(simde__m256i a) {
  simde__m512_private r;
  r.m256[0] = simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(a, 0));
  r.m256[1] = simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(a, 1));
  return simde__m512_from_private(r);
}
static inline simde__m512i mm512_cvtepu16_epi32(simde__m256i a) {
  simde__m512i_private r;
  r.m256i[0] = simde_mm256_cvtepu16_epi32(simde_mm256_extracti128_si256(a, 0));
  r.m256i[1] = simde_mm256_cvtepu16_epi32(simde_mm256_extracti128_si256(a, 1));
  return simde__m512i_from_private(r);
}
static inline simde__m512i mm512_cvtepu8_epi16(simde__m256i a) {
  simde__m512i_private r;
  r.m256i[0] = simde_mm256_cvtepu8_epi16(simde_mm256_extracti128_si256(a, 0));
  r.m256i[1] = simde_mm256_cvtepu8_epi16(simde_mm256_extracti128_si256(a, 1));
  return simde__m512i_from_private(r);
}
static inline simde__m512i mm512_cvtepu8_epi32(simde__m128i a) {
  simde__m512i_private r;
  r.m256i[0] = simde_mm256_cvtepu8_epi32(a);
  r.m256i[1] = simde_mm256_cvtepu8_epi32(simde_mm_srli_si128(a, 8));
  return simde__m512i_from_private(r);
}
static inline simde__m512i mm512_cvtepi8_epi32(simde__m128i a) {
  simde__m512i_private r;
  r.m256i[0] = simde_mm256_cvtepi8_epi32(a);
  r.m256i[1] = simde_mm256_cvtepi8_epi32(simde_mm_srli_si128(a, 8));
  return simde__m512i_from_private(r);
}
static inline simde__m512 mm512_cvtepi32_ps(simde__m512i a) {
  const simde__m512i_private p = simde__m512i_to_private(a);
  simde__m512_private r;
  r.m256[0] = simde_mm256_cvtepi32_ps(p.m256i[0]);
  r.m256[1] = simde_mm256_cvtepi32_ps(p.m256i[1]);
  return simde__m512_from_private(r);
}
static inline simde__m512i mm512_cvtps_epi32(simde__m512 a) {  // rounds as MXCSR says (nearest even)
  const simde__m512_private p = simde__m512_to_private(a);
  simde__m512i_private r;
  r.m256i[0] = simde_mm256_cvtps_epi32(p.m256[0]);
  r.m256i[1] = simde_mm256_cvtps_epi32(p.m256[1]);
  return simde__m512i_from_private(r);
}

}  // namespace tern::simde_extra

#ifndef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(a) ::tern::simde_extra::mm512_reduce_add_ps(a)
#endif
#ifndef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps(a) ::tern::simde_extra::mm512_reduce_max_ps(a)
#endif
#ifndef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, mem) ::tern::simde_extra::mm512_maskz_loadu_ps(k, mem)
#endif
#ifndef _mm256_maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16(k, mem) ::tern::simde_extra::mm256_maskz_loadu_epi16(k, mem)
#endif
#ifndef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) ::tern::simde_extra::mm512_cvtph_ps(a)
#endif
#ifndef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(a) ::tern::simde_extra::mm512_cvtepu16_epi32(a)
#endif
// SIMDe 0.7.4's alias of _mm512_madd_epi16 takes the masked form's four arguments (a typo upstream).
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
#ifndef _mm512_cvtepu8_epi16
#define _mm512_cvtepu8_epi16(a) ::tern::simde_extra::mm512_cvtepu8_epi16(a)
#endif
#ifndef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32(a) ::tern::simde_extra::mm512_cvtepu8_epi32(a)
#endif
#ifndef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32(a) ::tern::simde_extra::mm512_cvtepi8_epi32(a)
#endif
#ifndef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(a) ::tern::simde_extra::mm512_cvtepi32_ps(a)
#endif
#ifndef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(a) ::tern::simde_extra::mm512_cvtps_epi32(a)
#endif
