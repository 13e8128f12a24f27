// 512-bit repacked (x8) gemm kernels for AVX-512 VNNI, for the types prefill spends its time in (Q4_0, Q8_0, Q4_K,
// Q5_K, Q6_K): two neighbouring groups of 8 rows side by side in one zmm (lanes 0-7 group g, 8-15 group g + 1), so one
// broadcast activation piece and one vpdpbusd serve 16 rows where the 256-bit kernels (simd_repack.h) serve 8.
// The x8 layout is unchanged (a zmm is two 32-byte loads), and every lane runs the 256-bit kernel's exact sequence
// of integer sums and float steps, so the results are the ref's bits (repack.h). Included by the AVX-512 unit only
// (core/avx512.h first: natively, or as its SIMDe twin).
#pragma once
#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/repack.h"
#include "quant/repack_impl.h"

namespace tern::quant {
namespace {
namespace x16k {

inline __m512i load2(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
}
inline __m128i load8x2(const uint8_t* p0, const uint8_t* p1) {  // 8 bytes of each group
  return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1)));
}
inline __m256i load16x2(const uint8_t* p0, const uint8_t* p1) {  // 16 bytes of each group
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)), 1);
}
inline __m512 load_h16(const uint8_t* p0, const uint8_t* p1) {  // 8 fp16 of each group -> 16 f32
  return _mm512_cvtph_ps(load16x2(p0, p1));
}
inline __m512i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
inline __m512i b8(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }
inline __m512i times(const int32_t& s, unsigned shift) { return _mm512_slli_epi32(_mm512_set1_epi32(s), shift); }
inline void prefetch(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
template <size_t kBlock, int kSteps>
inline void prefetch_ahead(const uint8_t* g0, const uint8_t* g1, int i) {  // as x8k::prefetch_ahead, both groups
  constexpr size_t kLines = (kBlock + 63) / 64, kPer = (kLines + kSteps - 1) / kSteps;
  for (size_t l = kPer * i; l < kPer * (i + 1) && l < kLines; ++l)
    prefetch(g0 + 2 * kBlock + 64 * l), prefetch(g1 + 2 * kBlock + 64 * l);
}
constexpr int kPrefetch = 1024;

// ---- Q4_0 (x8k::q4_0): unsigned nibbles, 8 * sum x out per block.
template <int NT>
void q4_0(const uint8_t* g0, const uint8_t* g1, int64_t nb, const uint8_t* const* xr, __m512* acc) {
  const __m512i m4 = b8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g0 += x8::kQ4_0_block, g1 += x8::kQ4_0_block) {
    for (int l = 0; l < 3; ++l) prefetch(g0 + kPrefetch + 64 * l), prefetch(g1 + kPrefetch + 64 * l);
    const __m512 dw = load_h16(g0, g1);
    __m512i s[NT];
    for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      const __m512i raw = load2(g0 + x8::kQ4_0_qs + 32 * k, g1 + x8::kQ4_0_qs + 32 * k);
      const __m512i lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      for (int t = 0; t < NT; ++t) {
        const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
        s[t] = _mm512_dpbusd_epi32(s[t], lo, bcast4(x->qs + 4 * k));
        s[t] = _mm512_dpbusd_epi32(s[t], hi, bcast4(x->qs + 16 + 4 * k));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
      const __m512i isum = _mm512_sub_epi32(s[t], times(x->s, 3));
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(x->d));
      acc[t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[t]);
    }
  }
}

// ---- Q8_0 (x8k::q8_0, VNNI): w + 128 unsigned, 128 * sum x out per block.
template <int NT>
void q8_0(const uint8_t* g0, const uint8_t* g1, int64_t nb, const uint8_t* const* xr, __m512* acc) {
  for (int64_t b = 0; b < nb; ++b, g0 += x8::kQ8_0_block, g1 += x8::kQ8_0_block) {
    for (int l = 0; l < 5; ++l) prefetch(g0 + kPrefetch + 64 * l), prefetch(g1 + kPrefetch + 64 * l);
    const __m512 dw = load_h16(g0, g1);
    __m512i s[NT];
    for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) {
      const __m512i u = _mm512_xor_si512(load2(g0 + x8::kQ8_0_qs + 32 * k, g1 + x8::kQ8_0_qs + 32 * k), b8(0x80));
      for (int t = 0; t < NT; ++t)
        s[t] = _mm512_dpbusd_epi32(s[t], u, bcast4(reinterpret_cast<const BlockQ8_0S*>(xr[t])[b].qs + 4 * k));
    }
    for (int t = 0; t < NT; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
      const __m512i isum = _mm512_sub_epi32(s[t], times(x->s, 7));
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(x->d));
      acc[t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[t]);
    }
  }
}

