// IQ4_NL (32-element blocks, one fp16 scale) and IQ4_XS (256-element super-blocks, fp16 scale plus eight
// 6-bit sub-block scales): 4-bit indices into the non-linear code book kValuesIq4nl. Quantizers reproduce
// ggml's quantize_iq4_nl / quantize_iq4_xs without an importance matrix (weights x^2, 7-step scale search).
// Nibble layout as Q4_0: element j of a 32-group is the low nibble of qs[j] (j < 16) or the high nibble of
// qs[j - 16].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/ref/common.h"
#include "quant/ref/ref.h"

namespace tern::quant::ref {
namespace {

constexpr int kNtry = 7;

// Index of the code book entry nearest to x (ties go up); compares 2x against sums of neighbours so the
// midpoints are exact, as current ggml's best_index_int8 does. Older ggml (e.g. llama-cpp-python 0.3.36)
// compared x - v[i-1] < v[i] - x in float, which can differ within an ulp of a midpoint and for NaN
// (index 15 there, 0 here); the committed vectors do not hit either case.
int best_index_iq4(float x) {
  const float x2 = x + x;
  int idx = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = idx + step;
    if (x2 >= static_cast<float>(kValuesIq4nl[j - 1] + kValuesIq4nl[j])) idx = j;
  }
  return idx;
}

// Weighted least-squares scale of block xb (32 values) for the code indices chosen at inverse scale id:
// accumulates sum w*q*x and sum w*q*q.
void fit(const float* xb, const float* w, float id, uint8_t* L, float* sumqx, float* sumq2) {
  *sumqx = *sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const int l = best_index_iq4(id * xb[j]);
    if (L) L[j] = static_cast<uint8_t>(l);
    const auto q = static_cast<float>(kValuesIq4nl[l]);
    *sumqx += w[j] * q * xb[j];
    *sumq2 += w[j] * q * q;
  }
}

// Best scale of one 32-block: start from d = max / 127 (so the extreme value maps to code -127 side),
// then try inverse scales (itry - 127) / max for itry in [-7, 7] and keep the one with the largest
// sumqx^2 / sumq2. Lb receives the codes of the starting point only (ggml requantizes later).
float block_scale(const float* xb, uint8_t* Lb) {
  float w[32];
  for (int j = 0; j < 32; ++j) w[j] = xb[j] * xb[j];
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(xb[j]) > amax) {
      amax = std::fabs(xb[j]);
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(Lb, 0, 32);
    return 0;
  }
  const float v0 = kValuesIq4nl[0];
  float sumqx, sumq2;
  fit(xb, w, 1 / (-max / v0), Lb, &sumqx, &sumq2);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int itry = -kNtry; itry <= kNtry; ++itry) {
    const float id = static_cast<float>(itry + kValuesIq4nl[0]) / max;
    fit(xb, w, id, nullptr, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void pack_nibbles(const uint8_t* L, uint8_t* qs, int n) {
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j) qs[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

}  // namespace

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kValuesIq4nl[x[i].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kValuesIq4nl[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = h2f(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
      const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kValuesIq4nl[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kValuesIq4nl[qs[j] >> 4]);
      }
    }
  }
}

// One scale per block: the search result, then all codes re-chosen with it.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  uint8_t L[32];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = block_scale(x, L);
    y[i].d = f2h(d);
    const float id = d != 0.0f ? 1 / d : 0;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(best_index_iq4(id * x[j]));
    pack_nibbles(L, y[i].qs, 32);
  }
}

// Eight block scales, expressed as signed 6-bit multiples of d = -max_scale/32 (max_scale: the block scale
// of largest magnitude, sign kept); codes re-chosen with each block's rounded scale (in float, before the
// fp16 rounding of d, as ggml does).
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
  uint8_t L[kQK_K];
  float scales[8];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = block_scale(x + 32 * ib, L + 32 * ib);
      if (std::fabs(scales[ib]) > amax_scale) {
        amax_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    const float d = -max_scale / 32;
    y[i].d = f2h(d);
    y[i].scales_h = 0;
    const float id = d != 0.0f ? 1 / d : 0.f;
    for (int ib = 0; ib < 8; ++ib) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(best_index_iq4(idl * x[32 * ib + j]));
      l += 32;
      const auto l_l = static_cast<uint8_t>(l & 0xF);
      if (ib % 2 == 0) {
        y[i].scales_l[ib / 2] = l_l;
      } else {
        y[i].scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      }
      y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | ((l >> 4) << (2 * ib)));
    }
    pack_nibbles(L, y[i].qs, kQK_K);
  }
}

}  // namespace tern::quant::ref
