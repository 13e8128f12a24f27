// Dense SwiGLU FFN (dense Qwen3.5 and the like): y = down(silu(gate x) * up x) over a batch's rows.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/blocks/linear.h"
#include "models/blocks/tensor_split.h"
#include "models/dump.h"

namespace tern::models {

struct FfnWeights {
  Linear gate, up;  // {n_embd, n_ff}
  Linear down;      // {n_ff, n_embd}
};

struct FfnScratch {
  Scratch g, u;
  std::vector<float> h_full, y_part, gather;  // host, split by rows: gathered SwiGLU rows, own columns, allgather
};

// x, y: [n_rows, n_embd]; y is overwritten with the block output (before the residual add). `split` (across ranks,
// Model::distribute): gate and up hold this rank's rows split->heads.blocks[rank] of the FFN width, down its rows
// split->rows.blocks[rank] of n_embd; the SwiGLU rows are gathered between the halves and the output columns at the
// end (values moved, not summed: one process's bits). With split->partial_sums, w.down holds this rank's columns
// (its SwiGLU rows) of every output and the output is summed over ranks instead.
void ffn_block(backend::Backend& be, const FfnWeights& w, int layer, const float* x, int64_t n_rows, float* y, FfnScratch& s,
               const TensorDump& dump, const TensorSplit* split = nullptr);

}  // namespace tern::models
