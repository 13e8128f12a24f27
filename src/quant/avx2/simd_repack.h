// 256-bit repacked (x8) gemm kernels, shared by the AVX2 and AVX-512 translation units: one 32-byte vector
// holds the same 4-byte piece of 8 rows, the activation's matching 4 bytes are broadcast, and u8 x s8 products
// land in one int32 lane per row (no horizontal sums). AVX-512 (Ops::kVnni) sums with vpdpbusd; AVX2 with
// maddubs into int16 (bounded: see each kernel) and one madd. Integer sums are exact, the float steps are the
// ref's (repack.h), so every ISA gives the ref's bits. Internal linkage: each ISA's unit keeps its own copy.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels_impl.h"
#include "quant/repack.h"
#include "quant/repack_impl.h"

namespace tern::quant {
namespace {
namespace x8k {

constexpr int kTile = 4;  // tokens per weight decode (register budget: 16 ymm)
constexpr int kPrefetch = 1024;  // bytes ahead of the current block

inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256 load_h8(const uint8_t* p) {  // 8 fp16 -> 8 f32
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// The int32 s << shift in every lane: a broadcast load and a vector shift (no scalar multiply and GPR move).
inline __m256i times(const int32_t& s, int shift) {
  return _mm256_slli_epi32(_mm256_set1_epi32(s), shift);
}
inline __m256i b8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }
// A prefetch stays where the code puts it: a volatile asm, which GCC's instruction scheduler treats as a barrier.
// The intrinsic let it hoist all of an unrolled super-block's prefetches to its start, a burst that filled the
// miss queue ahead of the demand loads (measured: Q4_K decode on one thread 17.7 -> 13.1 GB/s, Q6_K 18.5 ->
// 11.6). No memory clobber: that made the accumulators behind `acc` go through memory at every prefetch (Q8_0
// prefill ~-8%).
inline void prefetch(const uint8_t* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }
// Super-block kernels walk a block out of order (scales, then pieces by sub-block), which the hardware
// prefetcher follows poorly: step i of a block's n steps prefetches its share of the block two ahead, in order
// (measured: Q6_K from 10.9 to 22 GB/s at 2 threads).
template <size_t kBlock, int kSteps>
inline void prefetch_ahead(const uint8_t* g, int i) {
  constexpr size_t kLines = (kBlock + 63) / 64, kPer = (kLines + kSteps - 1) / kSteps;
  for (size_t l = kPer * i; l < kPer * (i + 1) && l < kLines; ++l) prefetch(g + 2 * kBlock + 64 * l);
}

// 8 per-row 8-bit scales -> lanes (s, s) of int16, the multiplier madd needs. Unsigned (K4) or signed (Q6_K).
inline __m256i dup_u8(const uint8_t* p) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}
inline __m256i dup_i8(const uint8_t* p) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

inline __m256i pair16(int32_t lo, int32_t hi) {  // int32 lanes of the int16 pair (lo, hi)
  return _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(hi) << 16) | (lo & 0xFFFF)));
}

// An accumulator kept in a register at this point: GCC otherwise reassociates a chain of integer vector adds
// into all products first and one sum at the end, which needs a register per product and spills (measured: the
// Q4_K kernel's int16 sums went through the stack). No instruction; only the integer sums' association changes,
// and those are exact.
inline void pin(__m256i& v) { asm("" : "+x"(v)); }

// Sums of u8 x s8 products per row lane. AVX2: maddubs pairs accumulated in int16 (the caller bounds how many),
// widened by madd; VNNI: dpbusd straight into int32.
template <class Ops>
struct Acc {
  __m256i v = _mm256_setzero_si256();
  void add(__m256i u, __m256i s) {
    if constexpr (Ops::kVnni) v = Ops::dpbusd(v, u, s);
    else {
      v = _mm256_add_epi16(v, _mm256_maddubs_epi16(u, s));
      pin(v);
    }
  }
  __m256i i32() const {
    if constexpr (Ops::kVnni) return v;
    else return _mm256_madd_epi16(v, _mm256_set1_epi16(1));
  }
  // int32 lanes of sum * scale, where `sc` holds (s, s) int16 pairs; AVX2 only keeps int16 partial sums.
  __m256i scaled(__m256i sc) const {
    if constexpr (Ops::kVnni) return _mm256_mullo_epi32(v, _mm256_srai_epi32(_mm256_slli_epi32(sc, 16), 16));
    else return _mm256_madd_epi16(v, sc);
  }
};

