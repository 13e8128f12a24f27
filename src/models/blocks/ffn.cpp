#include "models/blocks/ffn.h"

#include "core/profile.h"
#include "models/blocks/batch.h"

namespace tern::models {

void ffn_block(backend::Backend& be, const FfnWeights& w, int layer, const float* x, int64_t n_rows, float* y, FfnScratch& s,
               const TensorDump& dump, const TensorSplit* split) {
  const int64_t F = w.gate.n_out, D = split && !split->partial_sums ? split->rows.total : w.down.n_out;
  float* g = s.g.grow<float>(be, n_rows * F);
  float* u = s.u.grow<float>(be, n_rows * F);
  TERN_PROFILE(prof, "ffn", w.gate.bytes() + w.up.bytes() + w.down.bytes());
  be.matmul(w.gate, x, n_rows, g);
  be.matmul(w.up, x, n_rows, u);
  be.swiglu(g, u, n_rows * F);
  if (!split || split->partial_sums) {
    dump("ffn_swiglu", layer, g, {n_rows, F});  // partial sums: this rank's rows
    be.matmul(w.down, g, n_rows, y);
    if (split) {  // this rank's columns of down: its part of every output, summed over ranks
      TERN_PROFILE(prof_comm, "comm.ffn_sum", 0);
      sum_over_ranks(*split->comm, y, n_rows * D, s.gather);
    }
  } else {
    Comm& comm = *split->comm;
    s.h_full.resize(static_cast<size_t>(n_rows * split->heads.total));
    gather_columns(comm, split->heads, g, n_rows, s.h_full.data(), s.gather);
    dump("ffn_swiglu", layer, s.h_full.data(), {n_rows, split->heads.total});
    s.y_part.resize(static_cast<size_t>(n_rows * w.down.n_out));
    be.matmul(w.down, s.h_full.data(), n_rows, s.y_part.data());
    gather_columns(comm, split->rows, s.y_part.data(), n_rows, y, s.gather);
  }
  dump("ffn_out", layer, y, {n_rows, D});
}

}  // namespace tern::models
