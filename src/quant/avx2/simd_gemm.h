// 256-bit integer gemm kernels for the quantized weight types, shared by the AVX2 and the AVX-512 translation
// units. They differ only in `Ops::dot` (u8 x s8 -> int32 per 4 bytes): maddubs+madd on AVX2, VNNI dpbusd on
// AVX-512. Both are exact, so both ISAs give the ref's result bit for bit (see kernels_ref.cpp for the
// float order each kernel follows). Everything here has internal linkage: each ISA's unit keeps its own copy.
// Element order inside a 32-byte vector is the element order of ggml's dequantize_row_* for that chunk.
#pragma once
#include <type_traits>
#include <immintrin.h>

#include <cstdint>

#include "quant/blocks.h"
#include "quant/kernels_impl.h"

namespace tern::quant {
namespace {

constexpr int kTokTile = 4;  // tokens sharing one decoded weight block (register budget: 16 ymm)

inline __m256i mask8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15), then high nibbles (16..31).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), mask8(0x0F));
}

// Bit j of `bits` -> byte j = 0xFF (set) or 0x00.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  const __m256i bm = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm);
}

inline __m256i iq4nl_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kValuesIq4nl)));
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Sum of 8 float lanes in detail::hsum8_tree's order.
inline float hsum_tree(__m256 v) {
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// ---- 32-element blocks: decode() gives the 32 weights (signed when kSigned) ---------------------------------
struct DecQ4_0 {
  using W = BlockQ4_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i decode(const W& b) { return _mm256_sub_epi8(nibbles32(b.qs), mask8(8)); }
};
struct DecQ4_1 {
  using W = BlockQ4_1;
  using X = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i decode(const W& b) { return nibbles32(b.qs); }
};
struct DecQ5_0 {
  using W = BlockQ5_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i decode(const W& b) {
    const __m256i hi = _mm256_and_si256(bits_to_bytes(load_u32(b.qh)), mask8(0x10));
    return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b.qs), hi), mask8(16));
  }
};
struct DecQ5_1 {
  using W = BlockQ5_1;
  using X = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i decode(const W& b) {
    return _mm256_or_si256(nibbles32(b.qs), _mm256_and_si256(bits_to_bytes(load_u32(b.qh)), mask8(0x10)));
  }
};
struct DecQ8_0 {
  using W = BlockQ8_0;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i decode(const W& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};
struct DecIQ4_NL {
  using W = BlockIQ4_NL;
  using X = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i decode(const W& b) { return _mm256_shuffle_epi8(iq4nl_table(), nibbles32(b.qs)); }
};

template <class D, class Ops, int NT>
void legacy_row(const uint8_t* wrow, const uint8_t* const* xr, int64_t n, float* const* out) {
  const auto* w = reinterpret_cast<const typename D::W*>(wrow);
  const typename D::X* x[NT];
  __m256 acc[NT];
  float summ[NT];
  for (int t = 0; t < NT; ++t) {
    x[t] = reinterpret_cast<const typename D::X*>(xr[t]);
    acc[t] = _mm256_setzero_ps();
    summ[t] = 0.0f;
  }
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i q = D::decode(w[b]);
    const __m256i u = D::kSigned ? _mm256_sign_epi8(q, q) : q;  // |q| as u8 (-128 -> 128)
    const float dw = f16(w[b].d);
    for (int t = 0; t < NT; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t][b].qs));
      const __m256i s = D::kSigned ? _mm256_sign_epi8(xv, q) : xv;
      const __m256 dd = _mm256_set1_ps(dw * f16(x[t][b].d));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Ops::dot(u, s)), dd, acc[t]);
      if constexpr (D::kMin) summ[t] = std::fma(f16(w[b].m), f16(x[t][b].s), summ[t]);
    }
  }
  for (int t = 0; t < NT; ++t) *out[t] = hsum_tree(acc[t]) + summ[t];
}

// ---- 256-element super-blocks: prepare() unpacks 16 per-16 scales and mins; chunk(c) gives 32 weights -----
struct KPrep {
  alignas(32) int32_t sc[16];
  alignas(32) int16_t mn[16];
  float d, dmin;
};