// ---- Q4_0: 4 pieces of 8 nibble pairs per block; int16 sums of 8 maddubs stay <= 8 * 2 * 15 * 127 = 30480.
template <class Ops, int NT>
void q4_0(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  const __m256i m4 = b8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += x8::kQ4_0_block) {
    prefetch(g + kPrefetch), prefetch(g + kPrefetch + 64), prefetch(g + kPrefetch + 128);
    const __m256 dw = load_h8(g);
    Acc<Ops> s[NT];
    for (int k = 0; k < 4; ++k) {
      const __m256i raw = load(g + x8::kQ4_0_qs + 32 * k);
      const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      for (int t = 0; t < NT; ++t) {
        const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
        s[t].add(lo, bcast4(x->qs + 4 * k));
        s[t].add(hi, bcast4(x->qs + 16 + 4 * k));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
      const __m256i isum = _mm256_sub_epi32(s[t].i32(), times(x->s, 3));
      const __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(&x->d));
      acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[t]);
    }
  }
}

// ---- Q8_0: signed weights. VNNI: w + 128 as u8 (one xor per piece for all tokens), the offset taken out once
// per block as 128 * sum x. AVX2: |w| as u8 with the sign moved onto the activation (maddubs pairs of
// (w + 128) * x could reach 2 * 255 * 127 and saturate; |w| pairs stay <= 2 * 128 * 127).
template <class Ops, int NT>
void q8_0(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  for (int64_t b = 0; b < nb; ++b, g += x8::kQ8_0_block) {
    for (int l = 0; l < 5; ++l) prefetch(g + kPrefetch + 64 * l);
    const __m256 dw = load_h8(g);
    __m256i s[NT];
    for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i w = load(g + x8::kQ8_0_qs + 32 * k);
      if constexpr (Ops::kVnni) {
        const __m256i u = _mm256_xor_si256(w, b8(0x80));
        for (int t = 0; t < NT; ++t)
          s[t] = Ops::dpbusd(s[t], u, bcast4(reinterpret_cast<const BlockQ8_0S*>(xr[t])[b].qs + 4 * k));
      } else {
        const __m256i u = _mm256_sign_epi8(w, w);
        for (int t = 0; t < NT; ++t) {
          const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
          const __m256i xs = _mm256_sign_epi8(bcast4(x->qs + 4 * k), w);
          s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), _mm256_set1_epi16(1)));
          pin(s[t]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
      const __m256i isum = Ops::kVnni ? _mm256_sub_epi32(s[t], times(x->s, 7)) : s[t];
      const __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(&x->d));
      acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[t]);
    }
  }
}

// ---- Q4_K / Q5_K: per sub-block of 32 (8 pieces), int16 sums of 8 maddubs (Q4_K: <= 30480) or of 4 (Q5_K,
// values to 31: <= 4 * 2 * 31 * 127 = 31496), then madd with the sub-block's scale.
template <class Ops, int NT, bool kQ5>
void k4(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  constexpr size_t kBlock = kQ5 ? x8::kQ5_K_block : x8::kQ4_K_block;
  constexpr size_t kQs = kQ5 ? x8::kQ5_K_qs : x8::kQ4_K_qs;
  const __m256i m4 = b8(0x0F);
  for (int64_t b = 0; b < nb; ++b, g += kBlock) {
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    // Unrolled: constant piece offsets and shifts (a rolled loop spent a third of its scalar ops on addresses,
    // shifted even sub-blocks by 0 and ran the prefetch as a loop).
#pragma GCC unroll 8
    for (int sub = 0; sub < 8; ++sub) {
      const int j = sub >> 1, shift = 4 * (sub & 1);
      prefetch_ahead<kBlock, 8>(g, sub);
      const __m256i sc = dup_u8(g + x8::kQ4_K_sc + 8 * sub);
      for (int half = 0; half < (kQ5 ? 2 : 1); ++half) {
        const int k0 = kQ5 ? 4 * half : 0, k1 = kQ5 ? k0 + 4 : 8;
        Acc<Ops> s[NT];
        for (int k = k0; k < k1; ++k) {
          const uint8_t* p = g + kQs + 32 * (8 * j + k);
          __m256i q = _mm256_and_si256(_mm256_srli_epi16(load(p), shift), m4);
          if constexpr (kQ5) {
            const __m256i qh = load(g + x8::kQ5_K_qh + 32 * k);
            q = _mm256_or_si256(q, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, sub), 4), b8(0x10)));
          }
          for (int t = 0; t < NT; ++t)
            s[t].add(q, bcast4(reinterpret_cast<const BlockQ8_K*>(xr[t])[b].qs + 32 * sub + 4 * k));
        }
        for (int t = 0; t < NT; ++t) {
          isum[t] = _mm256_add_epi32(isum[t], s[t].scaled(sc));
          if constexpr (!Ops::kVnni) pin(isum[t]);
        }
      }
    }
    const __m256 d = load_h8(g), dmin = load_h8(g + x8::kQ4_K_dmin);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& x = reinterpret_cast<const BlockQ8_K*>(xr[t])[b];
      // The per-32 sums bs32_j = bsums[2j] + bsums[2j + 1] (|.| <= 4064) in vector registers: madd with ones,
      // packed back to int16, so int32 element e of `pk` holds the pair (bs32_2p, bs32_2p+1) for p = 0, 1, 2, 3
      // at e = 0, 1, 4, 5; one permute broadcasts it. (Scalar pairs cost ~30 general-register ops a token and
      // block, 13% of this kernel's samples in a Q4_K_M prefill.)
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
      const __m256i s32 = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
      const __m256i pk = _mm256_packs_epi32(s32, s32);
      __m256i msum = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + x8::kQ4_K_mn + 16 * p)));
        const __m256i pair = _mm256_permutevar8x32_epi32(pk, _mm256_set1_epi32(p < 2 ? p : p + 2));
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn, pair));
      }
      const __m256 dx = _mm256_set1_ps(x.d);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum), acc[t]);
    }
  }
}

