// Reading, transforming and encoding one output tensor. Arithmetic matches llama.cpp's converter: BF16 sources
// are widened to F32 first; F16 sources stay F16 in torch, so the +1 and -exp results are rounded to F16 before
// use. The V-head reorder is the permutation [hk, r, hd] -> [r, hk, hd] of _reorder_v_heads; the MLA kv_b split
// is DeepseekV2Model's view / split / transpose(1, 2).
#include <cmath>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

#include "convert/convert.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "quant/convert.h"

namespace tern::convert {

namespace {

using safetensors::DType;

void read_floats(const safetensors::TensorInfo& t, float* out, int64_t first, int64_t n) {
  const uint8_t* p = t.data;
  switch (t.dtype) {
    case DType::F32: std::memcpy(out, p + first * 4, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + (first + i) * 2, 2);
        out[i] = fp16_to_fp32(h);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + (first + i) * 2, 2);
        out[i] = bf16_to_fp32(h);
      }
      return;
    default: fail("tensor '%s': dtype %s is not supported", t.name.c_str(), safetensors::dtype_name(t.dtype));
  }
}

// Drops the source's pages from this process (they stay in the page cache), keeping RSS bounded.
void release_pages(const safetensors::TensorInfo& t) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t b = reinterpret_cast<uintptr_t>(t.data) & ~(page - 1);
  uintptr_t e = reinterpret_cast<uintptr_t>(t.data) + t.n_bytes();
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

// Permutes `n` blocks of `hd` elements (the V heads, grouped order) to tiled order, for `outer` repetitions
// spaced by `stride` elements, starting at `base`, each block `inner` contiguous elements wide.
// Rows: element (head v, d) at base + (v*hd + d) * inner.
void reorder_rows(float* x, int64_t base, int64_t hk, int64_t r, int64_t hd, int64_t inner, std::vector<float>& tmp) {
  const int64_t n = hk * r * hd * inner;
  tmp.assign(x + base, x + base + n);
  for (int64_t i = 0; i < hk; ++i)
    for (int64_t j = 0; j < r; ++j)
      std::memcpy(x + base + ((j * hk + i) * hd) * inner, tmp.data() + ((i * r + j) * hd) * inner,
                  static_cast<size_t>(hd * inner) * sizeof(float));
}

void reorder_cols(float* x, int64_t rows, int64_t hk, int64_t r, int64_t hd, std::vector<float>& tmp) {
  const int64_t cols = hk * r * hd;
  tmp.resize(static_cast<size_t>(cols));
  for (int64_t row = 0; row < rows; ++row) {
    float* p = x + row * cols;
    std::memcpy(tmp.data(), p, static_cast<size_t>(cols) * sizeof(float));
    for (int64_t i = 0; i < hk; ++i)
      for (int64_t j = 0; j < r; ++j)
        std::memcpy(p + (j * hk + i) * hd, tmp.data() + (i * r + j) * hd, static_cast<size_t>(hd) * sizeof(float));
  }
}

}  // namespace