struct DecQ2_K {
  using W = BlockQ2_K;
  static constexpr bool kSigned = false, kMin = true;
  static void prepare(const W& b, KPrep& p) {
    for (int g = 0; g < 16; ++g) p.sc[g] = b.scales[g] & 0xF, p.mn[g] = static_cast<int16_t>(b.scales[g] >> 4);
    p.d = f16(b.d), p.dmin = f16(b.dmin);
  }
  static __m256i chunk(const W& b, int c) {  // c = 4h + s: bits 2s..2s+1 of qs[32h + l]
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c >> 2)));
    return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (c & 3))), mask8(3));
  }
};
struct DecQ3_K {
  using W = BlockQ3_K;
  static constexpr bool kSigned = true, kMin = false;
  static void prepare(const W& b, KPrep& p) {
    detail::unpack_q3_k_scales(b.scales, p.sc);
    p.d = f16(b.d), p.dmin = 0.0f;
  }
  static __m256i chunk(const W& b, int c) {  // low 2 bits as Q2_K; hmask[l] bit c set: +0, clear: -4
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c >> 2)));
    const __m256i low = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (c & 3))), mask8(3));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(c)), mask8(1));
    const __m256i minus4 = _mm256_and_si256(_mm256_cmpeq_epi8(hb, _mm256_setzero_si256()), mask8(4));
    return _mm256_sub_epi8(low, minus4);
  }
};
struct DecQ4_K {
  using W = BlockQ4_K;
  static constexpr bool kSigned = false, kMin = true;
  static void prepare(const W& b, KPrep& p) {
    for (int j = 0; j < 8; ++j) {
      int32_t sc, m;
      detail::scale_min_k4(j, b.scales, &sc, &m);
      p.sc[2 * j] = p.sc[2 * j + 1] = sc;
      p.mn[2 * j] = p.mn[2 * j + 1] = static_cast<int16_t>(m);
    }
    p.d = f16(b.d), p.dmin = f16(b.dmin);
  }
  static __m256i chunk(const W& b, int c) {  // c even: low nibbles of qs[32(c/2) + l], odd: high nibbles
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c >> 1)));
    return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (c & 1))), mask8(0x0F));
  }
};
struct DecQ5_K {
  using W = BlockQ5_K;
  static constexpr bool kSigned = false, kMin = true;
  static void prepare(const W& b, KPrep& p) {
    for (int j = 0; j < 8; ++j) {
      int32_t sc, m;
      detail::scale_min_k4(j, b.scales, &sc, &m);
      p.sc[2 * j] = p.sc[2 * j + 1] = sc;
      p.mn[2 * j] = p.mn[2 * j + 1] = static_cast<int16_t>(m);
    }
    p.d = f16(b.d), p.dmin = f16(b.dmin);
  }
  static __m256i chunk(const W& b, int c) {  // Q4_K nibble | (bit c of qh[l]) << 4
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c >> 1)));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (c & 1))), mask8(0x0F));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(c)), mask8(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
  }
};
struct DecQ6_K {
  using W = BlockQ6_K;
  static constexpr bool kSigned = true, kMin = false;
  static void prepare(const W& b, KPrep& p) {
    for (int g = 0; g < 16; ++g) p.sc[g] = b.scales[g];
    p.d = f16(b.d), p.dmin = 0.0f;
  }
  static __m256i chunk(const W& b, int c) {  // c = 4h + s: nibble (s>>1) of ql[64h + 32(s&1) + l], qh bits 2s
    const int h = c >> 2, s = c & 3;
    const __m256i l4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32 * (s & 1)));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(l4, _mm_cvtsi32_si128(4 * (s >> 1))), mask8(0x0F));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s)), mask8(3));
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 4)), mask8(32));
  }
};
struct DecIQ4_XS {
  using W = BlockIQ4_XS;
  static constexpr bool kSigned = true, kMin = false;
  static void prepare(const W& b, KPrep& p) {
    for (int c = 0; c < 8; ++c) p.sc[2 * c] = p.sc[2 * c + 1] = detail::iq4_xs_scale(b.scales_h, b.scales_l, c);
    p.d = f16(b.d), p.dmin = 0.0f;
  }
  static __m256i chunk(const W& b, int c) { return _mm256_shuffle_epi8(iq4nl_table(), nibbles32(b.qs + 16 * c)); }
};