// ---- Q6_K: for half h and piece k, four vectors a/b/c/d (elements 128h + 32q + 4k + i, q = 0..3) of values to
// 63; each maddubs is widened at once by madd with its 16-element sub-block's scale (pairs <= 2 * 63 * 127).
// Piece k of half h of one Q6_K block: the four vectors of 6-bit values (0..63) for quarters q = 0..3, and the
// prefetch of this step's share of the block two ahead.
inline void q6_k_piece(const uint8_t* g, int h, int k, __m256i v[4]) {
  const __m256i m4 = b8(0x0F), m30 = b8(0x30);
  const uint8_t* pl = g + x8::kQ6_K_ql + 32 * (16 * h + k);
  const uint8_t* ph = g + x8::kQ6_K_qh + 32 * (8 * h + k);
  prefetch_ahead<x8::kQ6_K_block, 16>(g, 8 * h + k);
  const __m256i ql0 = load(pl), ql1 = load(pl + 32 * 8), qh = load(ph);
  v[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
  v[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
  v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
}

// Quarter q of piece k of half h alone: the 6-bit values of elements 128h + 32q + 4k + i.
inline __m256i q6_k_quarter(const uint8_t* g, int h, int k, int q) {
  const __m256i ql = load(g + x8::kQ6_K_ql + 32 * (16 * h + k) + 32 * 8 * (q & 1));
  const __m256i qh = load(g + x8::kQ6_K_qh + 32 * (8 * h + k));
  const __m256i lo = _mm256_and_si256(q < 2 ? ql : _mm256_srli_epi16(ql, 4), b8(0x0F));
  const __m256i hi = q == 0 ? _mm256_slli_epi16(qh, 4)
                     : q == 1 ? _mm256_slli_epi16(qh, 2)
                     : q == 2 ? qh
                              : _mm256_srli_epi16(qh, 2);
  return _mm256_or_si256(lo, _mm256_and_si256(hi, b8(0x30)));
}

template <class Ops, int NT>
void q6_k(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  for (int64_t b = 0; b < nb; ++b, g += x8::kQ6_K_block) {
    // The -32 offset for all 16 sub-blocks first: madd of the scale pairs (sc_j, sc_j+1) of each row with the
    // token's (bsum_j, bsum_j+1), which sit side by side in Q8_K (one broadcast 4-byte load; the int32 pair sums
    // stay below 2 * 128 * 2048), times -32 once: isum starts at -32 * sum_j sc_j * bsum_j.
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 16; j += 2) {
      const __m256i sp = _mm256_cvtepi8_epi16(
          _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + x8::kQ6_K_sc + 8 * j)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + x8::kQ6_K_sc + 8 * j + 8))));
      for (int t = 0; t < NT; ++t)
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(sp, bcast4(reinterpret_cast<const BlockQ8_K*>(xr[t])[b].bsums + j)));
    }
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(isum[t], 5));
    if constexpr (Ops::kVnni) {
      // VNNI (32 registers): each quarter's 4 pieces summed by dpbusd into an int32 lane per row, then one
      // multiply by the sub-block's scale.
      for (int h = 0; h < 2; ++h)
        for (int kh = 0; kh < 2; ++kh) {
          __m256i s[4][NT];
          for (int q = 0; q < 4; ++q)
            for (int t = 0; t < NT; ++t) s[q][t] = _mm256_setzero_si256();
          for (int k = 4 * kh; k < 4 * kh + 4; ++k) {
            __m256i v[4];
            q6_k_piece(g, h, k, v);
            for (int t = 0; t < NT; ++t) {
              const int8_t* xq = reinterpret_cast<const BlockQ8_K*>(xr[t])[b].qs + 128 * h + 4 * k;
              for (int q = 0; q < 4; ++q) s[q][t] = Ops::dpbusd(s[q][t], v[q], bcast4(xq + 32 * q));
            }
          }
          for (int q = 0; q < 4; ++q) {
            const __m256i sc = _mm256_cvtepi8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + x8::kQ6_K_sc + 8 * (8 * h + 2 * q + kh))));
            for (int t = 0; t < NT; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s[q][t], sc));
          }
        }
    } else {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
        for (int kh = 0; kh < 2; ++kh) {
          __m256i sc[4];
          for (int q = 0; q < 4; ++q) sc[q] = dup_i8(g + x8::kQ6_K_sc + 8 * (8 * h + 2 * q + kh));
          // Two pieces at a time: their maddubs pairs (each <= 2 * 63 * 128 = 16128) summed in int16 stay below
          // 32768, so one madd with the scale widens both (5 ops per 2 products instead of 6). Quarter by quarter,
          // each decoded from memory, so that the tokens' sums stay in registers (all four quarters of two pieces
          // at once spilled them).
#pragma GCC unroll 2
          for (int k = 4 * kh; k < 4 * kh + 4; k += 2) {
            prefetch_ahead<x8::kQ6_K_block, 8>(g, 4 * h + k / 2);
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q) {
              const __m256i v0 = q6_k_quarter(g, h, k, q), v1 = q6_k_quarter(g, h, k + 1, q);
              for (int t = 0; t < NT; ++t) {
                const int8_t* xq = reinterpret_cast<const BlockQ8_K*>(xr[t])[b].qs + 128 * h + 4 * k + 32 * q;
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(v0, bcast4(xq)),
                                                   _mm256_maddubs_epi16(v1, bcast4(xq + 4)));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc[q]));
                pin(isum[t]);
              }
            }
          }
        }
    }
    const __m256 d = load_h8(g);
    for (int t = 0; t < NT; ++t) {
      const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(reinterpret_cast<const BlockQ8_K*>(xr[t])[b].d));
      acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum[t]), acc[t]);
    }
  }
}

