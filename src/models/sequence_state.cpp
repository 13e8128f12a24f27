#include "models/sequence_state.h"

#include <algorithm>

#include "core/error.h"

namespace tern::models {

static size_t kv_elem_bytes(ops::KvType t) { return t == ops::KvType::kF16 ? 2 : 4; }

static size_t kv_bytes(const LayerStateShape& s, int64_t n_ctx, ops::KvType t) {
  return s.has_kv() ? static_cast<size_t>(s.n_head_kv * n_ctx * s.head_dim) * kv_elem_bytes(t) : 0;
}

SequenceState::SequenceState(StateShape shape, int64_t n_ctx, ops::KvType kv_type)
    : shape_(std::move(shape)), n_ctx_(n_ctx), kv_type_(kv_type) {
  if (n_ctx < 1) fail("context size must be >= 1 (got %lld)", static_cast<long long>(n_ctx));
  layers_.resize(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) {
    const LayerStateShape& s = shape_[i];
    LayerState& l = layers_[i];
    l.k.assign(kv_bytes(s, n_ctx, kv_type), 0);
    l.v.assign(kv_bytes(s, n_ctx, kv_type), 0);
    l.conv.assign(static_cast<size_t>(s.conv_floats), 0.0f);
    l.ssm.assign(static_cast<size_t>(s.ssm_floats), 0.0f);
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
  LayerState& l = layers_[static_cast<size_t>(layer)];
  const LayerStateShape& s = shape_[static_cast<size_t>(layer)];
  ops::KvCacheView v;
  v.type = kv_type_;
  v.k = l.k.data();
  v.v = l.v.data();
  v.n_head_kv = s.n_head_kv;
  v.n_ctx = n_ctx_;
  v.head_dim = s.head_dim;
  return v;
}

size_t SequenceState::bytes() const {
  size_t b = 0;
  for (const auto& l : layers_) b += l.k.size() + l.v.size() + (l.conv.size() + l.ssm.size()) * sizeof(float);
  return b;
}

size_t SequenceState::bytes_for(const StateShape& shape, int64_t n_ctx, ops::KvType kv_type) {
  size_t b = 0;
  for (const LayerStateShape& s : shape)
    b += 2 * kv_bytes(s, n_ctx, kv_type) + static_cast<size_t>(s.conv_floats + s.ssm_floats) * sizeof(float);
  return b;
}

}  // namespace tern::models
