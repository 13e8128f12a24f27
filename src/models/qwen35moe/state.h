// Per-sequence state of a Qwen3.5-MoE model (layout: docs/STATE_LAYOUT.md): a KV cache for each attention
// layer (f32 or f16, [n_head_kv, n_ctx, head_dim]), and for each DeltaNet layer the conv state
// [conv_dim, kernel - 1] and the recurrent state [n_v_heads, head_k_dim, head_v_dim], both f32.
// The context size is fixed at creation; a forward that would pass it is refused (never overwritten).
#pragma once
#include <cstdint>
#include <vector>

#include "models/qwen35moe/config.h"
#include "ops/attention.h"

namespace tern::models::qwen35moe {

struct LayerState {
  std::vector<uint8_t> k, v;   // attention layers: KV cache bytes
  std::vector<float> conv;     // DeltaNet layers: [conv_dim][kernel - 1]
  std::vector<float> ssm;      // DeltaNet layers: [n_v_heads][head_k_dim][head_v_dim]
};

class SequenceState {
 public:
  SequenceState(const Config& c, int64_t n_ctx, ops::KvType kv_type);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_past() const { return n_past_; }
  void advance(int64_t n) { n_past_ += n; }
  void reset();  // empty sequence: n_past 0, states zeroed
  ops::KvType kv_type() const { return kv_type_; }
  ops::KvCacheView kv(int64_t layer);
  LayerState& layer(int64_t i) { return layers_[i]; }
  size_t bytes() const;

  // Bytes a sequence of this geometry needs (the memory planner's figure).
  static size_t bytes_for(const Config& c, int64_t n_ctx, ops::KvType kv_type);

 private:
  const Config* config_;
  int64_t n_ctx_;
  int64_t n_past_ = 0;
  ops::KvType kv_type_;
  std::vector<LayerState> layers_;
};

}  // namespace tern::models::qwen35moe
