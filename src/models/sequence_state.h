// A sequence's state, for any hybrid model: per layer, a KV cache for attention layers (f32 or f16,
// [n_head_kv, n_ctx, head_dim] for K and for V) and, for recurrent layers, a conv state and a recurrent state (f32,
// sizes the model says), each a buffer of the model's backend (kState). Models describe the geometry (StateShape);
// the runtime, the scheduler and the prefix cache hold and snapshot states (Buffer::read / write) without knowing
// the model. Layout: docs/STATE_LAYOUT.md.
// The context size is fixed at creation; a forward that would pass it is refused (never overwritten).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "ops/attention.h"

namespace tern::models {

struct LayerStateShape {
  int64_t n_head_kv = 0, head_dim = 0;  // attention layer: K and V caches; 0 for a layer without one
  int64_t conv_floats = 0;              // recurrent layer: conv state (e.g. [conv_dim][kernel - 1])
  int64_t ssm_floats = 0;               // recurrent layer: recurrent state (e.g. [n_v_heads][head_k_dim][head_v_dim])
  bool has_kv() const { return n_head_kv > 0 && head_dim > 0; }
};
using StateShape = std::vector<LayerStateShape>;  // [n_layer]

struct LayerState {
  std::unique_ptr<backend::Buffer> k, v;   // attention layers: KV cache bytes (null elsewhere)
  std::unique_ptr<backend::Buffer> conv;   // recurrent layers: conv state, f32 (null elsewhere)
  std::unique_ptr<backend::Buffer> ssm;    // recurrent layers: recurrent state, f32 (null elsewhere)
};

class SequenceState {
 public:
  SequenceState(backend::Backend& be, StateShape shape, int64_t n_ctx, ops::KvType kv_type);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_past() const { return n_past_; }
  void advance(int64_t n) { n_past_ += n; }
  void reset();  // empty sequence: n_past 0, recurrent states zeroed
  ops::KvType kv_type() const { return kv_type_; }
  int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
  ops::KvCacheView kv(int64_t layer);
  LayerState& layer(int64_t i) { return layers_[static_cast<size_t>(i)]; }
  const LayerStateShape& shape(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  size_t bytes() const;

  // Bytes a sequence of this geometry needs (the memory planner's figure).
  static size_t bytes_for(const StateShape& shape, int64_t n_ctx, ops::KvType kv_type);

 private:
  StateShape shape_;
  int64_t n_ctx_;
  int64_t n_past_ = 0;
  ops::KvType kv_type_;
  std::vector<LayerState> layers_;
};

}  // namespace tern::models
