// Scalar reference ("_ref") dot products, gemm and activation-quantizer primitives: the specification the
// AVX2 / AVX-512 kernels are tested against. Quantized types: integer products are exact; the float steps
// are spelled out so the SIMD kernels can follow them bit for bit:
//  - 32-blocks (Q4_0 ... IQ4_NL): 8 float lanes, lane k gets fma((float)sum(w*x over elements 4k..4k+3),
//    d_w*d_x) per block; at the end hsum8_tree, plus fma-sum over blocks of m_w*s_x for the Q4_1/Q5_1 min term.
//  - K-quants / IQ4_XS: one exact int sum per 256-super-block, then detail::kquant_step (explicit fmas).
// Float types: plain sequential float sum (the SIMD versions differ by rounding; tests use a tolerance).
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/kernels_impl.h"

namespace tern::quant {
namespace {

using detail::hsum8_tree;
using detail::kquant_step;

// --- float weights ---------------------------------------------------------------------------------------
template <typename ToF>
float dot_float(const void* w, const void* x, int64_t n, ToF to_f) {
  const float* xf = static_cast<const float*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += to_f(w, i) * xf[i];
  return acc;
}

// --- 32-element blocks -------------------------------------------------------------------------------------
// Lane sums of one block: p[k] = sum of w[e]*x[e] for e in 4k..4k+3 (element order of ggml's dequantize).
void lane_dot(const int32_t w[32], const int8_t* x, int32_t p[8]) {
  for (int k = 0; k < 8; ++k) {
    p[k] = 0;
    for (int e = 4 * k; e < 4 * k + 4; ++e) p[k] += w[e] * x[e];
  }
}

// Decoders: 32 integer weights in element order, plus (for the _1 types) nothing else; scales read by caller.
void decode(const BlockQ4_0& b, int32_t w[32]) {
  for (int j = 0; j < 16; ++j) w[j] = (b.qs[j] & 0xF) - 8, w[j + 16] = (b.qs[j] >> 4) - 8;
}
void decode(const BlockQ4_1& b, int32_t w[32]) {
  for (int j = 0; j < 16; ++j) w[j] = b.qs[j] & 0xF, w[j + 16] = b.qs[j] >> 4;
}
uint32_t qh_bits(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}
void decode(const BlockQ5_0& b, int32_t w[32]) {
  const uint32_t qh = qh_bits(b.qh);  // bit j: high bit of element j
  for (int j = 0; j < 16; ++j) {
    w[j] = ((b.qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
    w[j + 16] = ((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
  }
}
void decode(const BlockQ5_1& b, int32_t w[32]) {
  const uint32_t qh = qh_bits(b.qh);
  for (int j = 0; j < 16; ++j) {
    w[j] = (b.qs[j] & 0xF) | (((qh >> j) & 1) << 4);
    w[j + 16] = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
  }
}
void decode(const BlockQ8_0& b, int32_t w[32]) {
  for (int j = 0; j < 32; ++j) w[j] = b.qs[j];
}
void decode(const BlockIQ4_NL& b, int32_t w[32]) {
  for (int j = 0; j < 16; ++j) w[j] = kValuesIq4nl[b.qs[j] & 0xF], w[j + 16] = kValuesIq4nl[b.qs[j] >> 4];
}

template <typename WB, typename XB, bool kMin>
float dot_legacy(const void* w_row, const void* x_row, int64_t n) {
  const WB* w = static_cast<const WB*>(w_row);
  const XB* x = static_cast<const XB*>(x_row);
  float acc[8] = {};
  float summ = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t wi[32], p[8];
    decode(w[b], wi);
    lane_dot(wi, x[b].qs, p);
    const float dd = fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(static_cast<float>(p[k]), dd, acc[k]);
    if constexpr (kMin) summ = std::fma(fp16_to_fp32(w[b].m), fp16_to_fp32(x[b].s), summ);
  }
  return hsum8_tree(acc) + summ;
}

// --- 256-element super-blocks (Q8_K activations) ------------------------------------------------------
// Each decoder gives the 256 integer weights in element order, 16 per-16 scales, 16 per-16 mins (0 when the
// type has none), d and dmin.
struct SuperBlock {
  int32_t w[256], sc[16], mn[16];
  float d, dmin;
};

void decode(const BlockQ2_K& b, SuperBlock& s) {
  for (int h = 0; h < 2; ++h)
    for (int sh = 0; sh < 4; ++sh)
      for (int l = 0; l < 32; ++l) s.w[128 * h + 32 * sh + l] = (b.qs[32 * h + l] >> (2 * sh)) & 3;
  for (int g = 0; g < 16; ++g) s.sc[g] = b.scales[g] & 0xF, s.mn[g] = b.scales[g] >> 4;
  s.d = fp16_to_fp32(b.d), s.dmin = fp16_to_fp32(b.dmin);
}
void decode(const BlockQ3_K& b, SuperBlock& s) {
  for (int h = 0; h < 2; ++h)
    for (int sh = 0; sh < 4; ++sh)
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * sh)) & 3;
        const int hbit = (b.hmask[l] >> (4 * h + sh)) & 1;
        s.w[128 * h + 32 * sh + l] = low - (hbit ? 0 : 4);
      }
  detail::unpack_q3_k_scales(b.scales, s.sc);
  for (int g = 0; g < 16; ++g) s.mn[g] = 0;
  s.d = fp16_to_fp32(b.d), s.dmin = 0.0f;
}
void decode(const BlockQ4_K& b, SuperBlock& s) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      s.w[64 * c + l] = b.qs[32 * c + l] & 0xF;
      s.w[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
    }
  for (int j = 0; j < 8; ++j) {
    detail::scale_min_k4(j, b.scales, &s.sc[2 * j], &s.mn[2 * j]);
    s.sc[2 * j + 1] = s.sc[2 * j], s.mn[2 * j + 1] = s.mn[2 * j];
  }
  s.d = fp16_to_fp32(b.d), s.dmin = fp16_to_fp32(b.dmin);
}
void decode(const BlockQ5_K& b, SuperBlock& s) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      s.w[64 * c + l] = (b.qs[32 * c + l] & 0xF) | (((b.qh[l] >> (2 * c)) & 1) << 4);
      s.w[64 * c + 32 + l] = (b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
    }
  for (int j = 0; j < 8; ++j) {
    detail::scale_min_k4(j, b.scales, &s.sc[2 * j], &s.mn[2 * j]);
    s.sc[2 * j + 1] = s.sc[2 * j], s.mn[2 * j + 1] = s.mn[2 * j];
  }
  s.d = fp16_to_fp32(b.d), s.dmin = fp16_to_fp32(b.dmin);
}
void decode(const BlockQ6_K& b, SuperBlock& s) {
  for (int h = 0; h < 2; ++h)
    for (int sh = 0; sh < 4; ++sh)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lq = b.ql[64 * h + 32 * (sh & 1) + l];
        const int nib = (sh >> 1) ? (lq >> 4) : (lq & 0xF);
        const int hb = (b.qh[32 * h + l] >> (2 * sh)) & 3;
        s.w[128 * h + 32 * sh + l] = (nib | (hb << 4)) - 32;
      }
  for (int g = 0; g < 16; ++g) s.sc[g] = b.scales[g], s.mn[g] = 0;
  s.d = fp16_to_fp32(b.d), s.dmin = 0.0f;
}
void decode(const BlockIQ4_XS& b, SuperBlock& s) {
  for (int c = 0; c < 8; ++c) {
    for (int j = 0; j < 16; ++j) {
      s.w[32 * c + j] = kValuesIq4nl[b.qs[16 * c + j] & 0xF];
      s.w[32 * c + 16 + j] = kValuesIq4nl[b.qs[16 * c + j] >> 4];
    }
    s.sc[2 * c] = s.sc[2 * c + 1] = detail::iq4_xs_scale(b.scales_h, b.scales_l, c);
  }
  for (int g = 0; g < 16; ++g) s.mn[g] = 0;
  s.d = fp16_to_fp32(b.d), s.dmin = 0.0f;
}

