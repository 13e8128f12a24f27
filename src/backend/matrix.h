// A weight matrix as a backend holds it: rows of `n_in` elements of `type`, one row per output, either in the
// model file's layout (GGUF ne = {n_in, n_out[, n_expert]}; expert e of a stacked 3-D tensor is the 2-D slice at
// e * n_out rows) or, once repacked, in the backend's kernel layout (CPU: quant/repack.h, groups of 8 rows).
// `data` is backend memory (a Buffer's bytes or a view into weights the backend mapped); non-owning.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace tern::backend {

struct Matrix {
  quant::Type type = quant::Type::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_bytes = 0;     // one row in the file layout
  bool repacked = false;    // data is in the kernel layout
  std::string name;

  bool present() const { return data != nullptr; }
  size_t bytes() const;     // what data spans
  // Rows [r0, r0 + n) as a Matrix of n outputs (expert slices, fused-tensor halves). Repacked: r0 must be a
  // multiple of 8 (a group boundary), checked.
  Matrix rows(int64_t r0, int64_t n) const;
};

}  // namespace tern::backend
