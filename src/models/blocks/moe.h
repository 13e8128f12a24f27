// MoE FFN (Qwen3.5-MoE: contract section 9): router (softmax or sigmoid with a selection bias), top-k, SwiGLU experts
// run over the batch's tokens grouped by expert, plus the shared expert (sigmoid-gated, or ungated when the
// weights have no shared gate). All experts of a step (and the shared one)
// run as one backend::swiglu_ffns call (mapped experts; a streamed expert runs on its own). Each token's expert
// outputs are summed in its top-k order, so its result never depends on the other tokens in the batch.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/dump.h"
#include "core/comm.h"
#include "models/blocks/linear.h"
#include "ops/moe.h"

namespace tern::models {

struct MoeParams {
  int64_t n_embd = 0;
  int64_t n_expert = 0, n_expert_used = 0;  // softmax over n_expert router logits, top n_expert_used renormalised
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;                   // shared expert width (0: none)
  // Routing (ops/moe.h): softmax top-k renormalised (Qwen), or sigmoid scores chosen with the layer's selection
  // bias (MoeWeights::selection_bias), renormalised or not, times a routed scaling factor (DeepSeek-V3 / GLM).
  ops::Gating gating = ops::Gating::kSoftmax;
  bool normalize = true;
  float routed_scale = 1.0f;
};

struct MoeWeights {
  Linear router;                  // {n_embd, n_expert}
  backend::Floats selection_bias;  // [n_expert] or empty: added to the scores for the top-k choice only
  Linear gate_exps, up_exps;      // {n_embd, n_ff_exp, n_expert} as n_expert * n_ff_exp rows
  Linear down_exps;               // {n_ff_exp, n_embd, n_expert} as n_expert * n_embd rows
  bool fused_gate_up = false;     // gate_exps holds {n_embd, 2 * n_ff_exp, n_expert} (gate rows then up rows)
  Linear gate_shexp, up_shexp;    // {n_embd, n_ff_shexp}; absent when n_ff_shexp == 0
  Linear down_shexp;              // {n_ff_shexp, n_embd}
  Linear shexp_gate;              // {n_embd} -> 1 output: sigmoid gate of the shared expert; absent: ungated
  // Expert parallel (Model::distribute): the stacked matrices above hold routed experts [expert0, expert0 + n_local)
  // only, and the shared expert runs here only if run_shared; moe_block then returns this rank's partial sum
  // (the other experts' terms are the other ranks'). n_local < 0: every expert, one process.
  int64_t expert0 = 0, n_local = -1;
  bool run_shared = true;
  // Experts split by rows but left in the file's stacked matrices (SplitOptions::experts_in_file): an expert's rows
  // are [ff0, ff0 + n_ff) of its ff_stride gate (and up) rows and [d0, d0 + n_embd) of its d_stride down rows.
  // 0 strides: the matrices hold exactly the rows asked for (n_ff and n_embd per expert).
  int64_t ff0 = 0, ff_stride = 0, d0 = 0, d_stride = 0;
  bool owns(int64_t e) const { return n_local < 0 || (e >= expert0 && e < expert0 + n_local); }
  Linear expert_gate(int64_t e, int64_t n_ff) const;
  Linear expert_up(int64_t e, int64_t n_ff) const;
  Linear expert_down(int64_t e, int64_t n_embd) const {
    return down_exps.rows((e - expert0) * (d_stride ? d_stride : n_embd) + d0, n_embd);
  }
};

struct ExpertMatrices {
  Linear gate, up, down;
};

// Where a routed expert's matrices come from: views into the mapped file, or a cache that streams them.
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual bool streamed() const = 0;
  // Expert e of layer il; when streamed, valid until the next get() for the same layer.
  virtual ExpertMatrices get(int il, int64_t e) = 0;
  // Whether get(il, e) would be served without a new read (always true when mapped).
  virtual bool resident(int il, int64_t e) const = 0;
  // Starts reading experts[0..n) of layer il in the background while free slots last, never evicting the
  // `keep` experts this step still needs. No-op when mapped.
  virtual void prefetch(int il, const int32_t* experts, int64_t n, const int32_t* keep, int64_t n_keep) = 0;
};


// Experts split by rows across ranks (Model::distribute): every rank holds rows ff.blocks[rank] of each expert's gate
// and up (shff: of the shared expert's) and rows out.blocks[rank] of each down (output columns); the SwiGLU rows are
// gathered between the halves and the block's output columns at the end. Values are moved, not summed: the block
// gives one process's bits, and each rank reads 1/N of every chosen expert (balanced at batch 1).
// Partial sums (SplitOptions::partial_sums): each down holds its columns ff.blocks[rank] (shff: of the shared
// expert's) of every output instead, the SwiGLU rows are not gathered, and the block's output is summed over ranks:
// one collective instead of two, each dot product of a down split into per-rank pieces added in rank order.
struct MoeSplit {
  Comm* comm = nullptr;
  ColumnLayout ff, shff, out;
  bool partial_sums = false;
};

struct MoeScratch {
  Scratch logits, out, sgate;                   // out: every job's down rows, then the shared expert's
  std::vector<float> weights;                   // host: [n_rows, n_used] routing weights
  std::vector<int32_t> ids, tokens, slot_row;   // tokens: each job's batch rows; slot_row: (token, k) -> row of out
  std::vector<std::vector<int32_t>> by_expert;  // [n_expert] -> list of token * n_used + slot
  std::vector<int32_t> order;                   // experts to run: resident ones first
  std::vector<float> h_full, gather, y_part;    // host, split by rows: gathered SwiGLU rows, allgather buffer, own columns
};

// Routed experts come from `experts` (mapped or streamed); those already resident run first, so a streamed
// cache never evicts an expert this step still needs before it has run.
// `split`: experts split by rows (above); null: this rank holds whole experts (all of them, or MoeWeights' range).
void moe_block(backend::Backend& be, const MoeParams& c, const MoeWeights& w, ExpertSource& experts,
               int layer, const float* x, int64_t n_rows, float* y, MoeScratch& s, const TensorDump& dump,
               const MoeSplit* split = nullptr);

}  // namespace tern::models
