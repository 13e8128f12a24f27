#include "models/blocks/ffn.h"

#include "core/profile.h"
#include "models/blocks/batch.h"

namespace tern::models {

void ffn_block(backend::Backend& be, const FfnWeights& w, int layer, const float* x, int64_t n_rows, float* y, FfnScratch& s,
               const TensorDump& dump) {
  const int64_t F = w.gate.n_out, D = w.down.n_out;
  float* g = s.g.grow<float>(be, n_rows * F);
  float* u = s.u.grow<float>(be, n_rows * F);
  TERN_PROFILE(prof, "ffn", w.gate.bytes() + w.up.bytes() + w.down.bytes());
  be.matmul(w.gate, x, n_rows, g);
  be.matmul(w.up, x, n_rows, u);
  be.swiglu(g, u, n_rows * F);
  dump("ffn_swiglu", layer, g, {n_rows, F});
  be.matmul(w.down, g, n_rows, y);
  dump("ffn_out", layer, y, {n_rows, D});
}

}  // namespace tern::models
