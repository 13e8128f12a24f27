#include "models/sequence_state.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace tern::models {

namespace {

size_t k_row(const LayerStateShape& s, const ops::KvConfig& kv) {
  return s.has_kv() ? static_cast<size_t>(ops::kv_row_bytes(kv.k, s.head_dim)) : 0;
}
size_t v_row(const LayerStateShape& s, const ops::KvConfig& kv) {
  return s.v_row() > 0 ? static_cast<size_t>(ops::kv_row_bytes(kv.v, s.v_row())) : 0;
}
// Shadow rows a sequence keeps resident: sink + window + the rollback slack, plus a page either side per head.
size_t shadow_bytes(const LayerStateShape& s, int64_t dim, int64_t n_ctx, const ops::KvConfig& kv) {
  const int64_t row = dim * 2;
  const int64_t kept = kv.sink + kv.window + SequenceState::kShadowSlack + 2 * ((4096 + row - 1) / row);
  return static_cast<size_t>(s.n_head_kv * std::min(n_ctx, kept) * row);
}

}  // namespace

SequenceState::SequenceState(backend::Backend& be, StateShape shape, int64_t n_ctx, const ops::KvConfig& kv)
    : be_(&be), shape_(std::move(shape)), n_ctx_(n_ctx), kv_(kv) {
  if (n_ctx < 1) fail("context size must be >= 1 (got %lld)", static_cast<long long>(n_ctx));
  if (kv_.sink < 0 || kv_.window < 0)
    fail("--kv-sink and --kv-window must be >= 0 (got %lld, %lld)", static_cast<long long>(kv_.sink),
         static_cast<long long>(kv_.window));
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
    if (s.has_kv() && s.plain_rows &&
        (ops::kv_quantized(kv_.k) || ops::kv_quantized(kv_.v) || kv_.rotate || kv_.k != kv_.v))
      fail("this model's attention cache (MLA latent rows) is kept as f16 or f32 only, one type for K and V, "
           "without rotation: K %s / V %s%s is not supported for it",
           ops::kv_type_name(kv_.k), ops::kv_type_name(kv_.v), kv_.rotate ? " rotated" : "");
    if (s.has_kv()) {
      for (auto [t, dim] : {std::pair{kv_.k, s.head_dim}, std::pair{kv_.v, s.v_row()}})
        if (dim > 0 && ops::kv_quantized(t) && dim % 32 != 0)
          fail("a %s KV cache needs rows that are a multiple of 32 values (layer %zu has %lld); use --kv-type f16",
               ops::kv_type_name(t), i, static_cast<long long>(dim));
      const size_t rows = static_cast<size_t>(s.n_head_kv * n_ctx);
      l.k = be.alloc(backend::BufferKind::kState, rows * k_row(s, kv_));
      if (s.v_row() > 0) l.v = be.alloc(backend::BufferKind::kState, rows * v_row(s, kv_));
      if (kv_.shadow_k()) l.k16 = be.alloc(backend::BufferKind::kState, rows * static_cast<size_t>(s.head_dim) * 2);
      if (kv_.shadow_v() && s.v_row() > 0)
        l.v16 = be.alloc(backend::BufferKind::kState, rows * static_cast<size_t>(s.v_row()) * 2);
    }
    if (s.conv_floats > 0) l.conv = be.alloc(backend::BufferKind::kState, static_cast<size_t>(s.conv_floats) * sizeof(float));
    if (s.ssm_floats > 0) l.ssm = be.alloc(backend::BufferKind::kState, static_cast<size_t>(s.ssm_floats) * sizeof(float));
    has_recurrent_ |= s.recurrent();
  }
  if (any_draft) draft_ = std::make_unique<SequenceState>(be, std::move(draft_shape), n_ctx, kv);
}

void SequenceState::advance(int64_t n) {
  n_past_ += n;
  trim_shadow();
}

void SequenceState::trim_shadow() {
  if (!kv_.shadow_k() && !kv_.shadow_v()) return;
  const int64_t upto = n_past_ - kv_.window - kShadowSlack;  // rows below this are never read from the shadow again
  if (upto <= std::max(shadow_kept_, kv_.sink)) return;
  const int64_t from = std::max(shadow_kept_, kv_.sink);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerStateShape& s = shape_[i];
    LayerState& l = layers_[i];
    for (auto [buf, dim] : {std::pair{l.k16.get(), s.head_dim}, {l.v16.get(), s.v_row()}}) {
      if (!buf) continue;
      const size_t row = static_cast<size_t>(dim) * 2;
      for (int64_t g = 0; g < s.n_head_kv; ++g)
        buf->discard(static_cast<size_t>(g * n_ctx_ + from) * row, static_cast<size_t>(upto - from) * row);
    }
  }
  shadow_kept_ = upto;
}

