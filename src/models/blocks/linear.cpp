#include "models/blocks/linear.h"

#include "quant/kernels.h"

namespace tern::models {

Linear Linear::rows(int64_t r0, int64_t n) const {
  Linear s = *this;
  s.data = data + static_cast<size_t>(r0) * row_bytes;
  s.n_out = n;
  return s;
}

void apply(const Linear& w, const float* x, int64_t n_tok, float* y) {
  quant::matmul(w.type, w.data, w.row_bytes, w.n_out, w.n_in, x, n_tok, y, quant::active_isa());
}

}  // namespace tern::models
