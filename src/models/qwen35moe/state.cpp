#include "models/qwen35moe/state.h"

#include <algorithm>

#include "core/error.h"

namespace tern::models::qwen35moe {

static size_t kv_elem_bytes(ops::KvType t) { return t == ops::KvType::kF16 ? 2 : 4; }

SequenceState::SequenceState(const Config& c, int64_t n_ctx, ops::KvType kv_type)
    : config_(&c), n_ctx_(n_ctx), kv_type_(kv_type) {
  if (n_ctx < 1) fail("context size must be >= 1 (got %lld)", static_cast<long long>(n_ctx));
  layers_.resize(static_cast<size_t>(c.n_layer));
  const size_t kv_bytes = static_cast<size_t>(c.n_head_kv * n_ctx * c.head_dim) * kv_elem_bytes(kv_type);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LayerState& l = layers_[i];
    if (c.layer_kind[i] == LayerKind::kAttention) {
      l.k.assign(kv_bytes, 0);
      l.v.assign(kv_bytes, 0);
    } else {
      l.conv.assign(static_cast<size_t>(c.conv_dim() * (c.conv_kernel - 1)), 0.0f);
      l.ssm.assign(static_cast<size_t>(c.n_v_heads * c.head_k_dim * c.head_v_dim), 0.0f);
    }
  }
}

void SequenceState::reset() {
  n_past_ = 0;
  // KV rows past n_past are never read, so only the recurrent states need clearing.
  for (auto& l : layers_) {
    std::fill(l.conv.begin(), l.conv.end(), 0.0f);
    std::fill(l.ssm.begin(), l.ssm.end(), 0.0f);
  }
}

ops::KvCacheView SequenceState::kv(int64_t layer) {
  LayerState& l = layers_[layer];
  ops::KvCacheView v;
  v.type = kv_type_;
  v.k = l.k.data();
  v.v = l.v.data();
  v.n_head_kv = config_->n_head_kv;
  v.n_ctx = n_ctx_;
  v.head_dim = config_->head_dim;
  return v;
}

size_t SequenceState::bytes() const {
  size_t b = 0;
  for (const auto& l : layers_) b += l.k.size() + l.v.size() + (l.conv.size() + l.ssm.size()) * sizeof(float);
  return b;
}

size_t SequenceState::bytes_for(const Config& c, int64_t n_ctx, ops::KvType kv_type) {
  const size_t kv = 2 * static_cast<size_t>(c.n_head_kv * n_ctx * c.head_dim) * kv_elem_bytes(kv_type);
  const size_t dn = static_cast<size_t>(c.conv_dim() * (c.conv_kernel - 1) + c.n_v_heads * c.head_k_dim * c.head_v_dim) *
                    sizeof(float);
  return static_cast<size_t>(c.n_attention_layers()) * kv + static_cast<size_t>(c.n_deltanet_layers()) * dn;
}

}  // namespace tern::models::qwen35moe