// Sums of u8 x s8 products per row lane for runs longer than one int16 partial allows: AVX2 keeps an int16
// partial that the caller flushes (widens into int32) before its bound, VNNI sums straight into int32.
template <class Ops>
struct Acc32 {
  __m256i v32 = _mm256_setzero_si256(), v16 = _mm256_setzero_si256();
  void add(__m256i u, __m256i s) {
    if constexpr (Ops::kVnni) v32 = Ops::dpbusd(v32, u, s);
    else {
      v16 = _mm256_add_epi16(v16, _mm256_maddubs_epi16(u, s));
      pin(v16);
    }
  }
  void flush() {
    if constexpr (!Ops::kVnni) {
      v32 = _mm256_add_epi32(v32, _mm256_madd_epi16(v16, _mm256_set1_epi16(1)));
      v16 = _mm256_setzero_si256();
    }
  }
  __m256i i32() {
    flush();
    return v32;
  }
};

inline __m256i i8x8_to_i32(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The IQ4 code book in both 128-bit halves for pshufb: signed (AVX2) or plus 128 as u8 (VNNI, 1..241).
template <class Ops>
inline __m256i iq4_table() {
  const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kValuesIq4nl)));
  return Ops::kVnni ? _mm256_xor_si256(t, b8(0x80)) : t;
}