template <typename WB>
float dot_kquant(const void* w_row, const void* x_row, int64_t n) {
  const WB* w = static_cast<const WB*>(w_row);
  const BlockQ8_K* x = static_cast<const BlockQ8_K*>(x_row);
  float acc = 0.0f;
  SuperBlock s;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    decode(w[b], s);
    int32_t isum = 0, msum = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t dot = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) dot += s.w[e] * x[b].qs[e];
      isum += s.sc[g] * dot;
      msum += s.mn[g] * x[b].bsums[g];
    }
    acc = kquant_step(acc, s.d, s.dmin, x[b].d, isum, msum);
  }
  return acc;
}

// --- gemm over the ref dots ---------------------------------------------------------------------------
template <float (*Dot)(const void*, const void*, int64_t)>
void gemm_ref(const GemmArgs& a) {
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const uint8_t* xr = static_cast<const uint8_t*>(a.x) + (a.x_rows ? a.x_rows[t] : t) * a.x_stride;
    for (int64_t i = a.row_begin; i < a.row_end; ++i)
      a.y[t * a.ldy + i - a.y_col0] = Dot(static_cast<const uint8_t*>(a.w) + i * a.w_stride, xr, a.n_in);
  }
}

float amax_ref(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void scale_round_ref(const float* x, float id, int8_t* q, int64_t n) {
  // nearbyint in the default rounding mode: ties to even, as _mm256_round_ps / _mm512_roundscale_ps.
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
}

}  // namespace

