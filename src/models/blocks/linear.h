// A weight matrix as a view into the model file: rows of `n_in` elements of `type`, one row per output.
// GGUF ne = {n_in, n_out[, n_expert]}; expert e of a stacked 3-D tensor is the 2-D slice at e * n_out rows.
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
  size_t row_bytes = 0;
  std::string name;

  bool present() const { return data != nullptr; }
  size_t bytes() const { return row_bytes * static_cast<size_t>(n_out); }
  // Rows [r0, r0 + n) as a Linear of n outputs (expert slices, fused-tensor halves).
  Linear rows(int64_t r0, int64_t n) const;
};

// y [n_tok, n_out] = x [n_tok, n_in] W^T, using the engine's kernels (quant::matmul).
void apply(const Linear& w, const float* x, int64_t n_tok, float* y);

}  // namespace tern::models
