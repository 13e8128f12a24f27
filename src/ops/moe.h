// MoE routers. Softmax top-k (Qwen3.5-MoE, contract 9): softmax over the router logits, top-k, renormalised
// weights; matches HF Qwen3_5MoeSparseMoeBlock (fp32 softmax, topk, divide by the sum of the selected) and llama.cpp
// build_moe_ffn (SOFTMAX gating, norm_w = true, no weight scale). Sigmoid (DeepSeek-V3 / GLM style, llama.cpp's
// SIGMOID gating with exp_probs_b): per-expert sigmoid scores, top-k chosen on score + selection bias, weights the
// chosen scores without the bias, optionally renormalised, times a routed scaling factor.
// Non-goal: group-limited routing (n_group / topk_group).
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

enum class Gating { kSoftmax, kSigmoid };

struct RouteParams {
  Gating gating = Gating::kSoftmax;
  const float* selection_bias = nullptr;  // [n_expert], added to the scores for the choice only (nullptr: none)
  bool normalize = true;                  // weights divided by the sum of the chosen scores (sum in double)
  float scale = 1.0f;                     // routed scaling factor, applied last
};

// The general router: ids [n_tokens, n_used] in descending (score + bias) order, ties to the lower index;
// weights [n_tokens, n_used]. With the defaults it is moe_route_softmax_topk, bit for bit. Throws tern::Error
// unless 0 < n_used <= n_expert.
void moe_route(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t n_used, const RouteParams& p,
               int32_t* ids, float* weights, Isa isa = engine_isa());

}  // namespace tern::ops
