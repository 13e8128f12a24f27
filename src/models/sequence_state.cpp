#include "models/sequence_state.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"

namespace tern::models {

static size_t kv_elem_bytes(ops::KvType t) { return t == ops::KvType::kF16 ? 2 : 4; }

static size_t k_bytes(const LayerStateShape& s, int64_t n_ctx, ops::KvType t) {
  return s.has_kv() ? static_cast<size_t>(s.n_head_kv * n_ctx * s.head_dim) * kv_elem_bytes(t) : 0;
}

static size_t v_bytes(const LayerStateShape& s, int64_t n_ctx, ops::KvType t) {
  return static_cast<size_t>(s.n_head_kv * n_ctx * s.v_row()) * kv_elem_bytes(t);
}

SequenceState::SequenceState(backend::Backend& be, StateShape shape, int64_t n_ctx, ops::KvType kv_type)
    : be_(&be), shape_(std::move(shape)), n_ctx_(n_ctx), kv_type_(kv_type) {
  if (n_ctx < 1) fail("context size must be >= 1 (got %lld)", static_cast<long long>(n_ctx));
  // Draft layers go to the nested state, at the same index; here they are empty.
  StateShape draft_shape(shape_.size());
  bool any_draft = false;
  for (size_t i = 0; i < shape_.size(); ++i)
    if (shape_[i].draft) {
      draft_shape[i] = shape_[i];
      draft_shape[i].draft = false;
      shape_[i] = LayerStateShape{};
      any_draft = true;
    }
  layers_.resize(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) {
    const LayerStateShape& s = shape_[i];
    LayerState& l = layers_[i];
    if (s.has_kv()) {
      l.k = be.alloc(backend::BufferKind::kState, k_bytes(s, n_ctx, kv_type));
      if (s.v_row() > 0) l.v = be.alloc(backend::BufferKind::kState, v_bytes(s, n_ctx, kv_type));
    }
    if (s.conv_floats > 0) l.conv = be.alloc(backend::BufferKind::kState, static_cast<size_t>(s.conv_floats) * sizeof(float));
    if (s.ssm_floats > 0) l.ssm = be.alloc(backend::BufferKind::kState, static_cast<size_t>(s.ssm_floats) * sizeof(float));
    has_recurrent_ |= s.recurrent();
  }
  if (any_draft) draft_ = std::make_unique<SequenceState>(be, std::move(draft_shape), n_ctx, kv_type);
}

void SequenceState::reset() {
  n_past_ = 0;
  ++epoch_;
  recording_ = false;
  ckpt_n_ = 0;
  // KV rows past n_past are never read, so only the recurrent states need clearing.
  for (auto& l : layers_) {
    if (l.conv) l.conv->zero();
    if (l.ssm) l.ssm->zero();
  }
  if (draft_) draft_->reset();
}

void SequenceState::release_rows(int64_t from) {
  from = std::max<int64_t>(0, std::min(from, n_ctx_));
  if (from < n_past_) fail("internal: release_rows(%lld) below n_past %lld", static_cast<long long>(from),
                           static_cast<long long>(n_past_));
  const size_t eb = kv_elem_bytes(kv_type_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerStateShape& s = shape_[i];
    LayerState& l = layers_[i];
    // K and V are [n_head_kv, n_ctx, row]: the rows past `from` of each head are one range.
    for (auto [buf, row] : {std::pair{l.k.get(), s.head_dim}, {l.v.get(), s.v_row()}}) {
      if (!buf || row <= 0) continue;
      const size_t head = static_cast<size_t>(n_ctx_ * row) * eb;
      for (int64_t g = 0; g < s.n_head_kv; ++g)
        buf->discard(static_cast<size_t>(g) * head + static_cast<size_t>(from * row) * eb,
                     static_cast<size_t>((n_ctx_ - from) * row) * eb);
    }
  }
  if (draft_) draft_->release_rows(std::max(from, draft_->n_past()));
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
    for (const auto* buf : {&l.k, &l.v, &l.conv, &l.ssm, &l.conv_ckpt, &l.ssm_ckpt})
      if (*buf) b += (*buf)->bytes();
  return b + (draft_ ? draft_->bytes() : 0);
}

size_t SequenceState::bytes_for(const StateShape& shape, int64_t n_ctx, ops::KvType kv_type) {
  size_t b = 0;
  for (const LayerStateShape& s : shape)
    b += k_bytes(s, n_ctx, kv_type) + v_bytes(s, n_ctx, kv_type) + static_cast<size_t>(s.conv_floats + s.ssm_floats) * sizeof(float);
  return b;
}

// ---- snapshots

size_t StateSnapshot::bytes() const {
  size_t b = 0;
  for (const auto* vv : {&k, &v, &conv, &ssm})
    for (const auto& x : *vv) b += x.size();
  return b + (draft ? draft->bytes() : 0);
}

StateSnapshot SequenceState::snapshot() const {
  StateSnapshot s;
  s.n_past = n_past_;
  const size_t esz = kv_elem_bytes(kv_type_);
  s.k.resize(layers_.size());
  s.v.resize(layers_.size());
  s.conv.resize(layers_.size());
  s.ssm.resize(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerState& l = layers_[i];
    const LayerStateShape& sh = shape_[i];
    if (l.k) {  // the first n_past rows of each head of [n_head_kv][n_ctx][row]
      const size_t n = static_cast<size_t>(n_past_);
      for (auto [buf, out, dim] : {std::tuple{l.k.get(), &s.k[i], sh.head_dim}, std::tuple{l.v.get(), &s.v[i], sh.v_row()}}) {
        if (!buf) continue;
        const size_t row = static_cast<size_t>(dim) * esz;
        out->resize(static_cast<size_t>(sh.n_head_kv) * n * row);
        for (int64_t h = 0; h < sh.n_head_kv; ++h)
          buf->read(static_cast<size_t>(h * n_ctx_) * row, out->data() + static_cast<size_t>(h) * n * row, n * row);
      }
    }
    for (auto [buf, out] : {std::pair{l.conv.get(), &s.conv[i]}, std::pair{l.ssm.get(), &s.ssm[i]}})
      if (buf) {
        out->resize(buf->bytes());
        buf->read(0, out->data(), out->size());
      }
  }
  if (draft_) s.draft = std::make_unique<StateSnapshot>(draft_->snapshot());
  return s;
}

void SequenceState::restore(const StateSnapshot& s) {
  ++epoch_;
  if (s.k.size() != layers_.size() || s.n_past > n_ctx_ || (s.draft != nullptr) != (draft_ != nullptr))
    fail("state snapshot of %zu layers and %lld positions does not fit this state (%zu layers, context %lld)",
         s.k.size(), static_cast<long long>(s.n_past), layers_.size(), static_cast<long long>(n_ctx_));
  const size_t esz = kv_elem_bytes(kv_type_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    LayerState& l = layers_[i];
    const LayerStateShape& sh = shape_[i];
    if (l.k) {
      const size_t n = static_cast<size_t>(s.n_past);
      for (auto [buf, in, dim] : {std::tuple{l.k.get(), &s.k[i], sh.head_dim}, std::tuple{l.v.get(), &s.v[i], sh.v_row()}}) {
        if (!buf) continue;
        const size_t row = static_cast<size_t>(dim) * esz;
        if (in->size() != static_cast<size_t>(sh.n_head_kv) * n * row) fail("state snapshot: layer %zu KV size", i);
        for (int64_t h = 0; h < sh.n_head_kv; ++h)
          buf->write(static_cast<size_t>(h * n_ctx_) * row, in->data() + static_cast<size_t>(h) * n * row, n * row);
      }
    }
    for (auto [buf, in] : {std::pair{l.conv.get(), &s.conv[i]}, std::pair{l.ssm.get(), &s.ssm[i]}})
      if (buf) {
        if (in->size() != buf->bytes()) fail("state snapshot: layer %zu recurrent state size", i);
        buf->write(0, in->data(), in->size());
      }
  }
  n_past_ = s.n_past;
  recording_ = false;
  ckpt_n_ = 0;
  if (draft_) draft_->restore(*s.draft);
}

// ---- checkpoints

void SequenceState::set_checkpoint_capacity(backend::Backend& be, int64_t k) {
  if (k < 0) fail("checkpoint capacity must be >= 0 (got %lld)", static_cast<long long>(k));
  ckpt_cap_ = k;
  ckpt_n_ = 0;
  recording_ = false;
  for (size_t i = 0; i < layers_.size(); ++i) {
    LayerState& l = layers_[i];
    const LayerStateShape& s = shape_[i];
    l.conv_ckpt.reset();
    l.ssm_ckpt.reset();
    if (k == 0) continue;
    if (s.conv_floats > 0)
      l.conv_ckpt = be.alloc(backend::BufferKind::kState, static_cast<size_t>(k * s.conv_floats) * sizeof(float));
    if (s.ssm_floats > 0)
      l.ssm_ckpt = be.alloc(backend::BufferKind::kState, static_cast<size_t>(k * s.ssm_floats) * sizeof(float));
  }
}

void SequenceState::begin_forward(int64_t n) {
  // One token: the only position it could return to is the one it reaches (a no-op), so nothing is kept.
  recording_ = has_recurrent_ && n >= 2 && n <= ckpt_cap_;
  ckpt_base_ = n_past_;
  ckpt_n_ = recording_ ? n : 0;
}

void SequenceState::rollback(int64_t n) {
  if (n == n_past_) return;
  if (n < 0 || n > n_past_)
    fail("rollback to position %lld: the sequence has %lld", static_cast<long long>(n), static_cast<long long>(n_past_));
  if (has_recurrent_) {
    if (ckpt_n_ == 0 || n_past_ != ckpt_base_ + ckpt_n_ || n <= ckpt_base_)
      fail("rollback to position %lld: only positions %lld..%lld can be returned to (checkpoints of the last forward)",
           static_cast<long long>(n), static_cast<long long>(ckpt_n_ ? ckpt_base_ + 1 : n_past_),
           static_cast<long long>(n_past_));
    const int64_t slot = n - ckpt_base_ - 1;
    for (size_t i = 0; i < layers_.size(); ++i) {
      LayerState& l = layers_[i];
      const LayerStateShape& s = shape_[i];
      if (l.conv && l.conv_ckpt)
        be_->copy(l.conv->data(), l.conv_ckpt->data() + static_cast<size_t>(slot * s.conv_floats) * sizeof(float),
                  static_cast<size_t>(s.conv_floats) * sizeof(float));
      if (l.ssm && l.ssm_ckpt)
        be_->copy(l.ssm->data(), l.ssm_ckpt->data() + static_cast<size_t>(slot * s.ssm_floats) * sizeof(float),
                  static_cast<size_t>(s.ssm_floats) * sizeof(float));
    }
    ckpt_n_ = slot + 1;  // the slots up to n stay valid: a second rollback may go further back
  }
  n_past_ = n;
}

}  // namespace tern::models
