// Multi-head latent attention with DeepSeek's sparse-attention ("lightning") indexer, in the absorbed form
// (contract /work/shared/spec/glm_moe_dsa.md sections 6-8): queries through a low-rank projection and its norm,
// keys and values as one compressed latent per token (its norm, plus a RoPE key shared by all heads) kept in the
// sequence's cache, the per-head key up-projection absorbed into the query and the value up-projection applied after
// the softmax-weighted sum. The indexer scores every cached key with its own cheap heads and restricts each query to
// its top-k keys; a layer without its own indexer ("shared", GLM-5.2) reuses the selection of the last layer that
// had one. Used by glm-dsa; knows nothing of a particular model.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/blocks/linear.h"
#include "models/dump.h"

namespace tern::models {

struct MlaParams {
  int64_t n_embd = 0, n_head = 0;
  int64_t q_lora = 0;      // q_lora_rank
  int64_t kv_lora = 0;     // kv_lora_rank: the latent (and the absorbed value) size
  int64_t nope = 0;        // qk_nope_head_dim
  int64_t rope = 0;        // qk_rope_head_dim: rotated dims of q (last in each head) and of the shared key
  int64_t v_head = 0;      // v_head_dim
  float rope_freq_base = 10000.0f;
  float scale = 0.0f;      // softmax scale: 1 / sqrt(nope + rope) (times mscale^2 under YaRN)
  float lora_eps = 1e-6f;  // q_a / kv_a RMSNorms
  // The indexer (0 heads: none in this model).
  int64_t idx_heads = 0, idx_dim = 0, idx_topk = 0;
  float idx_eps = 1e-6f;   // its key LayerNorm
  int64_t cache_dim() const { return kv_lora + rope; }
};

struct IndexerWeights {
  Linear wq_b;                  // {q_lora, idx_heads * idx_dim}
  Linear wk;                    // {n_embd, idx_dim}
  Linear proj;                  // {n_embd, idx_heads}: per-head weights
  backend::Floats k_norm, k_norm_b;  // [idx_dim] LayerNorm
  bool present() const { return wk.present(); }
};

struct MlaWeights {
  Linear wq_a;                    // {n_embd, q_lora}
  backend::Floats q_a_norm;       // [q_lora]
  Linear wq_b;                    // {q_lora, n_head * (nope + rope)}
  Linear wkv_a;                   // {n_embd, kv_lora + rope}
  backend::Floats kv_a_norm;      // [kv_lora]
  Linear wk_b;                    // {nope, kv_lora, n_head}: per head kv_lora rows of nope
  Linear wv_b;                    // {kv_lora, v_head, n_head}: per head v_head rows of kv_lora
  Linear wo;                      // {n_head * v_head, n_embd}
  IndexerWeights indexer;         // absent: a shared layer (reuses the last selection) or a model without one
};

// One sequence's key selection from the last layer that ran an indexer: per new token, up to topk positions.
struct MlaSelection {
  bool dense = true;              // every causal key (the context is within topk): no list
  std::vector<int32_t> sel, n_sel;  // [n_tokens, topk], [n_tokens] (host)
};

struct MlaScratch {
  Scratch qa, q, kva, c, kr, lat, qabs, qn, qt, obar, ob, oh, o, iq, ik, iw;
  std::vector<int32_t> pos;                 // host: positions of one segment
  std::vector<MlaSelection> selections;     // [segment]: carried from a full-indexer layer to the shared ones after it
};

// x, y: [n_rows, n_embd]; y is overwritten with the block output (before the residual add). The sequences' caches:
// state->layer(layer).k holds the latent rows [n_ctx, kv_lora + rope], .v the indexer keys [n_ctx, idx_dim] (a layer
// with its own indexer). A layer without an indexer weight set reads s.selections as the last indexer layer left it.
void mla_block(backend::Backend& be, const MlaParams& c, const MlaWeights& w, int layer,
               const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y, MlaScratch& s,
               const TensorDump& dump);

}  // namespace tern::models
