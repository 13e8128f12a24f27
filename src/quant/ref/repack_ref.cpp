// Scalar reference of the repacked (x8) gemm: the specification of its reduction order (repack.h). It reads a
// row back into the file layout and computes from ggml's element order, so it is also the proof that the
// layout and the order together compute the same dot product as the file's blocks.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/kernels_impl.h"
#include "quant/repack.h"
#include "quant/repack_impl.h"

namespace tern::quant {
namespace {

float h2f(uint16_t h) { return fp16_to_fp32(h); }

float row_q4_0(const BlockQ4_0* w, const BlockQ8_0S* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) isum += (w[b].qs[j] & 0xF) * x[b].qs[j] + (w[b].qs[j] >> 4) * x[b].qs[j + 16];
    isum -= 8 * x[b].s;
    acc = std::fma(h2f(w[b].d) * h2f(x[b].d), static_cast<float>(isum), acc);
  }
  return acc;
}

float row_q8_0(const BlockQ8_0* w, const BlockQ8_0S* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < 32; ++j) isum += w[b].qs[j] * x[b].qs[j];
    acc = std::fma(h2f(w[b].d) * h2f(x[b].d), static_cast<float>(isum), acc);
  }
  return acc;
}

// Q4_K (kQh = false) / Q5_K: element 64j + l is the low nibble of qs[32j + l] (sub-block 2j), 64j + 32 + l the
// high nibble (sub-block 2j + 1); Q5_K adds bit c of qh[l] as 16 for element 32c + l.
template <bool kQh>
float row_k4(const uint8_t* wrow, size_t wsize, const BlockQ8_K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = wrow + b * wsize;
    uint16_t d, dmin;
    std::memcpy(&d, blk, 2), std::memcpy(&dmin, blk + 2, 2);
    const uint8_t* scales = blk + 4;
    const uint8_t* qh = blk + 4 + kKScaleSize;
    const uint8_t* qs = blk + 4 + kKScaleSize + (kQh ? kQK_K / 8 : 0);
    int32_t isum = 0, msum = 0;
    for (int sub = 0; sub < 8; ++sub) {
      int32_t sc, m;
      detail::scale_min_k4(sub, scales, &sc, &m);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const int e = 32 * sub + l;
        int q = (sub & 1) ? (qs[32 * (sub / 2) + l] >> 4) : (qs[32 * (sub / 2) + l] & 0xF);
        if constexpr (kQh) q += ((qh[l] >> sub) & 1) << 4;
        s += q * x[b].qs[e];
      }
      isum += sc * s;
      msum += m * (x[b].bsums[2 * sub] + x[b].bsums[2 * sub + 1]);
    }
    acc = detail::kquant_step(acc, h2f(d), h2f(dmin), x[b].d, isum, msum);
  }
  return acc;
}

float row_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t q[256];
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* ql = w[b].ql + 64 * h;
        const int qh = w[b].qh[32 * h + l];
        q[128 * h + l] = (ql[l] & 0xF) | ((qh & 3) << 4);
        q[128 * h + 32 + l] = (ql[32 + l] & 0xF) | (((qh >> 2) & 3) << 4);
        q[128 * h + 64 + l] = (ql[l] >> 4) | (((qh >> 4) & 3) << 4);
        q[128 * h + 96 + l] = (ql[32 + l] >> 4) | (((qh >> 6) & 3) << 4);
      }
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t s = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) s += q[e] * x[b].qs[e];
      isum += w[b].scales[j] * (s - 32 * x[b].bsums[j]);
    }
    acc = std::fma(h2f(w[b].d) * x[b].d, static_cast<float>(isum), acc);
  }
  return acc;
}

template <Type kW>
void gemm_x8_ref(const RepackArgs& a) {
  const size_t wsize = traits(kW).type_size;
  std::vector<uint8_t> row(static_cast<size_t>(a.n_blocks) * wsize);
  for (int64_t g = a.g_begin; g < a.g_end; ++g)
    for (int64_t r = 0; r < kRepackRows; ++r) {
      const int64_t i = g * kRepackRows + r;
      if (i >= a.n_rows) break;
      unpack_row(kW, a.w, a.n_blocks * traits(kW).block_size, i, row.data());
      for (int64_t t = 0; t < a.n_tok; ++t) {
        const uint8_t* x = a.x + (a.x_rows ? a.x_rows[t] : t) * a.x_stride;
        float v = 0.0f;
        if constexpr (kW == Type::Q4_0)
          v = row_q4_0(reinterpret_cast<const BlockQ4_0*>(row.data()), reinterpret_cast<const BlockQ8_0S*>(x), a.n_blocks);
        else if constexpr (kW == Type::Q8_0)
          v = row_q8_0(reinterpret_cast<const BlockQ8_0*>(row.data()), reinterpret_cast<const BlockQ8_0S*>(x), a.n_blocks);
        else if constexpr (kW == Type::Q4_K)
          v = row_k4<false>(row.data(), wsize, reinterpret_cast<const BlockQ8_K*>(x), a.n_blocks);
        else if constexpr (kW == Type::Q5_K)
          v = row_k4<true>(row.data(), wsize, reinterpret_cast<const BlockQ8_K*>(x), a.n_blocks);
        else
          v = row_q6_k(reinterpret_cast<const BlockQ6_K*>(row.data()), reinterpret_cast<const BlockQ8_K*>(x), a.n_blocks);
        a.y[t * a.ldy + i - a.y_col0] = v;
      }
    }
}

}  // namespace

RepackFn repack_fn_ref(Type w) {
  switch (w) {
    case Type::Q4_0: return &gemm_x8_ref<Type::Q4_0>;
    case Type::Q8_0: return &gemm_x8_ref<Type::Q8_0>;
    case Type::Q4_K: return &gemm_x8_ref<Type::Q4_K>;
    case Type::Q5_K: return &gemm_x8_ref<Type::Q5_K>;
    case Type::Q6_K: return &gemm_x8_ref<Type::Q6_K>;
    default: return nullptr;
  }
}

}  // namespace tern::quant
