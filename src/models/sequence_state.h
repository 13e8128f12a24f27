// A sequence's state, for any hybrid model: per layer, a KV cache for attention layers (f32, f16, q8_0 or q4_0 rows,
// [n_head_kv, n_ctx, row] for K and for V, plus an f16 shadow for a quantized cache's sink and window rows: see
// ops::KvConfig) and, for recurrent layers, a conv state and a recurrent state (f32,
// sizes the model says), each a buffer of the model's backend (kState). Models describe the geometry (StateShape);
// the runtime, the scheduler and the prefix cache hold and snapshot states (Buffer::read / write) without knowing
// the model. Layout: docs/STATE_LAYOUT.md.
// The context size is fixed at creation; a forward that would pass it is refused (never overwritten).
// A model with a draft block (MTP) flags that block's layer in the shape: it lives in a nested state, draft(), with
// its own positions. Snapshots (prefix cache) and checkpoints (speculative decoding) are taken here, so callers
// never copy layouts themselves.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "ops/attention.h"

namespace tern::models {

struct LayerStateShape {
  int64_t n_head_kv = 0, head_dim = 0;  // attention layer: K and V caches; 0 for a layer without one
  // V rows' size when it differs from K's (-1: head_dim; 0: no V cache). MLA (glm-dsa) keeps its latent rows in K
  // (the values are their first kv_lora_rank dims) and the sparse-attention indexer's keys in V.
  int64_t v_dim = -1;
  int64_t conv_floats = 0;              // recurrent layer: conv state (e.g. [conv_dim][kernel - 1])
  int64_t ssm_floats = 0;               // recurrent layer: recurrent state (e.g. [n_v_heads][head_k_dim][head_v_dim])
  bool draft = false;                   // a layer of the draft block (MTP): held by SequenceState::draft()
  // Rows read by the layer's own kernels (MLA latents, indexer keys), not ops::attention_causal: f32 / f16 only, no
  // rotation, sink or window.
  bool plain_rows = false;
  bool has_kv() const { return n_head_kv > 0 && head_dim > 0; }
  int64_t v_row() const { return !has_kv() ? 0 : v_dim < 0 ? head_dim : v_dim; }
  bool recurrent() const { return conv_floats > 0 || ssm_floats > 0; }
};
using StateShape = std::vector<LayerStateShape>;  // [n_layer]

struct LayerState {
  std::unique_ptr<backend::Buffer> k, v;   // attention layers: KV cache bytes (null elsewhere)
  std::unique_ptr<backend::Buffer> k16, v16;  // their f16 shadows (quantized rows with a sink or window), or null
  std::unique_ptr<backend::Buffer> conv;   // recurrent layers: conv state, f32 (null elsewhere)
  std::unique_ptr<backend::Buffer> ssm;    // recurrent layers: recurrent state, f32 (null elsewhere)
  // Checkpoints (recurrent layers, when enabled): the conv and recurrent states after each token of the last
  // forward, [capacity][conv_floats] and [capacity][ssm_floats].
  std::unique_ptr<backend::Buffer> conv_ckpt, ssm_ckpt;
};

// A host copy of a state at n_past: the first n_past rows of each KV cache, the recurrent states, and the draft
// state's. Restored into a state of the same shape and context (prefix cache).
struct StateSnapshot {
  int64_t n_past = 0;
  std::vector<std::vector<uint8_t>> k, v;      // [layer] [n_head_kv][n_past][row bytes]
  // [layer] the shadows' sink rows [0, min(sink, n_past)) and window rows [max(sink, n_past - window), n_past)
  // of each head, f16
  std::vector<std::vector<uint8_t>> k16, v16;
  std::vector<std::vector<uint8_t>> conv, ssm; // [layer] raw f32 bytes
  std::unique_ptr<StateSnapshot> draft;
  size_t bytes() const;
};

class SequenceState {
 public:
  SequenceState(backend::Backend& be, StateShape shape, int64_t n_ctx, const ops::KvConfig& kv);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_past() const { return n_past_; }
  // Counts reset() and restore() calls: a state that holds another sequence's tokens now, even at the same n_past
  // (the decode loop keeps per-sequence drafting state keyed on it).
  uint64_t epoch() const { return epoch_; }
  // n more positions are stored; shadow rows that have left the window (by more than kShadowSlack positions, the
  // furthest a rollback may go) give their pages back.
  void advance(int64_t n);
  static constexpr int64_t kShadowSlack = 64;
  void reset();  // empty sequence: n_past 0, recurrent states zeroed (the draft state's too)
  // Gives the memory behind KV rows [from, n_ctx) back to the system (the draft state's too; whole pages only):
  // those rows are never read before they are written again. The server calls it when a sequence's request ends,
  // so a sequence holds memory only for the tokens it runs.
  void release_rows(int64_t from);
  // The draft block's state (its own KV and positions), or null when the model has none.
  SequenceState* draft() { return draft_.get(); }

  StateSnapshot snapshot() const;
  void restore(const StateSnapshot& s);  // throws Error when the snapshot does not fit this state

  // Checkpoints for speculative decoding. With capacity k > 0, a forward of 2..k tokens keeps the recurrent
  // states after each of its tokens (the model's blocks call begin_forward / checkpoint slots), so rollback(n) can
  // return to any position n from the first of those tokens to n_past. KV rows need no copy: rows past n_past are
  // never read and are overwritten by the next forward. A state without recurrent layers rolls back anywhere.
  void set_checkpoint_capacity(backend::Backend& be, int64_t k);
  int64_t checkpoint_capacity() const { return ckpt_cap_; }
  void begin_forward(int64_t n);             // called by the model before a forward of n tokens
  bool recording() const { return recording_; }  // this forward keeps per-token recurrent states
  void rollback(int64_t n_past);             // throws Error outside the range that can be returned to
  backend::Backend* backend() const { return be_; }
  const ops::KvConfig& kv_config() const { return kv_; }
  int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
  ops::KvCacheView kv(int64_t layer);
  LayerState& layer(int64_t i) { return layers_[static_cast<size_t>(i)]; }
  const LayerStateShape& shape(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  size_t bytes() const;

  // Bytes a sequence of this geometry needs (the memory planner's figure): resident pages, so a shadow counts its
  // sink, window and slack rows (plus page rounding), not n_ctx rows.
  static size_t bytes_for(const StateShape& shape, int64_t n_ctx, const ops::KvConfig& kv);
  // The same split into what a sequence holds at any length and what each stored token adds.
  static size_t fixed_bytes(const StateShape& shape, const ops::KvConfig& kv);
  static size_t token_bytes(const StateShape& shape, const ops::KvConfig& kv);

 private:
  backend::Backend* be_;
  StateShape shape_;
  int64_t n_ctx_;
  int64_t n_past_ = 0;
  uint64_t epoch_ = 0;
  ops::KvConfig kv_;
  int64_t shadow_kept_ = 0;  // shadow rows [sink, shadow_kept_) may have been given back
  void trim_shadow();
  std::vector<LayerState> layers_;
  std::unique_ptr<SequenceState> draft_;
  bool has_recurrent_ = false;
  int64_t ckpt_cap_ = 0;
  bool recording_ = false;
  int64_t ckpt_base_ = 0, ckpt_n_ = 0;  // the recorded forward: positions ckpt_base_ + 1 .. ckpt_base_ + ckpt_n_
};

}  // namespace tern::models