void materialize(const OutTensor& t, const HParams& hp, std::vector<float>& out) {
  const int64_t n = t.n_elements();
  out.resize(static_cast<size_t>(n));
  float* x = out.data();
  switch (t.combine) {
    case Combine::kSingle: read_floats(*t.srcs[0]->info, x, 0, n); break;
    case Combine::kStackExperts: {
      const int64_t per = n / static_cast<int64_t>(t.srcs.size());
      for (size_t e = 0; e < t.srcs.size(); ++e) read_floats(*t.srcs[e]->info, x + static_cast<int64_t>(e) * per, 0, per);
      break;
    }
    case Combine::kSplitQkv:
    case Combine::kSplitZ: {  // source rows per key head g: [q dk | k dk | v R*dv | z R*dv], each row n_embd wide
      const int64_t H = hp.n_embd, hk = hp.ssm_k_heads, dk = hp.ssm_k_dim;
      const int64_t vr = (hp.ssm_v_heads / hk) * hp.ssm_v_dim, blk = 2 * dk + 2 * vr;
      int64_t row = 0;
      auto take = [&](int64_t g, int64_t off, int64_t rows) {
        read_floats(*t.srcs[0]->info, x + row * H, (g * blk + off) * H, rows * H);
        row += rows;
      };
      if (t.combine == Combine::kSplitQkv) {
        for (int64_t g = 0; g < hk; ++g) take(g, 0, dk);
        for (int64_t g = 0; g < hk; ++g) take(g, dk, dk);
        for (int64_t g = 0; g < hk; ++g) take(g, 2 * dk, vr);
      } else {
        for (int64_t g = 0; g < hk; ++g) take(g, 2 * dk + vr, vr);
      }
      break;
    }
    case Combine::kSplitKb:
    case Combine::kSplitVb: {  // source [nh, nope + v, kv_lora]
      const int64_t nh = t.shape[0], nope = hp.qk_nope, v = hp.v_head_dim, c = hp.kv_lora;
      std::vector<float> tmp(static_cast<size_t>(nope * c));
      for (int64_t h = 0; h < nh; ++h) {
        if (t.combine == Combine::kSplitVb) {  // rows [nope, nope + v) as they are: [v, kv_lora]
          read_floats(*t.srcs[0]->info, x + h * v * c, (h * (nope + v) + nope) * c, v * c);
          continue;
        }
        read_floats(*t.srcs[0]->info, tmp.data(), h * (nope + v) * c, nope * c);  // [nope, kv_lora]
        float* o = x + h * c * nope;                                            // -> [kv_lora, nope]
        for (int64_t d = 0; d < nope; ++d)
          for (int64_t j = 0; j < c; ++j) o[j * nope + d] = tmp[static_cast<size_t>(d * c + j)];
      }
      break;
    }
    case Combine::kSplitGate:
    case Combine::kSplitUp: {  // source [E, 2F, H]; this half [E, F, H]
      const int64_t E = t.shape[0], half = t.shape[1] * t.shape[2];
      for (int64_t e = 0; e < E; ++e)
        read_floats(*t.srcs[0]->info, x + e * half, e * 2 * half + (t.combine == Combine::kSplitUp ? half : 0), half);
      break;
    }
  }
  const bool f16 = t.srcs[0]->info->dtype == DType::F16;
  if (t.xform != Xform::kNone) {
    for (int64_t i = 0; i < n; ++i) {
      float v = t.xform == Xform::kNormPlusOne ? x[i] + 1.0f : -std::exp(x[i]);
      x[i] = f16 ? fp16_to_fp32(fp32_to_fp16(v)) : v;
    }
  }
  if (t.reorder != Reorder::kNone) {
    const int64_t hk = hp.ssm_k_heads, r = hp.ssm_v_heads / hp.ssm_k_heads, dv = hp.ssm_v_dim;
    const int64_t inner = t.shape.size() >= 2 ? t.shape[1] : 1;  // elements per row
    const int64_t qk_rows = 2 * hp.ssm_k_heads * hp.ssm_k_dim;
    std::vector<float> tmp;
    switch (t.reorder) {
      case Reorder::kQkvRows:
      case Reorder::kConvRows: reorder_rows(x, qk_rows * inner, hk, r, dv, inner, tmp); break;
      case Reorder::kRows: reorder_rows(x, 0, hk, r, dv, inner, tmp); break;
      case Reorder::kRowsHead1: reorder_rows(x, 0, hk, r, 1, inner, tmp); break;
      case Reorder::kVec: reorder_rows(x, 0, hk, r, 1, 1, tmp); break;
      case Reorder::kCols: reorder_cols(x, t.shape[0], hk, r, dv, tmp); break;
      case Reorder::kNone: break;
    }
  }
  for (const SourceTensor* s : t.srcs) release_pages(*s->info);
}

void encode(quant::Type type, const float* x, int64_t n, int64_t row, std::vector<uint8_t>& out) {
  const quant::TypeTraits& tr = quant::traits(type);
  if (row % tr.block_size != 0) fail("internal: row %lld not a multiple of the %s block", static_cast<long long>(row), tr.name);
  const size_t rs = quant::row_size(tr, row);
  out.resize(rs * static_cast<size_t>(n / row));
  uint8_t* dst = out.data();
  parallel_for(n / row, [&](int64_t i) { quant::quantize_row_ref(type, x + i * row, dst + static_cast<size_t>(i) * rs, row); });
}

}  // namespace tern::convert