// ---- Q4_K / Q5_K (x8k::k4, VNNI): per sub-block an int32 sum times its scale; mins from bsums. Q5_K's fifth bit
// of sub-block `sub` is bit `sub` of each qh byte (shifted in 16-bit lanes: each byte's own bit lands at bit 4).
template <int NT, bool kQ5>
void k4(const uint8_t* g0, const uint8_t* g1, int64_t nb, const uint8_t* const* xr, __m512* acc) {
  constexpr size_t kBlock = kQ5 ? x8::kQ5_K_block : x8::kQ4_K_block;
  constexpr size_t kQs = kQ5 ? x8::kQ5_K_qs : x8::kQ4_K_qs;
  const __m512i m4 = b8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g0 += kBlock, g1 += kBlock) {
    __m512i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
    for (int sub = 0; sub < 8; ++sub) {
      const int j = sub >> 1;
      const unsigned shift = 4 * (sub & 1);
      prefetch_ahead<kBlock, 8>(g0, g1, sub);
      const __m512i sc = _mm512_cvtepu8_epi32(load8x2(g0 + x8::kQ4_K_sc + 8 * sub, g1 + x8::kQ4_K_sc + 8 * sub));
      __m512i s[NT];
      for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        const size_t p = kQs + 32 * (8 * j + k);
        __m512i q = _mm512_and_si512(_mm512_srli_epi16(load2(g0 + p, g1 + p), shift), m4);
        if constexpr (kQ5) {
          const size_t ph = x8::kQ5_K_qh + 32 * k;
          const __m512i qh = load2(g0 + ph, g1 + ph);
          q = _mm512_or_si512(q, _mm512_and_si512(_mm512_slli_epi16(_mm512_srli_epi16(qh, sub), 4), b8(0x10)));
        }
        for (int t = 0; t < NT; ++t)
          s[t] = _mm512_dpbusd_epi32(s[t], q, bcast4(reinterpret_cast<const BlockQ8_K*>(xr[t])[b].qs + 32 * sub + 4 * k));
      }
      for (int t = 0; t < NT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t], sc));
    }
    const __m512 d = load_h16(g0, g1), dmin = load_h16(g0 + x8::kQ4_K_dmin, g1 + x8::kQ4_K_dmin);
    __m512i mn[4];
    for (int p = 0; p < 4; ++p) mn[p] = _mm512_cvtepu8_epi16(load16x2(g0 + x8::kQ4_K_mn + 16 * p, g1 + x8::kQ4_K_mn + 16 * p));
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& x = reinterpret_cast<const BlockQ8_K*>(xr[t])[b];
      __m512i msum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const int32_t lo = x.bsums[4 * p] + x.bsums[4 * p + 1], hi = x.bsums[4 * p + 2] + x.bsums[4 * p + 3];
        const __m512i bs = _mm512_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(hi) << 16) | (lo & 0xFFFF)));
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mn[p], bs));
      }
      const __m512 dx = _mm512_set1_ps(x.d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
}

// ---- Q6_K (x8k::q6_k, VNNI): each quarter's sum starts at -32 * bsum_j, then one multiply by its scale.
template <int NT>
void q6_k(const uint8_t* g0, const uint8_t* g1, int64_t nb, const uint8_t* const* xr, __m512* acc) {
  const __m512i m4 = b8(0x0F), m30 = b8(0x30);
  for (int64_t b = 0; b < nb; ++b, g0 += x8::kQ6_K_block, g1 += x8::kQ6_K_block) {
    __m512i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h)
      for (int kh = 0; kh < 2; ++kh) {
        __m512i s[4][NT];
        for (int q = 0; q < 4; ++q)
          for (int t = 0; t < NT; ++t)
            s[q][t] = _mm512_set1_epi32(-32 * reinterpret_cast<const BlockQ8_K*>(xr[t])[b].bsums[8 * h + 2 * q + kh]);
        for (int k = 4 * kh; k < 4 * kh + 4; ++k) {
          const size_t pl = x8::kQ6_K_ql + 32 * (16 * h + k), ph = x8::kQ6_K_qh + 32 * (8 * h + k);
          prefetch_ahead<x8::kQ6_K_block, 16>(g0, g1, 8 * h + k);
          const __m512i ql0 = load2(g0 + pl, g1 + pl), ql1 = load2(g0 + pl + 256, g1 + pl + 256);
          const __m512i qh = load2(g0 + ph, g1 + ph);
          __m512i v[4];
          v[0] = _mm512_or_si512(_mm512_and_si512(ql0, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
          v[1] = _mm512_or_si512(_mm512_and_si512(ql1, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30));
          v[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), m4), _mm512_and_si512(qh, m30));
          v[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), m4),
                                 _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30));
          for (int t = 0; t < NT; ++t) {
            const int8_t* xq = reinterpret_cast<const BlockQ8_K*>(xr[t])[b].qs + 128 * h + 4 * k;
            for (int q = 0; q < 4; ++q) s[q][t] = _mm512_dpbusd_epi32(s[q][t], v[q], bcast4(xq + 32 * q));
          }
        }
        for (int q = 0; q < 4; ++q) {
          const size_t o = x8::kQ6_K_sc + 8 * (8 * h + 2 * q + kh);
          const __m512i sc = _mm512_cvtepi8_epi32(load8x2(g0 + o, g1 + o));
          for (int t = 0; t < NT; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[q][t], sc));
        }
      }
    const __m512 d = load_h16(g0, g1);
    for (int t = 0; t < NT; ++t) {
      const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(reinterpret_cast<const BlockQ8_K*>(xr[t])[b].d));
      acc[t] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
  }
}

