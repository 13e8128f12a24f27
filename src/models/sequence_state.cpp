#include "models/sequence_state.h"

#include "core/error.h"

namespace tern::models {

static size_t kv_elem_bytes(ops::KvType t) { return t == ops::KvType::kF16 ? 2 : 4; }

static size_t kv_bytes(const LayerStateShape& s, int64_t n_ctx, ops::KvType t) {
  return s.has_kv() ? static_cast<size_t>(s.n_head_kv * n_ctx * s.head_dim) * kv_elem_bytes(t) : 0;
}

SequenceState::SequenceState(backend::Backend& be, StateShape shape, int64_t n_ctx, ops::KvType kv_type)
    : shape_(std::move(shape)), n_ctx_(n_ctx), kv_type_(kv_type) {
  if (n_ctx < 1) fail("context size must be >= 1 (got %lld)", static_cast<long long>(n_ctx));
  layers_.resize(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) {
    const LayerStateShape& s = shape_[i];
    LayerState& l = layers_[i];
    if (s.has_kv()) {
      l.k = be.alloc(backend::BufferKind::kState, kv_bytes(s, n_ctx, kv_type));
      l.v = be.alloc(backend::BufferKind::kState, kv_bytes(s, n_ctx, kv_type));
    }
    if (s.conv_floats > 0) l.conv = be.alloc(backend::BufferKind::kState, static_cast<size_t>(s.conv_floats) * sizeof(float));
    if (s.ssm_floats > 0) l.ssm = be.alloc(backend::BufferKind::kState, static_cast<size_t>(s.ssm_floats) * sizeof(float));
  }
}

void SequenceState::reset() {
  n_past_ = 0;
  // KV rows past n_past are never read, so only the recurrent states need clearing.
  for (auto& l : layers_) {
    if (l.conv) l.conv->zero();
    if (l.ssm) l.ssm->zero();
  }
}

ops::KvCacheView SequenceState::kv(int64_t layer) {
  LayerState& l = layers_[static_cast<size_t>(layer)];
  const LayerStateShape& s = shape_[static_cast<size_t>(layer)];
  ops::KvCacheView v;
  v.type = kv_type_;
  v.k = l.k ? l.k->data() : nullptr;
  v.v = l.v ? l.v->data() : nullptr;
  v.n_head_kv = s.n_head_kv;
  v.n_ctx = n_ctx_;
  v.head_dim = s.head_dim;
  return v;
}

size_t SequenceState::bytes() const {
  size_t b = 0;
  for (const auto& l : layers_)
    for (const auto* buf : {&l.k, &l.v, &l.conv, &l.ssm})
      if (*buf) b += (*buf)->bytes();
  return b;
}

size_t SequenceState::bytes_for(const StateShape& shape, int64_t n_ctx, ops::KvType kv_type) {
  size_t b = 0;
  for (const LayerStateShape& s : shape)
    b += 2 * kv_bytes(s, n_ctx, kv_type) + static_cast<size_t>(s.conv_floats + s.ssm_floats) * sizeof(float);
  return b;
}

}  // namespace tern::models