// One 32-byte vector v of IQ4 values (from iq4_table) against the broadcast activation piece xb, for the int32
// lanes of `sum`. AVX2: |v| times the activation with v's sign moved onto it (the Q8_0 trick); |v| <= 127 so a
// maddubs pair is <= 2 * 127 * 127 = 32258 and is widened at once, by madd with `mul` ((1, 1) or the
// sub-block's (sc, sc)). An unsigned offset (v + 128, to 241) would let pairs reach 2 * 241 * 127 = 61214 and
// saturate maddubs, hence the sign trick. VNNI: dpbusd has no int16 stage, so it takes v + 128 unsigned and
// the caller removes 128 * sum x, one op per token instead of three.
template <class Ops>
inline __m256i iq4_dot(__m256i sum, __m256i v, __m256i v_abs, __m256i xb, __m256i mul) {
  if constexpr (Ops::kVnni) return Ops::dpbusd(sum, v, xb);
  else return _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(v_abs, _mm256_sign_epi8(xb, v)), mul));
}

// ---- Q4_1 / Q5_0 / Q5_1: unsigned values (to 15 / 31), 4 pieces of nibble pairs per block; the Q5 types OR
// in bit 4 from the transposed qh word (repack.h) with one shift per half-piece. AVX2 int16 partials: Q4_1 8
// maddubs <= 8 * 2 * 15 * 127 = 30480; Q5 flushed after 4 maddubs, <= 4 * 2 * 31 * 127 = 31496.
template <class Ops, int NT, Type kW>
void b32u(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  constexpr bool kQ5 = kW != Type::Q4_1, kMin = kW != Type::Q5_0;
  constexpr size_t kBlock = kW == Type::Q4_1 ? x8::kQ4_1_block : kW == Type::Q5_0 ? x8::kQ5_0_block : x8::kQ5_1_block;
  constexpr size_t kQs = kW == Type::Q4_1 ? x8::kQ4_1_qs : kW == Type::Q5_0 ? x8::kQ5_0_qs : x8::kQ5_1_qs;
  constexpr size_t kQh = kW == Type::Q5_0 ? x8::kQ5_0_qh : x8::kQ5_1_qh;
  static_assert(x8::kQ4_1_m == x8::kQ5_1_m);
  const __m256i m4 = b8(0x0F), bit4 = b8(0x10);
  for (int64_t b = 0; b < nb; ++b, g += kBlock) {
    for (size_t l = 0; l < kBlock; l += 64) prefetch(g + kPrefetch + l);
    Acc32<Ops> s[NT];
    const __m256i qh = kQ5 ? load(g + kQh) : _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256i raw = load(g + kQs + 32 * k);
      __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kQ5) {  // bit 8i + k -> bit 4 of byte i (low nibbles); bit 8i + 4 + k -> bit 4 (high)
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4 - k), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(qh, k), bit4));
      }
      for (int t = 0; t < NT; ++t) {
        const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
        s[t].add(lo, bcast4(x->qs + 4 * k));
        s[t].add(hi, bcast4(x->qs + 16 + 4 * k));
        if (kQ5 && k == 1) s[t].flush();
      }
    }
    const __m256 dw = load_h8(g);
    for (int t = 0; t < NT; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
      __m256i isum = s[t].i32();
      if constexpr (kW == Type::Q5_0) isum = _mm256_sub_epi32(isum, times(x->s, 4));
      const __m256 dx = _mm256_broadcast_ss(&x->d);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc[t]);
      if constexpr (kMin)
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(load_h8(g + x8::kQ4_1_m), dx), _mm256_set1_ps(static_cast<float>(x->s)),
                                 acc[t]);
    }
  }
}

// ---- IQ4_NL: 4 pieces of nibble pairs per block through the code book (iq4_dot).
template <class Ops, int NT>
void iq4_nl(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  const __m256i m4 = b8(0x0F), tab = iq4_table<Ops>(), one = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b, g += x8::kIQ4_NL_block) {
    prefetch(g + kPrefetch), prefetch(g + kPrefetch + 64), prefetch(g + kPrefetch + 128);
    __m256i s[NT];
    for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256i raw = load(g + x8::kIQ4_NL_qs + 32 * k);
      const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(raw, m4));
      const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
      const __m256i lo_abs = _mm256_abs_epi8(lo), hi_abs = _mm256_abs_epi8(hi);  // unused with VNNI
      for (int t = 0; t < NT; ++t) {
        const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
        s[t] = iq4_dot<Ops>(s[t], lo, lo_abs, bcast4(x->qs + 4 * k), one);
        s[t] = iq4_dot<Ops>(s[t], hi, hi_abs, bcast4(x->qs + 16 + 4 * k), one);
      }
    }
    const __m256 dw = load_h8(g);
    for (int t = 0; t < NT; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0S*>(xr[t]) + b;
      __m256i isum = s[t];
      if constexpr (Ops::kVnni) isum = _mm256_sub_epi32(isum, times(x->s, 7));
      const __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(&x->d));
      acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[t]);
    }
  }
}

