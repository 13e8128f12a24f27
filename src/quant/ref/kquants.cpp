// K-quants (256-element super-blocks): scalar dequantize and ggml's non-imatrix reference quantizers
// (quantize_row_q{2..6}_K_ref, quantize_row_q8_K_ref), reproduced operation for operation.
// Shared packing: Q2_K/Q3_K/Q6_K store 2-bit fields of elements (l, l+32, l+64, l+96) of each 128-half in
// one byte; Q4_K/Q5_K store nibbles of elements (l, l+32) of each 64-chunk; Q3_K's third bit of element j
// is bit j/32 of hmask[j%32]; Q5_K's fifth bit of element 64c+l (+32) is bit 2c (2c+1) of qh[l].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/ref/common.h"
#include "quant/ref/kquants_search.h"
#include "quant/ref/ref.h"

namespace tern::quant::ref {
namespace {

// Four 2-bit codes per byte: qs[32*h + l] holds L[128h + l + 32k] in bits 2k..2k+1.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
}

// Q4_K / Q5_K: quantized 6-bit sub-block scales ls and mins lm packed into 12 bytes (inverse of
// scale_min_k4): j < 4 in the low 6 bits of bytes j and j+4, j >= 4 split across byte j+4's nibbles and the
// top 2 bits of bytes j-4 and j.
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Shared first stage of Q4_K / Q5_K: per 32-element sub-block affine search with weights av_x + |x|,
// then 6-bit quantization of scales and mins against their maxima, then requantization of the codes with
// the rounded scales. Fills d, dmin, scales and L (codes in [0, nmax]).
void quantize_k4_scales(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out, uint16_t* dmin_out,
                        uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_scale_min_k4(ls, lm, scales_out);
  *d_out = f2h(max_scale / 63.f);
  *dmin_out = f2h(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales_out, &sc, &m);
    const float d = h2f(*d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;  // keep the search's codes, as ggml does
    const float dm = h2f(*dmin_out) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------- Q2_K

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = h2f(x[i].d), min = h2f(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF), ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Per 16 values an affine 2-bit search (|x| weights, mean absolute error); 4-bit scales and mins relative
// to their maxima; requantize with the rounded scales.
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n) {
  uint8_t L[kQK_K], Laux[16];
  float weights[16], mins[16], scales[16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = f2h(max_scale / q4scale);
    } else {
      std::memset(y[i].scales, 0, 16);
      y[i].d = f2h(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j)
        y[i].scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = f2h(max_min / q4scale);
    } else {
      y[i].dmin = f2h(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = h2f(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = h2f(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

// ---------------------------------------------------------------------------------------------- Q3_K

// 6-bit signed sub-block scale j (0..15) from the 12 packed bytes: low nibble in byte j (j < 8, low) or
// j-8 (high nibble), top 2 bits in byte 8 + j%4 at bit 2*(j/4).
static int q3_k_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  return (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = h2f(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(q3_k_scale(x[i].scales, is++));
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n) {
  int8_t L[kQK_K];
  float scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        auto l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(std::max(-32, std::min(31, static_cast<int>(l))) + 32);
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        }
        y[i].scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      y[i].d = f2h(1 / iscale);
    } else {
      y[i].d = f2h(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = h2f(y[i].d) * static_cast<float>(static_cast<int8_t>(q3_k_scale(y[i].scales, j)));
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    std::memset(y[i].hmask, 0, 32);
    uint8_t Lu[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      int l = L[j];
      if (l > 3) {
        y[i].hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
        l -= 4;
      }
      Lu[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(Lu, y[i].qs);
  }
}

// ---------------------------------------------------------------------------------------------- Q4_K

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = h2f(x[i].d), min = h2f(x[i].dmin);
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k4_scales(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// ---------------------------------------------------------------------------------------------- Q5_K

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = h2f(x[i].d), min = h2f(x[i].dmin);
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k4_scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int c = 0; c < kQK_K; c += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[c + j], l2 = L[c + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

// ---------------------------------------------------------------------------------------------- Q6_K

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = h2f(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  int8_t L[kQK_K];
  float scales[16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f2h(1 / iscale);
    for (int ib = 0; ib < 16; ++ib) y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; ++j) {
      const float d = h2f(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((a & 0xF) | ((c & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((b & 0xF) | ((e & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------- Q8_K

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K)
    for (int j = 0; j < kQK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
}

// d = -max/127 with max the signed absmax, so the extreme value becomes -127 * sign; bsums are the sums
// of each 16 codes (used by the K-quant dot products). An all-zero block gets d = 0, zero codes and sums
// (ggml leaves that block's bsums unwritten).
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[16 * j + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace tern::quant::ref
