// Dense SwiGLU FFN (dense Qwen3.5 and the like): y = down(silu(gate x) * up x) over a batch's rows.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/blocks/linear.h"
#include "models/dump.h"

namespace tern::models {

struct FfnWeights {
  Linear gate, up;  // {n_embd, n_ff}
  Linear down;      // {n_ff, n_embd}
};

struct FfnScratch {
  Scratch g, u;
};

// x, y: [n_rows, n_embd]; y is overwritten with the block output (before the residual add).
void ffn_block(backend::Backend& be, const FfnWeights& w, int layer, const float* x, int64_t n_rows, float* y, FfnScratch& s,
               const TensorDump& dump);

}  // namespace tern::models