template <class D, class Ops, int NT>
void kquant_row(const uint8_t* wrow, const uint8_t* const* xr, int64_t n, float* const* out) {
  const auto* w = reinterpret_cast<const typename D::W*>(wrow);
  const BlockQ8_K* x[NT];
  float acc[NT];
  for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const BlockQ8_K*>(xr[t]), acc[t] = 0.0f;
  KPrep p;
  for (int g = 0; g < 16; ++g) p.mn[g] = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    D::prepare(w[b], p);
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      const __m256i q = D::chunk(w[b], c);
      const __m256i u = D::kSigned ? _mm256_sign_epi8(q, q) : q;
      // lanes 0-3 hold elements 0..15 of the chunk (scale 2c), lanes 4-7 elements 16..31 (scale 2c+1)
      const __m256i sc = _mm256_blend_epi32(_mm256_set1_epi32(p.sc[2 * c]), _mm256_set1_epi32(p.sc[2 * c + 1]), 0xF0);
      for (int t = 0; t < NT; ++t) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t][b].qs + 32 * c));
        const __m256i s = D::kSigned ? _mm256_sign_epi8(xv, q) : xv;
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(Ops::dot(u, s), sc));
      }
    }
    for (int t = 0; t < NT; ++t) {
      int32_t ms = 0;
      if constexpr (D::kMin) {
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t][b].bsums));
        ms = hsum_i32(_mm256_madd_epi16(bs, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.mn))));
      }
      acc[t] = detail::kquant_step(acc[t], p.d, p.dmin, x[t][b].d, hsum_i32(isum[t]), ms);
    }
  }
  for (int t = 0; t < NT; ++t) *out[t] = acc[t];
}

template <class D, class Ops>
struct Legacy {
  template <int NT>
  static void row(const uint8_t* w, const uint8_t* const* x, int64_t n, float* const* out) {
    legacy_row<D, Ops, NT>(w, x, n, out);
  }
};
template <class D, class Ops>
struct KQuant {
  template <int NT>
  static void row(const uint8_t* w, const uint8_t* const* x, int64_t n, float* const* out) {
    kquant_row<D, Ops, NT>(w, x, n, out);
  }
};

// Rows outer (one weight row stays in L1 while every token tile reads it), tiles of kTokTile tokens inner.
// Every (row, token) element runs the same instruction sequence whatever the tile it falls in.
// Kernels with a row2<NT>(w, w_stride, x, n, out) compute rows i and i + 1 in one pass (out[t][0], out[t][1]) when
// one or two tokens are given (decode, a speculative verify of one draft): each activation load then serves two
// rows. Each element still runs row()'s instruction sequence, so results do not depend on which path ran.
template <class K, class = void>
struct HasRow2 : std::false_type {};
template <class K>
struct HasRow2<K, std::void_t<decltype(&K::template row2<1>)>> : std::true_type {};

// Up to kTokTile tokens (decode, a speculative verify, small batches): one tile, whose activation and output
// pointers are set up once for all rows instead of per row (short rows made that setup a large share).
template <class K, int NT>
void drive_one_tile(const GemmArgs& a) {
  const uint8_t* xr[NT];
  float* y0[NT];
  for (int k = 0; k < NT; ++k) {
    xr[k] = static_cast<const uint8_t*>(a.x) + (a.x_rows ? a.x_rows[k] : k) * a.x_stride;
    y0[k] = a.y + k * a.ldy - a.y_col0;
  }
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  float* out[NT];
  int64_t i = a.row_begin;
  if constexpr (HasRow2<K>::value && NT <= 2) {
    for (; i + 1 < a.row_end; i += 2) {
      for (int k = 0; k < NT; ++k) out[k] = y0[k] + i;
      K::template row2<NT>(w + i * a.w_stride, a.w_stride, xr, a.n_in, out);
    }
  }
  for (; i < a.row_end; ++i) {
    for (int k = 0; k < NT; ++k) out[k] = y0[k] + i;
    K::template row<NT>(w + i * a.w_stride, xr, a.n_in, out);
  }
}

template <class K>
void drive(const GemmArgs& a) {
  switch (a.n_tok) {
    case 1: return drive_one_tile<K, 1>(a);
    case 2: return drive_one_tile<K, 2>(a);
    case 3: return drive_one_tile<K, 3>(a);
    case 4: return drive_one_tile<K, 4>(a);
    default: break;
  }
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    const uint8_t* wr = static_cast<const uint8_t*>(a.w) + i * a.w_stride;
    for (int64_t t0 = 0; t0 < a.n_tok; t0 += kTokTile) {
      const int nt = a.n_tok - t0 < kTokTile ? static_cast<int>(a.n_tok - t0) : kTokTile;
      const uint8_t* xr[kTokTile];
      float* out[kTokTile];
      for (int k = 0; k < nt; ++k) {
        xr[k] = static_cast<const uint8_t*>(a.x) + (a.x_rows ? a.x_rows[t0 + k] : t0 + k) * a.x_stride;
        out[k] = a.y + (t0 + k) * a.ldy + (i - a.y_col0);
      }
      switch (nt) {
        case 1: K::template row<1>(wr, xr, a.n_in, out); break;
        case 2: K::template row<2>(wr, xr, a.n_in, out); break;
        case 3: K::template row<3>(wr, xr, a.n_in, out); break;
        default: K::template row<4>(wr, xr, a.n_in, out); break;
      }
    }
  }
}

}  // namespace
}  // namespace tern::quant
