// Qwen3.5-MoE FFN (contract section 9): softmax router, top-k renormalised, SwiGLU experts run over the batch's
// tokens grouped by expert, plus the sigmoid-gated shared expert. All experts of a step (and the shared one)
// run as three parallel passes (gate+up with SwiGLU, down's input quantized, down) over (expert, row chunk)
// tasks, with the batch's input quantized once. Each token's expert outputs are summed in its top-k order, so
// its result never depends on the other tokens in the batch or on the thread count.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/dump.h"
#include "models/qwen35moe/expert_store.h"
#include "models/qwen35moe/weights.h"

namespace tern::models {

struct MoeScratch {
  std::vector<float> logits, weights, h, out, sgate;  // h: SwiGLU rows of every job; out: their down rows
  std::vector<Linear> q_fmt;                    // formats the batch was quantized in this layer ...
  std::vector<std::vector<uint8_t>> q_buf;      // ... and those activations [n_rows, act_row_bytes]
  std::vector<uint8_t> down_q;                  // every job's down input, quantized
  std::vector<int32_t> ids, tokens, slot_row;   // tokens: each job's batch rows; slot_row: (token, k) -> row of out
  std::vector<std::vector<int32_t>> by_expert;  // [n_expert] -> list of token * n_used + slot
  std::vector<int32_t> order;                   // experts to run: resident ones first
};

// Routed experts come from `experts` (mapped or streamed); those already resident run first, so a streamed
// cache never evicts an expert this step still needs before it has run.
void moe_block(const qwen35moe::Config& c, const qwen35moe::MoeWeights& w, qwen35moe::ExpertStore& experts,
               int layer, const float* x, int64_t n_rows, float* y, MoeScratch& s, const TensorDump& dump);

}  // namespace tern::models
