// Legacy 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1): scalar dequantize and the
// reference quantizers of ggml-quants.c (quantize_row_<type>_ref), reproduced operation for operation so
// the bytes match. Layout: element j of a block is the low nibble of qs[j] for j < 16 and the high nibble
// of qs[j - 16] otherwise; Q5 keeps bit 4 of element j in bit j of the 32-bit qh.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/ref/common.h"
#include "quant/ref/ref.h"

namespace tern::quant::ref {
namespace {

constexpr int kHalf = kQK / 2;

// Value of largest magnitude in a block (first one wins ties), as ggml's symmetric formats pick it.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// |x| max with ggml's MAX macro semantics (a NaN element resets the running max).
float absmax_macro(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  return amax;
}

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

}  // namespace

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kHalf] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    for (int j = 0; j < kHalf; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + kHalf] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = h2f(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1) << 4;
      const int h1 = static_cast<int>((qh >> (j + kHalf)) & 1) << 4;
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
      y[j + kHalf] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = h2f(x[i].d), m = h2f(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kHalf; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1) << 4;
      const int h1 = static_cast<int>((qh >> (j + kHalf)) & 1) << 4;
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) | h0) * d + m;
      y[j + kHalf] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// Q8_1 decodes like Q8_0; the extra s = d * sum(qs) only serves dot products.
void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// d = (signed absmax) / -8 so the extreme value maps to code 0; codes are trunc(x/d + 8.5), capped at 15.
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = x[j] * id, x1 = x[j + kHalf] * id;
      const int q0 = std::min<int>(15, trunc_i8(x0 + 8.5f));
      const int q1 = std::min<int>(15, trunc_i8(x1 + 8.5f));
      y[i].qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(q0) | (static_cast<uint8_t>(q1) << 4));
    }
  }
}

// Affine: d = (max - min) / 15, m = min; codes trunc((x - min)/d + 0.5), capped at 15.
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(min);
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = (x[j] - min) * id, x1 = (x[j + kHalf] - min) * id;
      const int q0 = std::min<int>(15, trunc_i8(x0 + 0.5f));
      const int q1 = std::min<int>(15, trunc_i8(x1 + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(q0) | (static_cast<uint8_t>(q1) << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = x[j] * id, x1 = x[j + kHalf] * id;
      const auto q0 = static_cast<uint8_t>(std::min<int>(31, trunc_i8(x0 + 16.5f)));
      const auto q1 = static_cast<uint8_t>(std::min<int>(31, trunc_i8(x1 + 16.5f)));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10u) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10u) >> 4) << (j + kHalf);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(min);
    uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = (x[j] - min) * id, x1 = (x[j + kHalf] - min) * id;
      const uint8_t q0 = trunc_u8(x0 + 0.5f), q1 = trunc_u8(x1 + 0.5f);  // no cap, as in ggml
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10u) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10u) >> 4) << (j + kHalf);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}

// d = absmax / 127, codes roundf(x / d) (half away from zero).
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = absmax_macro(x) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = trunc_i8(std::round(x[j] * id));
  }
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = absmax_macro(x) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = trunc_i8(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = f2h(static_cast<float>(sum) * d);
  }
}

}  // namespace tern::quant::ref
