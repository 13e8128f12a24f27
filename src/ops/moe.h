// MoE router of Qwen3.5-MoE (contract 9): softmax over the router logits, top-k, renormalised weights.
// Matches HF Qwen3_5MoeSparseMoeBlock (fp32 softmax, topk, divide by the sum of the selected) and llama.cpp
// build_moe_ffn (SOFTMAX gating, norm_w = true, no weight scale). Non-goals: grouped / biased routing.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

// logits [n_tokens, n_expert] -> ids [n_tokens, n_used] (experts in descending probability; ties broken
// by the lower expert index, so the choice is deterministic), weights [n_tokens, n_used] = p_e / sum of the
// selected p (sum in double). Selection is on the softmax probabilities, as both references do, so two
// logits that round to the same probability count as a tie. Throws tern::Error unless
// 0 < n_used <= n_expert. A NaN logit makes the whole row's result unspecified (no crash). The softmax runs the
// kernels of `isa` (ops/kernels.h: a vector exp, so probabilities differ across ISAs by a few ulp and a near-tie
// may rank differently); the selection and the renormalisation are shared scalar code.
void moe_route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t n_used, int32_t* ids,
                            float* weights, Isa isa = engine_isa());

}  // namespace tern::ops
