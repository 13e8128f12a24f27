// The GLM-5 (HF glm_moe_dsa -> GGUF glm-dsa) tensor table and plan. Names and transforms: spec glm_moe_dsa.md
// section 2 and llama.cpp's conversion/glm.py GlmMoeDsaModel over conversion/deepseek.py DeepseekV2Model (per-expert
// keys stacked, kv_b_proj split into attn_k_b / attn_v_b, e_score_correction_bias -> exp_probs_b.bias, the NextN
// block at layer index num_hidden_layers kept unless --no-mtp) and gguf-py tensor_mapping.py. Output order is
// llama.cpp's: checkpoint names sorted per file, stacked experts where the layer's last expert key sorts (down,
// gate, up), k_b then v_b where kv_b_proj sorts.
#include <algorithm>
#include <map>

#include "convert/contract.h"
#include "convert/contract_detail.h"
#include "core/error.h"

namespace tern::convert {

namespace {

using detail::fill;
using detail::match;
using detail::starts_with;
using S = TensorScope;
using X = Xform;
using R = Reorder;

enum Shape : int {
  kGH, kGVH, kGQa, kGQl, kGQb, kGKva, kGKvl, kGKvb, kGO, kGIdxQ, kGIdxK, kGIdxD, kGIdxW, kGFdH, kGHFd, kGEH, kGE, kGFH,
  kGHF, kGFsH, kGHFs, kGEh,
};

// Names after `model.` (or `model.language_model.`, which llama.cpp's filter_tensors folds to `model.`), and lm_head.
const std::vector<Rule> kRules = {
    {"lm_head.weight", "output.weight", S::kGlobal, X::kNone, R::kNone, kGVH},
    {"embed_tokens.weight", "token_embd.weight", S::kGlobal, X::kNone, R::kNone, kGVH},
    {"norm.weight", "output_norm.weight", S::kGlobal, X::kNone, R::kNone, kGH},
    {"layers.{L}.input_layernorm.weight", "blk.{L}.attn_norm.weight", S::kAny, X::kNone, R::kNone, kGH},
    {"layers.{L}.post_attention_layernorm.weight", "blk.{L}.ffn_norm.weight", S::kAny, X::kNone, R::kNone, kGH},
    // MLA.
    {"layers.{L}.self_attn.q_a_proj.weight", "blk.{L}.attn_q_a.weight", S::kAny, X::kNone, R::kNone, kGQa},
    {"layers.{L}.self_attn.q_a_layernorm.weight", "blk.{L}.attn_q_a_norm.weight", S::kAny, X::kNone, R::kNone, kGQl},
    {"layers.{L}.self_attn.q_b_proj.weight", "blk.{L}.attn_q_b.weight", S::kAny, X::kNone, R::kNone, kGQb},
    {"layers.{L}.self_attn.kv_a_proj_with_mqa.weight", "blk.{L}.attn_kv_a_mqa.weight", S::kAny, X::kNone, R::kNone,
     kGKva},
    {"layers.{L}.self_attn.kv_a_layernorm.weight", "blk.{L}.attn_kv_a_norm.weight", S::kAny, X::kNone, R::kNone, kGKvl},
    {"layers.{L}.self_attn.kv_b_proj.weight", "blk.{L}.attn_k_b.weight", S::kAny, X::kNone, R::kNone, kGKvb},
    {"layers.{L}.self_attn.o_proj.weight", "blk.{L}.attn_output.weight", S::kAny, X::kNone, R::kNone, kGO},
    // DSA lightning indexer (absent from "shared" layers, which reuse the previous full layer's top-k).
    {"layers.{L}.self_attn.indexer.wq_b.weight", "blk.{L}.indexer.attn_q_b.weight", S::kIndexer, X::kNone, R::kNone,
     kGIdxQ},
    {"layers.{L}.self_attn.indexer.wk.weight", "blk.{L}.indexer.attn_k.weight", S::kIndexer, X::kNone, R::kNone, kGIdxK},
    {"layers.{L}.self_attn.indexer.k_norm.weight", "blk.{L}.indexer.k_norm.weight", S::kIndexer, X::kNone, R::kNone,
     kGIdxD},
    {"layers.{L}.self_attn.indexer.k_norm.bias", "blk.{L}.indexer.k_norm.bias", S::kIndexer, X::kNone, R::kNone, kGIdxD},
    {"layers.{L}.self_attn.indexer.weights_proj.weight", "blk.{L}.indexer.proj.weight", S::kIndexer, X::kNone, R::kNone,
     kGIdxW},
    // Leading dense FFN layers.
    {"layers.{L}.mlp.gate_proj.weight", "blk.{L}.ffn_gate.weight", S::kDense, X::kNone, R::kNone, kGFdH},
    {"layers.{L}.mlp.up_proj.weight", "blk.{L}.ffn_up.weight", S::kDense, X::kNone, R::kNone, kGFdH},
    {"layers.{L}.mlp.down_proj.weight", "blk.{L}.ffn_down.weight", S::kDense, X::kNone, R::kNone, kGHFd},
    // MoE layers: sigmoid router with selection bias, per-expert keys, shared experts.
    {"layers.{L}.mlp.gate.weight", "blk.{L}.ffn_gate_inp.weight", S::kMoe, X::kNone, R::kNone, kGEH},
    {"layers.{L}.mlp.gate.e_score_correction_bias", "blk.{L}.exp_probs_b.bias", S::kMoe, X::kNone, R::kNone, kGE},
    {"layers.{L}.mlp.experts.{E}.gate_proj.weight", "blk.{L}.ffn_gate_exps.weight", S::kMoe, X::kNone, R::kNone, kGFH},
    {"layers.{L}.mlp.experts.{E}.up_proj.weight", "blk.{L}.ffn_up_exps.weight", S::kMoe, X::kNone, R::kNone, kGFH},
    {"layers.{L}.mlp.experts.{E}.down_proj.weight", "blk.{L}.ffn_down_exps.weight", S::kMoe, X::kNone, R::kNone, kGHF},
    {"layers.{L}.mlp.shared_experts.gate_proj.weight", "blk.{L}.ffn_gate_shexp.weight", S::kMoe, X::kNone, R::kNone,
     kGFsH},
    {"layers.{L}.mlp.shared_experts.up_proj.weight", "blk.{L}.ffn_up_shexp.weight", S::kMoe, X::kNone, R::kNone, kGFsH},
    {"layers.{L}.mlp.shared_experts.down_proj.weight", "blk.{L}.ffn_down_shexp.weight", S::kMoe, X::kNone, R::kNone,
     kGHFs},
    // NextN / MTP block (layer index >= num_hidden_layers); it also carries a full decoder layer (rules above).
    {"layers.{L}.eh_proj.weight", "blk.{L}.nextn.eh_proj.weight", S::kNextn, X::kNone, R::kNone, kGEh},
    {"layers.{L}.enorm.weight", "blk.{L}.nextn.enorm.weight", S::kNextn, X::kNone, R::kNone, kGH},
    {"layers.{L}.hnorm.weight", "blk.{L}.nextn.hnorm.weight", S::kNextn, X::kNone, R::kNone, kGH},
    {"layers.{L}.shared_head.norm.weight", "blk.{L}.nextn.shared_head_norm.weight", S::kNextn, X::kNone, R::kNone, kGH},
    {"layers.{L}.shared_head.head.weight", "blk.{L}.nextn.shared_head_head.weight", S::kNextn, X::kNone, R::kNone, kGVH},
    {"layers.{L}.embed_tokens.weight", "blk.{L}.nextn.embed_tokens.weight", S::kNextn, X::kNone, R::kNone, kGVH},
};

// The block index of a `layers.N.` name, or -1.
int64_t layer_of(const std::string& name) {
  if (!starts_with(name, "layers.")) return -1;
  int64_t v = 0;
  size_t i = 7;
  for (; i < name.size() && i < 16 && name[i] >= '0' && name[i] <= '9'; ++i) v = v * 10 + (name[i] - '0');
  return i > 7 && i < name.size() && name[i] == '.' ? v : -1;
}

bool is_dense(const HParams& hp, int64_t L) { return L < hp.n_dense_lead; }

}  // namespace

const std::vector<Rule>& glm_dsa_rules() { return kRules; }

std::vector<int64_t> expected_shape_glm(const Rule& r, const HParams& h) {
  const int64_t H = h.n_embd, nh = h.n_head;
  switch (r.shape_id) {
    case kGH: return {H};
    case kGVH: return {h.n_vocab, H};
    case kGQa: return {h.q_lora, H};
    case kGQb: return {nh * (h.qk_nope + h.qk_rope), h.q_lora};
    case kGKva: return {h.kv_lora + h.qk_rope, H};
    case kGQl: return {h.q_lora};
    case kGKvl: return {h.kv_lora};
    case kGKvb: return {h.n_head_kv * (h.qk_nope + h.v_head_dim), h.kv_lora};
    case kGO: return {H, nh * h.v_head_dim};
    case kGIdxQ: return {h.idx_heads * h.idx_dim, h.q_lora};
    case kGIdxK: return {h.idx_dim, H};
    case kGIdxD: return {h.idx_dim};
    case kGIdxW: return {h.idx_heads, H};
    case kGFdH: return {h.n_ff, H};
    case kGHFd: return {H, h.n_ff};
    case kGEH: return {h.n_expert, H};
    case kGE: return {h.n_expert};
    case kGFH: return {h.n_ff_exp, H};
    case kGHF: return {H, h.n_ff_exp};
    case kGFsH: return {h.n_ff_shexp, H};
    case kGHFs: return {H, h.n_ff_shexp};
    case kGEh: return {H, 2 * H};
  }
  return {};
}

Classified classify_glm(const std::string& full, const HParams& hp, bool keep_mtp) {
  Classified c;
  std::string name;
  if (full == "lm_head.weight") name = full;
  else if (starts_with(full, "model.language_model.")) name = full.substr(21);
  else if (starts_with(full, "model.")) name = full.substr(6);
  else {
    c.why = "unknown prefix";
    return c;
  }
  // --no-mtp drops every name of a block past the trunk before mapping, as llama.cpp's filter_tensors does.
  const int64_t block = layer_of(name);
  if (block >= hp.n_layer && !keep_mtp) {
    c.cls = TensorClass::kSkipMtp;
    return c;
  }
  for (const Rule& r : kRules) {
    if (r.scope == S::kGlobal && (std::string(r.hf) == "lm_head.weight") != (name == "lm_head.weight")) continue;
    int64_t L = -1, E = -1;
    if (!match(r.hf, name, L, E)) continue;
    c.rule = &r;
    c.layer = L;
    c.expert = E;
    auto refuse = [&](const char* why) {
      c.cls = TensorClass::kUnknown;
      c.why = why;
      return c;
    };
    if (r.scope == S::kGlobal && name == "lm_head.weight" && hp.tie_word_embeddings)
      return refuse("lm_head.weight with tie_word_embeddings = true");
    if (L >= hp.n_layer + hp.n_mtp) return refuse("layer index past num_hidden_layers + num_nextn_predict_layers");
    const bool nextn = L >= hp.n_layer;
    if (r.scope == S::kNextn && !nextn) return refuse("NextN tensor in a trunk layer");
    if (r.scope == S::kDense && !is_dense(hp, L)) return refuse("dense FFN tensor in an MoE layer (first_k_dense_replace)");
    if (r.scope == S::kMoe && is_dense(hp, L)) return refuse("MoE tensor in a dense layer (first_k_dense_replace)");
    if (r.scope == S::kMoe && (r.shape_id == kGFsH || r.shape_id == kGHFs) && hp.n_ff_shexp == 0)
      return refuse("shared-expert tensor with n_shared_experts = 0");
    if (r.scope == S::kIndexer && !nextn && !hp.indexer_full[static_cast<size_t>(L)])
      return refuse("indexer tensor in a layer whose indexer_types entry is \"shared\"");
    c.cls = TensorClass::kConvert;
    c.gguf = fill(r.gguf, L);
    return c;
  }
  c.why = "no rule";
  return c;
}

Plan make_plan_glm(const Checkpoint& ck, bool keep_mtp) {
  const HParams& hp = ck.hp;
  Plan plan;
  plan.keep_mtp = keep_mtp;
  auto conv = detail::classify_all(ck, keep_mtp, plan);
  // llama.cpp sizes the file from the config (GlmMoeDsaModel: num_hidden_layers + num_nextn_predict_layers unless
  // --no-mtp); a declared NextN block without tensors is then reported missing below.
  plan.n_mtp_layers = keep_mtp ? hp.n_mtp : 0;
  plan.block_count = hp.n_layer + plan.n_mtp_layers;

  std::map<int64_t, detail::ExpertGroup> groups;
  std::map<std::string, const SourceTensor*> done;  // GGUF name -> source (duplicate detection)
  auto emit = [&](OutTensor t, const SourceTensor* s) {
    if (auto it = done.find(t.name); it != done.end())
      fail("%s: maps to GGUF tensor '%s', already produced from '%s'", detail::src_label(ck, *s).c_str(),
           t.name.c_str(), it->second->name.c_str());
    done[t.name] = s;
    plan.tensors.push_back(std::move(t));
  };
  for (auto& [s, c] : conv) {
    OutTensor t;
    t.name = c.gguf;
    t.layer = c.layer;
    t.shape = s->info->shape;
    t.srcs = {s};
    if (c.expert >= 0) {
      for (OutTensor& st : detail::gather_expert(groups, ck, hp, t, c.expert, s)) emit(std::move(st), s);
      continue;
    }
    if (c.rule->shape_id == kGKvb) {  // kv_b_proj -> attn_k_b [nh, kv_lora, nope], attn_v_b [nh, v, kv_lora]
      t.shape = {hp.n_head_kv, hp.kv_lora, hp.qk_nope};
      t.combine = Combine::kSplitKb;
      OutTensor v = t;
      v.name = "blk." + std::to_string(c.layer) + ".attn_v_b.weight";
      v.shape = {hp.n_head_kv, hp.v_head_dim, hp.kv_lora};
      v.combine = Combine::kSplitVb;
      emit(std::move(t), s);
      emit(std::move(v), s);
      continue;
    }
    emit(std::move(t), s);
  }
  detail::check_experts_complete(groups, ck, hp);

  // Completeness: every block has its tensors (llama.cpp's converter would write the file and its loader reject it).
  std::vector<std::string> missing;
  auto need = [&](const std::string& n) {
    if (!done.count(n)) missing.push_back(n);
  };
  need("token_embd.weight");
  need("output_norm.weight");
  if (!hp.tie_word_embeddings) need("output.weight");
  for (int64_t il = 0; il < plan.block_count; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const bool nextn = il >= hp.n_layer;
    for (const char* n : {"attn_norm.weight", "ffn_norm.weight", "attn_q_a.weight", "attn_q_a_norm.weight",
                          "attn_q_b.weight", "attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_k_b.weight",
                          "attn_v_b.weight", "attn_output.weight"})
      need(b + n);
    // The NextN block's indexer is optional (llama.cpp loads it as not required), but all or nothing.
    static const char* const kIndexer[] = {"indexer.attn_q_b.weight", "indexer.attn_k.weight", "indexer.k_norm.weight",
                                           "indexer.k_norm.bias", "indexer.proj.weight"};
    bool any_indexer = false;
    for (const char* n : kIndexer) any_indexer = any_indexer || done.count(b + n);
    if (nextn ? any_indexer : hp.indexer_full[static_cast<size_t>(il)])
      for (const char* n : kIndexer) need(b + n);
    if (is_dense(hp, il)) {
      for (const char* n : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) need(b + n);
    } else {
      for (const char* n : {"ffn_gate_inp.weight", "exp_probs_b.bias", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                            "ffn_down_exps.weight"})
        need(b + n);
      if (hp.n_ff_shexp > 0)
        for (const char* n : {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"}) need(b + n);
    }
    if (nextn)
      for (const char* n : {"nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                            "nextn.shared_head_norm.weight"})
        need(b + n);
  }
  detail::fail_missing(ck, missing);
  return plan;
}

}  // namespace tern::convert