template <Type kW>
constexpr bool kHas =
    kW == Type::Q4_0 || kW == Type::Q8_0 || kW == Type::Q4_K || kW == Type::Q5_K || kW == Type::Q6_K;

// Tokens per tile of the pair kernels: 8, so that a weight decode and the scale loads serve 8 tokens (measured on
// Zen 4 against tiles of 4: 2048x2048 and 512x2048, 16 tokens at two threads 1.11-1.24x for Q4_0, Q8_0, Q4_K; 64
// tokens at one thread 1.03-1.07x). Q6_K's four sums per token would take 4 x 8 of the 32 zmm registers, so it
// runs a tile as sub-tiles of 4 (kSub).
constexpr int kTile = 8;
template <Type kW>
constexpr int kSub = kW == Type::Q6_K ? 4 : kTile;

template <Type kW, int NT>
void pair(const uint8_t* g0, const uint8_t* g1, int64_t nb, const uint8_t* const* xr, __m512* acc) {
  if constexpr (kW == Type::Q4_0) q4_0<NT>(g0, g1, nb, xr, acc);
  else if constexpr (kW == Type::Q8_0) q8_0<NT>(g0, g1, nb, xr, acc);
  else if constexpr (kW == Type::Q4_K) k4<NT, false>(g0, g1, nb, xr, acc);
  else if constexpr (kW == Type::Q5_K) k4<NT, true>(g0, g1, nb, xr, acc);
  else q6_k<NT>(g0, g1, nb, xr, acc);
}

template <Type kW, int NT>
void pair_tile(const uint8_t* g0, const uint8_t* g1, int64_t nb, const uint8_t* const* xr, __m512* acc) {
  if constexpr (NT > kSub<kW>) {
    pair<kW, kSub<kW>>(g0, g1, nb, xr, acc);
    pair_tile<kW, NT - kSub<kW>>(g0, g1, nb, xr + kSub<kW>, acc + kSub<kW>);
  } else {
    pair<kW, NT>(g0, g1, nb, xr, acc);
  }
}

// The full pairs of groups from a.g_begin on, for the nt (<= kTile) tokens of one tile starting at token t0;
// returns the first group left to the 256-bit kernel (an odd last group, or one with rows past n_rows).
template <Type kW>
int64_t pairs(const RepackArgs& a, int64_t t0, int nt, const uint8_t* const* xr) {
  int64_t gi = a.g_begin;
  // One token (decode): the 256-bit kernel over one group at a time is faster (measured on Zen 4, 2048x2048 and
  // 512x2048, one thread: Q4_0 1.4x, Q8_0 1.2x, Q4_K 1.55x, Q6_K 1.75x; two threads 0.94-1.09x), so pairs are for
  // several tokens only. Two tokens (a speculative verify of one draft) too, but for Q8_0: at two threads the 256-bit
  // kernel is 1.10-1.22x (Q4_0), 1.18-1.43x (Q4_K), 0.93-1.11x (Q6_K) and 0.82-0.96x (Q8_0) the pairs' speed; from
  // three tokens the pairs tie or win at two threads (docs/BENCHMARKS.md, "AVX-512 pairs at 2-4 tokens").
  if (nt == 1 || (nt == 2 && kW != Type::Q8_0)) return gi;
  if constexpr (kHas<kW>) {
    const int64_t nb = a.n_blocks;
    for (; gi + 1 < a.g_end && (gi + 2) * kRepackRows <= a.n_rows; gi += 2) {
      const uint8_t* g0 = a.w + gi * a.group_bytes;
      const uint8_t* g1 = g0 + a.group_bytes;
      __m512 acc[kTile];
      for (int k = 0; k < kTile; ++k) acc[k] = _mm512_setzero_ps();
      switch (nt) {
        case 2: pair_tile<kW, 2>(g0, g1, nb, xr, acc); break;
        case 3: pair_tile<kW, 3>(g0, g1, nb, xr, acc); break;
        case 4: pair_tile<kW, 4>(g0, g1, nb, xr, acc); break;
        case 5: pair_tile<kW, 5>(g0, g1, nb, xr, acc); break;
        case 6: pair_tile<kW, 6>(g0, g1, nb, xr, acc); break;
        case 7: pair_tile<kW, 7>(g0, g1, nb, xr, acc); break;
        default: pair_tile<kW, 8>(g0, g1, nb, xr, acc); break;
      }
      for (int k = 0; k < nt; ++k) _mm512_storeu_ps(a.y + (t0 + k) * a.ldy + (gi * kRepackRows - a.y_col0), acc[k]);
    }
  }
  return gi;
}

}  // namespace x16k
}  // namespace
}  // namespace tern::quant
