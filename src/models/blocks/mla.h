// Multi-head latent attention with DeepSeek's sparse-attention ("lightning") indexer (contract
// /work/shared/spec/glm_moe_dsa.md sections 6-8): queries through a low-rank projection and its norm, keys and values
// as one compressed latent per token (its norm, plus a RoPE key shared by all heads) kept in the sequence's cache.
// Two forms of the same attention, chosen per segment (MlaForm): absorbed (the per-head key up-projection absorbed
// into the query, the value up-projection applied after the softmax-weighted sum; decode) and expanded (per-head keys
// and values expanded from the latent rows; long prefill segments that attend every key). The indexer scores every cached key with its own cheap heads and restricts each query to
// its top-k keys; a layer without its own indexer ("shared", GLM-5.2) reuses the selection of the last layer that
// had one. Used by glm-dsa; knows nothing of a particular model.
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/blocks/linear.h"
#include "models/dump.h"
#include "models/model.h"

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
  MlaForm form = MlaForm::kAuto;  // models/model.h; kAuto: mla_expanded_pays per segment
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
  Linear wk_b_t;                  // the same transposed, {kv_lora, nope * n_head} (mla_key_expansion): the expanded
                                  // form's key up-projection; absent: segments run absorbed
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
  Scratch xlat, xc, xkn, xv, xk, xvh;       // the expanded form: latent rows, per-head keys and values
  std::vector<int32_t> pos;                 // host: positions of one segment
  std::vector<MlaSelection> selections;     // [segment]: carried from a full-indexer layer to the shared ones after it
};

// The measured rule of MlaForm::kAuto for a segment of n new tokens after p0 cached ones whose every query sees
// every causal key (a sparse selection always runs absorbed): the expanded form's attention saves a fixed time
// per (query, key) pair but must expand the p0 past latent rows again (the new rows' expansion costs what the
// absorbed form's query absorption and value projection cost). docs/BENCHMARKS.md has the measurement.
bool mla_expanded_pays(int64_t n, int64_t p0);

// Floats of scratch the expanded form grows for a segment whose past and new rows number P (latent rows, their
// expansion a group of heads at a time): the memory planner's figure.
int64_t mla_expanded_scratch_floats(const MlaParams& c, int64_t P);

// The expanded form's key up-projection: wk_b {nope, kv_lora, n_head} (per head kv_lora rows of nope) transposed
// to rows (h * nope + j) of kv_lora, written as `type` (F32, F16 or Q8_0) into `dst` (quant::row_size bytes per
// row; host memory). Throws Error for a type tern cannot write.
void mla_key_expansion(const Linear& wk_b, int64_t nope, int64_t kv_lora, int64_t n_head, quant::Type type,
                       uint8_t* dst);

// x, y: [n_rows, n_embd]; y is overwritten with the block output (before the residual add). The sequences' caches:
// state->layer(layer).k holds the latent rows [n_ctx, kv_lora + rope], .v the indexer keys [n_ctx, idx_dim] (a layer
// with its own indexer). A layer without an indexer weight set reads s.selections as the last indexer layer left it.
void mla_block(backend::Backend& be, const MlaParams& c, const MlaWeights& w, int layer,
               const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y, MlaScratch& s,
               const TensorDump& dump);

}  // namespace tern::models
