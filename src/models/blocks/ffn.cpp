#include "models/blocks/ffn.h"

#include "core/profile.h"
#include "models/blocks/batch.h"
#include "ops/activation.h"
#include "ops/split.h"

namespace tern::models {

void ffn_block(const FfnWeights& w, int layer, const float* x, int64_t n_rows, float* y, FfnScratch& s,
               const TensorDump& dump) {
  const int64_t F = w.gate.n_out, D = w.down.n_out;
  float* g = grow(s.g, n_rows * F);
  float* u = grow(s.u, n_rows * F);
  TERN_PROFILE(prof, "ffn", w.gate.bytes() + w.up.bytes() + w.down.bytes());
  apply(w.gate, x, n_rows, g);
  apply(w.up, x, n_rows, u);
  ops::split::elements(n_rows * F, [&](int64_t i0, int64_t i1) { ops::swiglu(g + i0, u + i0, g + i0, i1 - i0); });
  dump("ffn_swiglu", layer, g, {n_rows, F});
  apply(w.down, g, n_rows, y);
  dump("ffn_out", layer, y, {n_rows, D});
}

}  // namespace tern::models