// ---- Q2_K / Q3_K: 16 pieces of 4 2-bit values (qs byte 32h + 4k + i, bits 2s: element 128h + 32s + 4k + i),
// so sub-block j = 8h + 2s + kh is pieces 8h + 4kh .. 8h + 4kh + 3 at shift 2s; Q3_K ORs in bit 4h + s of its
// hmask piece k as 4 (u = 0..7). Per sub-block, AVX2 int16 sums of 4 maddubs (Q2_K <= 4 * 2 * 3 * 127 = 3048,
// Q3_K <= 4 * 2 * 7 * 127 = 7112), then madd with the sub-block's scale. Q2_K's mins: madd of the (mn_2p,
// mn_2p+1) pairs with the bsum pair (<= 2 * 15 * 2032). Q3_K's -4: sc_j * (-2 bsum_j) twice per lane (madd).
template <class Ops, int NT, bool kQ3>
void k2(const uint8_t* g, const uint8_t* const* xr, __m256i* isum) {  // xr: this super-block of each token
  constexpr size_t kQs = kQ3 ? x8::kQ3_K_qs : x8::kQ2_K_qs, kSc = kQ3 ? x8::kQ3_K_sc : x8::kQ2_K_sc;
  const __m256i m3 = b8(3);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
    for (int kh = 0; kh < 2; ++kh) {
      prefetch_ahead<kQ3 ? x8::kQ3_K_block : x8::kQ2_K_block, 4>(g, 2 * h + kh);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int j = 8 * h + 2 * s + kh;
        __m256i sc;
        if constexpr (kQ3) {
          sc = dup_i8(g + kSc + 8 * j);
          for (int t = 0; t < NT; ++t) {
            const int32_t m2 = -2 * reinterpret_cast<const BlockQ8_K*>(xr[t])->bsums[j];
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(sc, pair16(m2, m2)));
          }
        } else {
          sc = _mm256_and_si256(dup_u8(g + kSc + 8 * j), _mm256_set1_epi32(0x000F000F));
        }
        Acc<Ops> a[NT];
        for (int k = 4 * kh; k < 4 * kh + 4; ++k) {
          __m256i q = _mm256_and_si256(_mm256_srli_epi16(load(g + kQs + 32 * (8 * h + k)), 2 * s), m3);
          if constexpr (kQ3) {
            const int bit = 4 * h + s;
            const __m256i hm = load(g + x8::kQ3_K_hm + 32 * k);
            const __m256i hb = bit >= 2 ? _mm256_srli_epi16(hm, bit - 2) : _mm256_slli_epi16(hm, 2 - bit);
            q = _mm256_or_si256(q, _mm256_and_si256(hb, b8(4)));
          }
          for (int t = 0; t < NT; ++t)
            a[t].add(q, bcast4(reinterpret_cast<const BlockQ8_K*>(xr[t])->qs + 128 * h + 32 * s + 4 * k));
        }
        for (int t = 0; t < NT; ++t) isum[t] = _mm256_add_epi32(isum[t], a[t].scaled(sc));
      }
    }
}

