#include "models/qwen35moe/state.h"

namespace tern::models::qwen35moe {

StateShape state_shape(const Config& c) {
  StateShape s(static_cast<size_t>(c.n_layer + (c.n_nextn > 0 ? 1 : 0)));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LayerStateShape& l = s[static_cast<size_t>(i)];
    if (c.layer_kind[i] == LayerKind::kAttention) {
      l.n_head_kv = c.n_head_kv;
      l.head_dim = c.head_dim;
    } else {
      l.conv_floats = c.conv_dim() * (c.conv_kernel - 1);
      l.ssm_floats = c.n_v_heads * c.head_k_dim * c.head_v_dim;
    }
  }
  if (c.n_nextn > 0) {  // the MTP block's attention layer, in the draft state
    LayerStateShape& m = s.back();
    m.n_head_kv = c.n_head_kv;
    m.head_dim = c.head_dim;
    m.draft = true;
  }
  return s;
}

}  // namespace tern::models::qwen35moe