void SequenceState::reset() {
  n_past_ = 0;
  shadow_kept_ = 0;
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
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerStateShape& s = shape_[i];
    LayerState& l = layers_[i];
    // Each buffer is [n_head_kv, n_ctx, row]: the rows past `from` of each head are one range.
    const std::pair<backend::Buffer*, size_t> bufs[] = {{l.k.get(), k_row(s, kv_)},
                                                        {l.v.get(), v_row(s, kv_)},
                                                        {l.k16.get(), static_cast<size_t>(s.head_dim) * 2},
                                                        {l.v16.get(), static_cast<size_t>(s.v_row()) * 2}};
    for (auto [buf, row] : bufs) {
      if (!buf || row == 0) continue;
      for (int64_t g = 0; g < s.n_head_kv; ++g)
        buf->discard(static_cast<size_t>(g * n_ctx_ + from) * row, static_cast<size_t>(n_ctx_ - from) * row);
    }
  }
  if (draft_) draft_->release_rows(std::max(from, draft_->n_past()));
}

ops::KvCacheView SequenceState::kv(int64_t layer) {
  LayerState& l = layers_[static_cast<size_t>(layer)];
  const LayerStateShape& s = shape_[static_cast<size_t>(layer)];
  ops::KvCacheView v;
  v.k_type = kv_.k;
  v.v_type = kv_.v;
  v.k = l.k ? l.k->data() : nullptr;
  v.v = l.v ? l.v->data() : nullptr;
  v.n_head_kv = s.n_head_kv;
  v.n_ctx = n_ctx_;
  v.head_dim = s.head_dim;
  v.k16 = l.k16 ? reinterpret_cast<uint16_t*>(l.k16->data()) : nullptr;
  v.v16 = l.v16 ? reinterpret_cast<uint16_t*>(l.v16->data()) : nullptr;
  v.sink = kv_.sink;
  v.window = kv_.window;
  v.rotate = kv_.rotate;
  return v;
}

size_t SequenceState::bytes() const {
  size_t b = 0;
  for (const auto& l : layers_)
    for (const auto* buf : {&l.k, &l.v, &l.k16, &l.v16, &l.conv, &l.ssm, &l.conv_ckpt, &l.ssm_ckpt})
      if (*buf) b += (*buf)->bytes();
  return b + (draft_ ? draft_->bytes() : 0);
}

size_t SequenceState::fixed_bytes(const StateShape& shape, const ops::KvConfig& kv) {
  size_t b = 0;
  for (const LayerStateShape& s : shape) {
    b += static_cast<size_t>(s.conv_floats + s.ssm_floats) * sizeof(float);
    if (s.has_kv() && kv.shadow_k()) b += shadow_bytes(s, s.head_dim, int64_t{1} << 40, kv);
    if (s.has_kv() && kv.shadow_v() && s.v_row() > 0) b += shadow_bytes(s, s.v_row(), int64_t{1} << 40, kv);
  }
  return b;
}

size_t SequenceState::token_bytes(const StateShape& shape, const ops::KvConfig& kv) {
  size_t b = 0;
  for (const LayerStateShape& s : shape) b += static_cast<size_t>(s.n_head_kv) * (k_row(s, kv) + v_row(s, kv));
  return b;
}

size_t SequenceState::bytes_for(const StateShape& shape, int64_t n_ctx, const ops::KvConfig& kv) {
  size_t b = token_bytes(shape, kv) * static_cast<size_t>(n_ctx);
  for (const LayerStateShape& s : shape) {
    b += static_cast<size_t>(s.conv_floats + s.ssm_floats) * sizeof(float);
    if (s.has_kv() && kv.shadow_k()) b += shadow_bytes(s, s.head_dim, n_ctx, kv);
    if (s.has_kv() && kv.shadow_v() && s.v_row() > 0) b += shadow_bytes(s, s.v_row(), n_ctx, kv);
  }
  return b;
}

// ---- snapshots

size_t StateSnapshot::bytes() const {
  size_t b = 0;
  for (const auto* vv : {&k, &v, &k16, &v16, &conv, &ssm})
    for (const auto& x : *vv) b += x.size();
  return b + (draft ? draft->bytes() : 0);
}

