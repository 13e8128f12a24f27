// Gated full attention of Qwen3.5-MoE (contract section 7): q_proj carries a per-head sigmoid gate; per-head
// q/k RMSNorm, partial NeoX RoPE, causal GQA against each sequence's KV cache, gate, o_proj.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/dump.h"
#include "models/blocks/linear.h"
#include "models/blocks/tensor_split.h"

namespace tern::models {

struct AttentionParams {
  int64_t n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_rot = 0;                 // rotated dimensions of each head (partial RoPE)
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-6f;             // q/k norms
};

struct AttentionWeights {
  Linear wq;               // {n_embd, 2 * n_head * head_dim}: per head head_dim query rows, then head_dim gate rows
  Linear wk, wv;           // {n_embd, n_head_kv * head_dim}
  Linear wo;               // {n_head * head_dim, n_embd}
  backend::Floats q_norm, k_norm;  // [head_dim], folded 1 + w
};


struct AttentionScratch {
  Scratch qg, k, v, q, gate, out;
  TensorSplitScratch split;
  std::vector<int32_t> pos;  // host: positions of one segment
};

// x, y: [n_rows, n_embd]; y is overwritten with the block output (before the residual add). `split`: this rank
// runs the heads of `c` (its share) and wo holds its rows (tensor_split.h); null: one process.
void attention_block(backend::Backend& be, const AttentionParams& c, const AttentionWeights& w, int layer,
                     const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y,
                     AttentionScratch& s, const TensorDump& dump, const TensorSplit* split = nullptr);

}  // namespace tern::models
