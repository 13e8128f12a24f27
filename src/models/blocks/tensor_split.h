// Tensor parallelism for a block whose heads are split across ranks (Model::distribute): each rank computes its
// heads' pre-projection activations; the out projection's input is gathered from every rank (in the global column
// order) and its output rows are split, so each rank reads 1/N of the projection and the result is gathered. Values
// are moved, never summed in a new order: the block's output has the bits of one process.
// Partial sums (SplitOptions::partial_sums): each rank instead holds the projection's columns of its own heads (every
// output row), multiplies its heads' activations by them and the block's output is the sum over ranks: one
// collective instead of two, but the dot products are split into per-rank pieces added in rank order (not one
// process's bits).
#pragma once
#include <optional>
#include <vector>

#include "core/comm.h"
#include "models/blocks/batch.h"
#include "models/blocks/linear.h"

namespace tern::models {

struct TensorSplit {
  Comm* comm = nullptr;
  ColumnLayout heads;  // the projection's input columns (head_dim per head) each rank computes
  ColumnLayout rows;   // the projection's output columns (its rows) each rank holds
  // Per-head values a block computes for every head and then keeps this rank's of (DeltaNet's beta and decay: a
  // few rows, computed whole so that their matmul and gate ops are one process's): this rank's heads in its order,
  // and the block's global head counts.
  std::vector<int32_t> local_heads;
  int64_t n_heads = 0, n_key_heads = 0;
  // The projection holds this rank's input columns (heads.blocks[rank]) of every output row, and the output is
  // summed over ranks (`rows` unused).
  bool partial_sums = false;
};

// A rank's heads of a block whose heads come in groups (attention: the query heads of a KV head; DeltaNet: the value
// heads of a key head): key heads [k0, k0 + nk) and, of each, sub-heads [s0, s0 + ns) of its `per`. Whole groups
// when there are at least as many key heads as ranks; else each key head is shared by R / n_key ranks (its K/V or
// q/k computed by each of them), which take equal shares of its sub-heads. None: the block runs whole on every rank.
struct HeadShare {
  int64_t k0 = 0, nk = 0, s0 = 0, ns = 0;
};
std::optional<HeadShare> head_share(int64_t n_key, int64_t per, int ranks, int rank);

struct TensorSplitScratch {
  std::vector<float> in, out, gather;  // host: the gathered input, this rank's output columns, the allgather buffer
};

// y [n_rows, w.n_out or rows.total] = w x. `split` null: one matmul (x is the whole input). Else x holds this rank's
// heads [n_rows, heads.local(rank)] and w this rank's rows (partial sums: its columns, and y the sum over ranks).
void project_out(backend::Backend& be, const Linear& w, const TensorSplit* split, const float* x, int64_t n_rows, float* y,
                 TensorSplitScratch& s);

}  // namespace tern::models