namespace {

// Rows a snapshot keeps of each head: the main store's [0, n); the shadow's sink and window rows.
struct RowRange {
  int64_t lo, hi;
};
std::vector<RowRange> shadow_ranges(const ops::KvConfig& kv, int64_t n) {
  const int64_t a = std::min(kv.sink, n), c = std::max(a, n - kv.window);
  std::vector<RowRange> r;
  if (a > 0) r.push_back({0, a});
  if (c < n) r.push_back({c, n});
  return r;
}

// The ranges of every head of a [n_head, n_ctx, row] buffer as one flat byte string (snapshot order).
size_t flat_bytes(const std::vector<RowRange>& ranges, int64_t n_head, size_t row) {
  size_t per_head = 0;
  for (const RowRange& r : ranges) per_head += static_cast<size_t>(r.hi - r.lo) * row;
  return static_cast<size_t>(n_head) * per_head;
}
template <class F>
void each_range(const std::vector<RowRange>& ranges, int64_t n_head, int64_t n_ctx, size_t row, F&& f) {
  size_t off = 0;
  for (int64_t h = 0; h < n_head; ++h)
    for (const RowRange& r : ranges) {
      const size_t n = static_cast<size_t>(r.hi - r.lo) * row;
      f(static_cast<size_t>(h * n_ctx + r.lo) * row, off, n);
      off += n;
    }
}
void save_rows(const backend::Buffer& buf, std::vector<uint8_t>* out, const std::vector<RowRange>& ranges,
               int64_t n_head, int64_t n_ctx, size_t row) {
  out->resize(flat_bytes(ranges, n_head, row));
  each_range(ranges, n_head, n_ctx, row, [&](size_t at, size_t off, size_t n) { buf.read(at, out->data() + off, n); });
}
void load_rows(backend::Buffer* buf, const std::vector<uint8_t>& in, const std::vector<RowRange>& ranges,
               int64_t n_head, int64_t n_ctx, size_t row, size_t layer) {
  if (in.size() != flat_bytes(ranges, n_head, row))
    fail("state snapshot: layer %zu KV size %zu, this state needs %zu", layer, in.size(),
         flat_bytes(ranges, n_head, row));
  each_range(ranges, n_head, n_ctx, row, [&](size_t at, size_t off, size_t n) { buf->write(at, in.data() + off, n); });
}

}  // namespace

StateSnapshot SequenceState::snapshot() const {
  StateSnapshot s;
  s.n_past = n_past_;
  for (auto* v : {&s.k, &s.v, &s.k16, &s.v16, &s.conv, &s.ssm}) v->resize(layers_.size());
  const std::vector<RowRange> all{{0, n_past_}}, shadow = shadow_ranges(kv_, n_past_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerState& l = layers_[i];
    const LayerStateShape& sh = shape_[i];
    if (l.k) save_rows(*l.k, &s.k[i], all, sh.n_head_kv, n_ctx_, k_row(sh, kv_));
    if (l.v) save_rows(*l.v, &s.v[i], all, sh.n_head_kv, n_ctx_, v_row(sh, kv_));
    if (l.k16) save_rows(*l.k16, &s.k16[i], shadow, sh.n_head_kv, n_ctx_, static_cast<size_t>(sh.head_dim) * 2);
    if (l.v16) save_rows(*l.v16, &s.v16[i], shadow, sh.n_head_kv, n_ctx_, static_cast<size_t>(sh.v_row()) * 2);
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
  if (s.k.size() != layers_.size() || s.k16.size() != layers_.size() || s.n_past > n_ctx_ ||
      (s.draft != nullptr) != (draft_ != nullptr))
    fail("state snapshot of %zu layers and %lld positions does not fit this state (%zu layers, context %lld)",
         s.k.size(), static_cast<long long>(s.n_past), layers_.size(), static_cast<long long>(n_ctx_));
  const std::vector<RowRange> all{{0, s.n_past}}, shadow = shadow_ranges(kv_, s.n_past);
  for (size_t i = 0; i < layers_.size(); ++i) {
    LayerState& l = layers_[i];
    const LayerStateShape& sh = shape_[i];
    if (l.k) load_rows(l.k.get(), s.k[i], all, sh.n_head_kv, n_ctx_, k_row(sh, kv_), i);
    if (l.v) load_rows(l.v.get(), s.v[i], all, sh.n_head_kv, n_ctx_, v_row(sh, kv_), i);
    if (l.k16) load_rows(l.k16.get(), s.k16[i], shadow, sh.n_head_kv, n_ctx_, static_cast<size_t>(sh.head_dim) * 2, i);
    if (l.v16) load_rows(l.v16.get(), s.v16[i], shadow, sh.n_head_kv, n_ctx_, static_cast<size_t>(sh.v_row()) * 2, i);
    for (auto [buf, in] : {std::pair{l.conv.get(), &s.conv[i]}, std::pair{l.ssm.get(), &s.ssm[i]}})
      if (buf) {
        if (in->size() != buf->bytes()) fail("state snapshot: layer %zu recurrent state size", i);
        buf->write(0, in->data(), in->size());
      }
  }
  n_past_ = s.n_past;
  shadow_kept_ = 0;
  trim_shadow();
  recording_ = false;
  ckpt_n_ = 0;
  if (draft_) draft_->restore(*s.draft);
}

// ---- checkpoints

void SequenceState::set_checkpoint_capacity(backend::Backend& be, int64_t k) {
  if (k < 0) fail("checkpoint capacity must be >= 0 (got %lld)", static_cast<long long>(k));
  if (k > kShadowSlack && (kv_.shadow_k() || kv_.shadow_v()))
    fail("speculative decoding keeps %lld positions to return to; a KV cache with a sink / window keeps %lld",
         static_cast<long long>(k), static_cast<long long>(kShadowSlack));
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
  if (shadow_kept_ > 0 && n < shadow_kept_ + kv_.window)  // the shadow rows the window at n needs were given back
    fail("rollback to position %lld: a KV cache with a window goes back at most %lld positions (has %lld)",
         static_cast<long long>(n), static_cast<long long>(kShadowSlack), static_cast<long long>(n_past_));
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