template <class Ops, int NT, bool kQ3>
void q2_q3_k(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  constexpr size_t kBlock = kQ3 ? x8::kQ3_K_block : x8::kQ2_K_block;
  for (int64_t b = 0; b < nb; ++b, g += kBlock) {
    const uint8_t* xb[NT];
    for (int t = 0; t < NT; ++t) xb[t] = xr[t] + b * sizeof(BlockQ8_K);
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    k2<Ops, NT, kQ3>(g, xb, isum);
    const __m256 d = load_h8(g);
    if constexpr (kQ3) {
      for (int t = 0; t < NT; ++t) {
        const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(reinterpret_cast<const BlockQ8_K*>(xb[t])->d));
        acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum[t]), acc[t]);
      }
    } else {
      __m256i msum[NT];
      for (int t = 0; t < NT; ++t) msum[t] = _mm256_setzero_si256();
      for (int p = 0; p < 8; ++p) {  // bytes of sub-blocks 2p and 2p + 1 -> (mn_2p, mn_2p+1) per row
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + x8::kQ2_K_sc + 16 * p));
        const __m128i il = _mm_unpacklo_epi8(v, _mm_srli_si128(v, 8));
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(il, 4), _mm_set1_epi8(0x0F)));
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_K& x = *reinterpret_cast<const BlockQ8_K*>(xb[t]);
          // (bsums[2p], bsums[2p + 1]) side by side in Q8_K: one broadcast 4-byte load is the int16 pair
          msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mn, bcast4(x.bsums + 2 * p)));
        }
      }
      const __m256 dmin = load_h8(g + x8::kQ2_K_dmin);
      for (int t = 0; t < NT; ++t) {
        const __m256 dx = _mm256_set1_ps(reinterpret_cast<const BlockQ8_K*>(xb[t])->d);
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum[t]), acc[t]);
      }
    }
  }
}

// ---- IQ4_XS: sub-block c (32 elements) is pieces 4c .. 4c + 3 of nibble pairs (low: element 32c + 4k + i,
// high: 32c + 16 + 4k + i) through the code book (iq4_dot). AVX2 widens each maddubs by madd with (sc, sc)
// (<= 2 * 32258 * 32 per lane); VNNI sums the sub-block in int32, removes 128 * (its two bsums) and multiplies
// by sc (|sum| <= 32 * 241 * 127).
template <class Ops, int NT>
void iq4_xs(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  const __m256i m4 = b8(0x0F), tab = iq4_table<Ops>();
  for (int64_t b = 0; b < nb; ++b, g += x8::kIQ4_XS_block) {
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      const __m256i sc = dup_i8(g + x8::kIQ4_XS_sc + 8 * c);
      __m256i s[NT];
      for (int t = 0; t < NT; ++t) s[t] = Ops::kVnni ? _mm256_setzero_si256() : isum[t];
      for (int k = 0; k < 4; ++k) {
        const uint8_t* p = g + x8::kIQ4_XS_qs + 32 * (4 * c + k);
        if (k == 0) prefetch_ahead<x8::kIQ4_XS_block, 8>(g, c);
        const __m256i raw = load(p);
        const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(raw, m4));
        const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
        const __m256i lo_abs = _mm256_abs_epi8(lo), hi_abs = _mm256_abs_epi8(hi);  // unused with VNNI
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = reinterpret_cast<const BlockQ8_K*>(xr[t])[b].qs + 32 * c + 4 * k;
          s[t] = iq4_dot<Ops>(s[t], lo, lo_abs, bcast4(xq), sc);
          s[t] = iq4_dot<Ops>(s[t], hi, hi_abs, bcast4(xq + 16), sc);
        }
      }
      for (int t = 0; t < NT; ++t) {
        if constexpr (Ops::kVnni) {
          const BlockQ8_K& x = reinterpret_cast<const BlockQ8_K*>(xr[t])[b];
          const __m256i sub = _mm256_sub_epi32(s[t], _mm256_set1_epi32(128 * (x.bsums[2 * c] + x.bsums[2 * c + 1])));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(sub, i8x8_to_i32(g + x8::kIQ4_XS_sc + 8 * c)));
        } else {
          isum[t] = s[t];
        }
      }
    }
    const __m256 d = load_h8(g);
    for (int t = 0; t < NT; ++t) {
      const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(reinterpret_cast<const BlockQ8_K*>(xr[t])[b].d));
      acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum[t]), acc[t]);
    }
  }
}

template <class Ops, int NT, Type kW>
void group(const uint8_t* g, int64_t nb, const uint8_t* const* xr, __m256* acc) {
  if constexpr (kW == Type::Q4_1 || kW == Type::Q5_0 || kW == Type::Q5_1) b32u<Ops, NT, kW>(g, nb, xr, acc);
  else if constexpr (kW == Type::IQ4_NL) iq4_nl<Ops, NT>(g, nb, xr, acc);
  else if constexpr (kW == Type::Q2_K) q2_q3_k<Ops, NT, false>(g, nb, xr, acc);
  else if constexpr (kW == Type::Q3_K) q2_q3_k<Ops, NT, true>(g, nb, xr, acc);
  else if constexpr (kW == Type::IQ4_XS) iq4_xs<Ops, NT>(g, nb, xr, acc);
  else if constexpr (kW == Type::Q4_0) q4_0<Ops, NT>(g, nb, xr, acc);
  else if constexpr (kW == Type::Q8_0) q8_0<Ops, NT>(g, nb, xr, acc);
  else if constexpr (kW == Type::Q4_K) k4<Ops, NT, false>(g, nb, xr, acc);
  else if constexpr (kW == Type::Q5_K) k4<Ops, NT, true>(g, nb, xr, acc);
  else q6_k<Ops, NT>(g, nb, xr, acc);
}

