#include "models/glm_dsa/config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/loader.h"

namespace tern::models::glm_dsa {

namespace {

// Sane upper bounds, so a lying file cannot ask for absurd allocations before tensor shapes are checked.
constexpr int64_t kMaxLayers = 4096, kMaxWidth = 1 << 20, kMaxHeads = 4096, kMaxExperts = 1 << 16;

}  // namespace

int64_t Config::n_full_indexer_layers() const { return std::count(idx_full.begin(), idx_full.end(), true); }

MlaParams Config::mla() const {
  MlaParams p;
  p.n_embd = n_embd;
  p.n_head = n_head;
  p.q_lora = q_lora;
  p.kv_lora = kv_lora;
  p.nope = nope;
  p.rope = rope;
  p.v_head = v_head;
  p.rope_freq_base = rope_freq_base;
  p.scale = 1.0f / std::sqrt(static_cast<float>(nope + rope));
  p.lora_eps = 1e-6f;  // HF builds q_a_layernorm / kv_a_layernorm with the class default (contract section 3)
  p.idx_heads = idx_heads;
  p.idx_dim = idx_dim;
  p.idx_topk = idx_topk;
  p.idx_eps = 1e-6f;   // the indexer's k_norm LayerNorm (contract section 3)
  p.form = mla_form;
  return p;
}

MoeParams Config::moe() const {
  MoeParams p;
  p.n_embd = n_embd;
  p.n_expert = n_expert;
  p.n_expert_used = n_expert_used;
  p.n_ff_exp = n_ff_exp;
  p.n_ff_shexp = n_ff_shexp;
  p.gating = gating;
  p.normalize = expert_norm;
  p.routed_scale = expert_scale;
  return p;
}

Config Config::from_gguf(const gguf::File& f) {
  Config c;
  c.arch = std::string(f.get_str("general.architecture"));
  if (c.arch != "glm-dsa") fail("%s: architecture '%s' is not GLM-5 (glm-dsa)", f.name().c_str(), c.arch.c_str());
  const KeyReader r{f, c.arch};
  const int64_t n_block = r.req("block_count", 1, kMaxLayers);
  c.n_nextn = r.opt("nextn_predict_layers", 0, 0, n_block - 1);
  c.n_layer = n_block - c.n_nextn;
  c.n_embd = r.req("embedding_length", 1, kMaxWidth);
  c.n_ctx_train = r.opt("context_length", 4096, 1, int64_t(1) << 31);
  c.rms_eps = f.get_f32(r.key("attention.layer_norm_rms_epsilon"));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f))
    fail("%s: key %s = %g, expected a value in (0, 1)", f.name().c_str(),
         r.key("attention.layer_norm_rms_epsilon").c_str(), c.rms_eps);

  c.n_head = r.req("attention.head_count", 1, kMaxHeads);
  const int64_t n_head_kv = r.req("attention.head_count_kv", 1, c.n_head);
  if (n_head_kv != 1)
    fail("%s: attention.head_count_kv = %lld: a glm-dsa file stores MLA as one latent head (1); an older conversion "
         "with the unsplit kv_b cannot be run, convert the checkpoint again", f.name().c_str(),
         static_cast<long long>(n_head_kv));
  c.q_lora = r.req("attention.q_lora_rank", 1, kMaxWidth);
  c.kv_lora = r.req("attention.kv_lora_rank", 1, kMaxWidth);
  c.rope = r.req("rope.dimension_count", 2, kMaxWidth);
  if (c.rope % 2) fail("%s: rope.dimension_count %lld must be even", f.name().c_str(), static_cast<long long>(c.rope));
  const int64_t k_mla = r.req("attention.key_length_mla", c.rope + 1, kMaxWidth);
  c.nope = k_mla - c.rope;
  c.v_head = r.req("attention.value_length_mla", 1, kMaxWidth);
  const int64_t k_len = r.opt("attention.key_length", c.kv_lora + c.rope, 1, kMaxWidth);
  const int64_t v_len = r.opt("attention.value_length", c.kv_lora, 1, kMaxWidth);
  if (k_len != c.kv_lora + c.rope || v_len != c.kv_lora)
    fail("%s: attention.key_length %lld / value_length %lld, expected kv_lora_rank + rope dims %lld / kv_lora_rank "
         "%lld (the absorbed MLA cache)", f.name().c_str(), static_cast<long long>(k_len),
         static_cast<long long>(v_len), static_cast<long long>(c.kv_lora + c.rope), static_cast<long long>(c.kv_lora));
  c.rope_freq_base = f.opt_f32(r.key("rope.freq_base")).value_or(10000.0f);
  if (!(c.rope_freq_base > 0.0f)) fail("%s: rope.freq_base must be > 0", f.name().c_str());
  if (f.find(r.key("rope.scaling.yarn_log_multiplier")) || f.find(r.key("rope.scaling.type")))
    fail("%s: RoPE scaling (YaRN) is not supported for glm-dsa yet (GLM-5 uses none)", f.name().c_str());

  c.idx_heads = r.req("attention.indexer.head_count", 1, kMaxHeads);
  c.idx_dim = r.req("attention.indexer.key_length", c.rope, kMaxWidth);
  c.idx_topk = r.req("attention.indexer.top_k", 1, int64_t(1) << 31);
  // Which layers run their own indexer: the key when present; else, as llama.cpp, all of them for GLM-5 / 5.1
  // (trained contexts under 1M) and GLM-5.2's pattern (layers 0, 1, then every fourth from 2) otherwise.
  c.idx_full.assign(static_cast<size_t>(c.n_layer), true);
  if (const gguf::Value* v = f.find(r.key("attention.indexer.types"))) {
    if (!v->is_array() || v->array_size() < static_cast<uint64_t>(c.n_layer))
      fail("%s: key %s must be an array of at least %lld booleans (one per layer)", f.name().c_str(),
           r.key("attention.indexer.types").c_str(), static_cast<long long>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) c.idx_full[static_cast<size_t>(i)] = v->array_i64(static_cast<uint64_t>(i)) != 0;
  } else if (c.n_ctx_train >= 1048576) {
    for (int64_t i = 0; i < c.n_layer; ++i) c.idx_full[static_cast<size_t>(i)] = i < 2 || (i - 2) % 4 == 0;
  }
  if (!c.idx_full.empty() && !c.idx_full[0])
    fail("%s: key %s: layer 0 must run its own indexer (a shared layer reuses an earlier layer's choice)",
         f.name().c_str(), r.key("attention.indexer.types").c_str());

  c.mtp_own_indexer = c.n_nextn > 0 && f.find_tensor(blk(c.n_layer, "indexer.attn_k.weight")) != nullptr;

  c.n_dense = r.opt("leading_dense_block_count", 0, 0, c.n_layer);
  if (c.n_dense > 0) c.n_ff = r.req("feed_forward_length", 1, kMaxWidth);
  if (c.n_dense < c.n_layer || c.n_nextn > 0) {
    c.n_expert = r.req("expert_count", 1, kMaxExperts);
    c.n_expert_used = r.req("expert_used_count", 1, c.n_expert);
    c.n_ff_exp = r.req("expert_feed_forward_length", 1, kMaxWidth);
    c.n_ff_shexp = c.n_ff_exp * r.opt("expert_shared_count", 0, 0, 64);
    c.expert_norm = f.opt_bool(r.key("expert_weights_norm")).value_or(false);
    c.expert_scale = f.opt_f32(r.key("expert_weights_scale")).value_or(1.0f);
    if (!(c.expert_scale > 0.0f)) fail("%s: expert_weights_scale must be > 0", f.name().c_str());
    const int64_t gating = r.opt("expert_gating_func", 0, 0, 4);
    if (gating == 1) c.gating = ops::Gating::kSoftmax;
    else if (gating == 0 || gating == 2) c.gating = ops::Gating::kSigmoid;  // 0 (absent): llama.cpp's default, sigmoid
    else fail("%s: expert_gating_func %lld is not supported (1 softmax, 2 sigmoid)", f.name().c_str(), static_cast<long long>(gating));
    const int64_t groups = r.opt("expert_group_count", 1, 1, kMaxExperts);
    const int64_t groups_used = r.opt("expert_group_used_count", groups, 1, groups);
    if (groups_used < groups)
      fail("%s: group-limited expert routing (%lld of %lld groups) is not supported yet (GLM-5 uses one group)",
           f.name().c_str(), static_cast<long long>(groups_used), static_cast<long long>(groups));
  }
  c.n_vocab = f.get_tensor("token_embd.weight").ne[1];
  return c;
}

}  // namespace tern::models::glm_dsa
