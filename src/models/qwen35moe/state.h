// Per-sequence state geometry of a Qwen3.5-MoE model (layout: docs/STATE_LAYOUT.md): a KV cache for each
// attention layer ([n_head_kv, n_ctx, head_dim]), and for each DeltaNet layer the conv state
// [conv_dim, kernel - 1] and the recurrent state [n_v_heads, head_k_dim, head_v_dim], both f32.
#pragma once
#include "models/qwen35moe/config.h"
#include "models/sequence_state.h"

namespace tern::models::qwen35moe {

StateShape state_shape(const Config& c);

}  // namespace tern::models::qwen35moe
