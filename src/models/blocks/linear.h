// A weight matrix: rows of `n_in` elements of `type`, one row per output, either a view into the model file
// (GGUF ne = {n_in, n_out[, n_expert]}; expert e of a stacked 3-D tensor is the 2-D slice at e * n_out rows) or,
// once repacked, a view into memory laid out for the kernels (quant/repack.h: groups of 8 rows).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace tern::models {

struct Linear {
  quant::Type type = quant::Type::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_bytes = 0;     // one row in the file layout
  bool repacked = false;    // data is in quant's x8 layout
  std::string name;

  bool present() const { return data != nullptr; }
  size_t bytes() const;     // what data spans
  // Rows [r0, r0 + n) as a Linear of n outputs (expert slices, fused-tensor halves). Repacked: r0 must be a
  // multiple of 8 (a group boundary), checked.
  Linear rows(int64_t r0, int64_t n) const;
};

// y [n_tok, n_out] = x [n_tok, n_in] W^T, using the engine's kernels (quant::matmul or quant::matmul_repacked).
void apply(const Linear& w, const float* x, int64_t n_tok, float* y);

// The same product in two steps, for callers that share one quantized input across several matrices or split
// rows across threads themselves (the MoE block): activation rows in the format w's kernels read, then rows
// [r0, r1) of the product on the calling thread (repacked: r0 a multiple of 8, r1 too unless it is n_out).
// Token t reads xq row rows[t] (rows: nullptr for row t) and row i lands at y[t*ldy + i - r0]. Formats of two
// matrices are interchangeable when same_act_format says so.
size_t act_row_bytes(const Linear& w);
bool same_act_format(const Linear& a, const Linear& b);
void quantize_rows(const Linear& w, const float* x, int64_t n_tok, uint8_t* xq);  // xq: [n_tok, act_row_bytes]
void gemm_rows(const Linear& w, const uint8_t* xq, const int32_t* rows, int64_t n_tok, int64_t r0, int64_t r1,
               float* y, int64_t ldy);

// Whether w's type has a repacked layout (quant::has_repacked).
bool can_repack(const Linear& w);
// w repacked into dst (repacked_bytes(w) bytes): the same matrix as a repacked view. `parallel`: row groups
// split over tern::parallel_for (model load); else on the calling thread (an expert read into a cache slot).
size_t repacked_bytes(const Linear& w);
Linear repack_into(const Linear& w, uint8_t* dst, bool parallel);

}  // namespace tern::models