float dot_f32_f32_ref(const void* w, const void* x, int64_t n) {
  return dot_float(w, x, n, [](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; });
}
float dot_f16_f32_ref(const void* w, const void* x, int64_t n) {
  return dot_float(w, x, n, [](const void* p, int64_t i) { return fp16_to_fp32(static_cast<const uint16_t*>(p)[i]); });
}
float dot_bf16_f32_ref(const void* w, const void* x, int64_t n) {
  return dot_float(w, x, n, [](const void* p, int64_t i) { return bf16_to_fp32(static_cast<const uint16_t*>(p)[i]); });
}
float dot_q4_0_q8_0_ref(const void* w, const void* x, int64_t n) { return dot_legacy<BlockQ4_0, BlockQ8_0, false>(w, x, n); }
float dot_q4_1_q8_1_ref(const void* w, const void* x, int64_t n) { return dot_legacy<BlockQ4_1, BlockQ8_1, true>(w, x, n); }
float dot_q5_0_q8_0_ref(const void* w, const void* x, int64_t n) { return dot_legacy<BlockQ5_0, BlockQ8_0, false>(w, x, n); }
float dot_q5_1_q8_1_ref(const void* w, const void* x, int64_t n) { return dot_legacy<BlockQ5_1, BlockQ8_1, true>(w, x, n); }
float dot_q8_0_q8_0_ref(const void* w, const void* x, int64_t n) { return dot_legacy<BlockQ8_0, BlockQ8_0, false>(w, x, n); }
float dot_iq4_nl_q8_0_ref(const void* w, const void* x, int64_t n) { return dot_legacy<BlockIQ4_NL, BlockQ8_0, false>(w, x, n); }
float dot_q2_k_q8_k_ref(const void* w, const void* x, int64_t n) { return dot_kquant<BlockQ2_K>(w, x, n); }
float dot_q3_k_q8_k_ref(const void* w, const void* x, int64_t n) { return dot_kquant<BlockQ3_K>(w, x, n); }
float dot_q4_k_q8_k_ref(const void* w, const void* x, int64_t n) { return dot_kquant<BlockQ4_K>(w, x, n); }
float dot_q5_k_q8_k_ref(const void* w, const void* x, int64_t n) { return dot_kquant<BlockQ5_K>(w, x, n); }
float dot_q6_k_q8_k_ref(const void* w, const void* x, int64_t n) { return dot_kquant<BlockQ6_K>(w, x, n); }
float dot_iq4_xs_q8_k_ref(const void* w, const void* x, int64_t n) { return dot_kquant<BlockIQ4_XS>(w, x, n); }

GemmFn gemm_fn_ref(Type w) {
  switch (w) {
#define TERN_CASE(wn, an, T) \
  case Type::T: return &gemm_ref<&dot_##wn##_##an##_ref>;
    TERN_KERNEL_LIST(TERN_CASE)
#undef TERN_CASE
    default: return nullptr;
  }
}

ActPrims act_prims_ref() { return {&amax_ref, &scale_round_ref}; }

}  // namespace tern::quant
