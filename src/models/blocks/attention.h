// Gated full attention of Qwen3.5-MoE (contract section 7): q_proj carries a per-head sigmoid gate; per-head
// q/k RMSNorm, partial NeoX RoPE, causal GQA against each sequence's KV cache, gate, o_proj.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/dump.h"
#include "models/qwen35moe/weights.h"

namespace tern::models {

struct AttentionScratch {
  std::vector<float> qg, k, v, q, gate, out;
  std::vector<int32_t> pos;
};

// x, y: [n_rows, n_embd]; y is overwritten with the block output (before the residual add).
void attention_block(const qwen35moe::Config& c, const qwen35moe::AttentionWeights& w, int layer,
                     const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y,
                     AttentionScratch& s, const TensorDump& dump);

}  // namespace tern::models