template <class Ops>
constexpr int pair_tile() {
  if constexpr (Ops::kPairs) return Ops::kPairTile;
  else return kTile;
}

// Token tiles outer (their activations stay in L1 across the groups of a call), groups inner; Ops with 512-bit
// kernels take tiles of their own size (Ops::kPairTile), the 256-bit kernels sub-tiles of kTile. Every (row,
// token) runs the same instruction sequence whatever tile it falls in.
template <class Ops, Type kW>
void drive(const RepackArgs& a) {
  constexpr int kOuter = pair_tile<Ops>();
  static_assert(kOuter % kTile == 0);
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kOuter) {
    const int nt = a.n_tok - t0 < kOuter ? static_cast<int>(a.n_tok - t0) : kOuter;
    const uint8_t* xr[kOuter];
    for (int k = 0; k < nt; ++k) xr[k] = a.x + (a.x_rows ? a.x_rows[t0 + k] : t0 + k) * a.x_stride;
    int64_t gi = a.g_begin;  // Ops with 512-bit kernels take the full pairs of groups first
    if constexpr (Ops::kPairs) gi = Ops::template pairs<kW>(a, t0, nt, xr);
    for (; gi < a.g_end; ++gi) {
      const uint8_t* g = a.w + gi * a.group_bytes;
      const int64_t r0 = gi * kRepackRows;
      const int64_t valid = a.n_rows - r0 < kRepackRows ? a.n_rows - r0 : kRepackRows;
      for (int s0 = 0; s0 < nt; s0 += kTile) {
        const int ns = nt - s0 < kTile ? nt - s0 : kTile;
        __m256 acc[kTile];
        for (int k = 0; k < kTile; ++k) acc[k] = _mm256_setzero_ps();
        switch (ns) {
          case 1: group<Ops, 1, kW>(g, a.n_blocks, xr + s0, acc); break;
          case 2: group<Ops, 2, kW>(g, a.n_blocks, xr + s0, acc); break;
          case 3: group<Ops, 3, kW>(g, a.n_blocks, xr + s0, acc); break;
          default: group<Ops, 4, kW>(g, a.n_blocks, xr + s0, acc); break;
        }
        for (int k = 0; k < ns; ++k) {
          float* y = a.y + (t0 + s0 + k) * a.ldy + (r0 - a.y_col0);
          if (valid == kRepackRows) {
            _mm256_storeu_ps(y, acc[k]);
          } else {
            alignas(32) float tmp[kRepackRows];
            _mm256_store_ps(tmp, acc[k]);
            for (int64_t r = 0; r < valid; ++r) y[r] = tmp[r];
          }
        }
      }
    }
  }
}

template <class Ops>
RepackFn lookup(Type w) {
  switch (w) {
    case Type::Q4_0: return &drive<Ops, Type::Q4_0>;
    case Type::Q8_0: return &drive<Ops, Type::Q8_0>;
    case Type::Q4_K: return &drive<Ops, Type::Q4_K>;
    case Type::Q5_K: return &drive<Ops, Type::Q5_K>;
    case Type::Q6_K: return &drive<Ops, Type::Q6_K>;
    case Type::Q4_1: return &drive<Ops, Type::Q4_1>;
    case Type::Q5_0: return &drive<Ops, Type::Q5_0>;
    case Type::Q5_1: return &drive<Ops, Type::Q5_1>;
    case Type::IQ4_NL: return &drive<Ops, Type::IQ4_NL>;
    case Type::Q2_K: return &drive<Ops, Type::Q2_K>;
    case Type::Q3_K: return &drive<Ops, Type::Q3_K>;
    case Type::IQ4_XS: return &drive<Ops, Type::IQ4_XS>;
    default: return nullptr;
  }
}

}  // namespace x8k
}  // namespace
}  // namespace tern::quant
