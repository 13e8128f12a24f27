#include "models/qwen35moe/config.h"

#include <algorithm>

#include "core/error.h"
#include "models/blocks/tensor_split.h"
#include "models/loader.h"
#include "formats/gguf.h"

namespace tern::models::qwen35moe {

int64_t Config::n_attention_layers() const {
  return std::count(layer_kind.begin(), layer_kind.end(), LayerKind::kAttention);
}

namespace {

// Sane upper bounds, so a lying file cannot ask for absurd allocations before tensor shapes are checked.
constexpr int64_t kMaxLayers = 4096, kMaxWidth = 1 << 20, kMaxHeads = 4096, kMaxExperts = 1 << 16;


}  // namespace

Config Config::from_gguf(const gguf::File& f) {
  Config c;
  c.arch = std::string(f.get_str("general.architecture"));
  if (c.arch != "qwen35moe" && c.arch != "qwen35" && c.arch != "qwen3next")
    fail("%s: architecture '%s' is not a Qwen3.5/Qwen3-Next model (qwen35moe, qwen35, qwen3next)", f.name().c_str(),
         c.arch.c_str());
  KeyReader r{f, c.arch};
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
  c.n_head_kv = r.req("attention.head_count_kv", 1, c.n_head);
  if (c.n_head % c.n_head_kv != 0)
    fail("%s: attention.head_count %lld is not a multiple of head_count_kv %lld", f.name().c_str(),
         static_cast<long long>(c.n_head), static_cast<long long>(c.n_head_kv));
  c.head_dim = r.req("attention.key_length", 1, kMaxWidth);
  const int64_t v_len = r.opt("attention.value_length", c.head_dim, 1, kMaxWidth);
  if (v_len != c.head_dim)
    fail("%s: attention.value_length %lld != key_length %lld (tern needs equal head sizes)", f.name().c_str(),
         static_cast<long long>(v_len), static_cast<long long>(c.head_dim));
  c.n_rot = r.opt("rope.dimension_count", c.head_dim, 2, c.head_dim);
  if (c.n_rot % 2) fail("%s: rope.dimension_count %lld must be even", f.name().c_str(), static_cast<long long>(c.n_rot));
  c.rope_freq_base = f.opt_f32(r.key("rope.freq_base")).value_or(10000.0f);
  if (!(c.rope_freq_base > 0.0f)) fail("%s: rope.freq_base must be > 0", f.name().c_str());

  c.conv_kernel = r.req("ssm.conv_kernel", 1, 64);
  c.head_k_dim = r.req("ssm.state_size", 1, kMaxWidth);
  c.n_k_heads = r.req("ssm.group_count", 1, kMaxHeads);
  c.n_v_heads = r.req("ssm.time_step_rank", 1, kMaxHeads);
  const int64_t d_inner = r.req("ssm.inner_size", 1, kMaxWidth * 16);
  if (c.n_v_heads % c.n_k_heads != 0 || d_inner % c.n_v_heads != 0)
    fail("%s: ssm.time_step_rank %lld must be a multiple of ssm.group_count %lld and divide ssm.inner_size %lld",
         f.name().c_str(), static_cast<long long>(c.n_v_heads), static_cast<long long>(c.n_k_heads),
         static_cast<long long>(d_inner));
  c.head_v_dim = d_inner / c.n_v_heads;

  if (c.arch == "qwen35") {
    c.n_ff = r.req("feed_forward_length", 1, kMaxWidth);
  } else {
    c.n_expert = r.req("expert_count", 1, kMaxExperts);
    c.n_expert_used = r.req("expert_used_count", 1, c.n_expert);
    c.n_ff_exp = r.req("expert_feed_forward_length", 1, kMaxWidth);
    c.n_ff_shexp = r.opt("expert_shared_feed_forward_length", 0, 0, kMaxWidth);
  }

  // Layer kinds: the hybrid rule (formats/hybrid_layers.h); the MTP blocks after the trunk are not run.
  c.layer_kind = gguf::read_hybrid_layers(f, c.arch, c.n_layer, 0).kinds;

  // Vocabulary size: the embedding's row count (checked against the tensor in weights).
  const gguf::TensorInfo& emb = f.get_tensor("token_embd.weight");
  c.n_vocab = emb.ne[1];
  return c;
}

Config rank_config(const Config& c, int ranks, int rank) {
  Config r = c;
  if (ranks == 1) return r;
  if (const auto a = head_share(c.n_head_kv, c.n_head / c.n_head_kv, ranks, rank)) {
    r.n_head = a->nk * a->ns;
    r.n_head_kv = a->nk;
  }
  if (const auto d = head_share(c.n_k_heads, c.n_v_heads / c.n_k_heads, ranks, rank)) {
    r.n_k_heads = d->nk;
    r.n_v_heads = d->nk * d->ns;
  }
  return r;
}

}  // namespace tern::models::qwen35moe
