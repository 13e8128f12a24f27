// The tensor table and the plan. Names and transforms: spec qwen35moe.md section 3 and llama.cpp's
// conversion/qwen.py (Qwen2MoeModel expert merging, _QwenMtpMixin MTP remap, _LinearAttentionVReorderBase,
// Qwen3NextModel). Output order follows llama.cpp: checkpoint names sorted per file, stacked experts emitted
// where the layer's last expert key appears, gate_up split into gate then up.
#include "convert/contract.h"

#include <algorithm>
#include <map>

#include "convert/contract_detail.h"
#include "core/error.h"

namespace tern::convert {

using detail::fill;
using detail::match;
using detail::src_label;
using detail::starts_with;

namespace {

enum Shape : int {
  kShH, kShVH, kShEH, kShE2FH, kShEHF, kShFH, kShHF, kShFsH, kShHFs, kSh1H, kShQ, kShKV, kShO, kShHd,
  kShQkv, kShZ, kShHvH, kShConv, kShHv, kShDv, kShOut, kShFc, kShFdH, kShHFd, kShQkvz, kShBa,
};

using S = TensorScope;
using X = Xform;
using R = Reorder;

// Text-model names (after `model.language_model.` / `model.`), MTP head names (after `mtp.`), and lm_head.
const std::vector<Rule> kRules = {
    {"lm_head.weight", "output.weight", S::kGlobal, X::kNone, R::kNone, kShVH},
    {"embed_tokens.weight", "token_embd.weight", S::kGlobal, X::kNone, R::kNone, kShVH},
    {"norm.weight", "output_norm.weight", S::kGlobal, X::kNormPlusOne, R::kNone, kShH},
    {"layers.{L}.input_layernorm.weight", "blk.{L}.attn_norm.weight", S::kAny, X::kNormPlusOne, R::kNone, kShH},
    {"layers.{L}.post_attention_layernorm.weight", "blk.{L}.post_attention_norm.weight", S::kAny, X::kNormPlusOne,
     R::kNone, kShH},
    {"layers.{L}.mlp.gate.weight", "blk.{L}.ffn_gate_inp.weight", S::kAny, X::kNone, R::kNone, kShEH},
    {"layers.{L}.mlp.experts.gate_up_proj", "blk.{L}.ffn_gate_exps.weight", S::kAny, X::kNone, R::kNone, kShE2FH},
    {"layers.{L}.mlp.experts.gate_up_proj.weight", "blk.{L}.ffn_gate_exps.weight", S::kAny, X::kNone, R::kNone,
     kShE2FH},
    {"layers.{L}.mlp.experts.down_proj", "blk.{L}.ffn_down_exps.weight", S::kAny, X::kNone, R::kNone, kShEHF},
    {"layers.{L}.mlp.experts.down_proj.weight", "blk.{L}.ffn_down_exps.weight", S::kAny, X::kNone, R::kNone, kShEHF},
    {"layers.{L}.mlp.experts.{E}.gate_proj.weight", "blk.{L}.ffn_gate_exps.weight", S::kAny, X::kNone, R::kNone, kShFH},
    {"layers.{L}.mlp.experts.{E}.up_proj.weight", "blk.{L}.ffn_up_exps.weight", S::kAny, X::kNone, R::kNone, kShFH},
    {"layers.{L}.mlp.experts.{E}.down_proj.weight", "blk.{L}.ffn_down_exps.weight", S::kAny, X::kNone, R::kNone, kShHF},
    {"layers.{L}.mlp.shared_expert.gate_proj.weight", "blk.{L}.ffn_gate_shexp.weight", S::kAny, X::kNone, R::kNone, kShFsH},
    {"layers.{L}.mlp.shared_expert.up_proj.weight", "blk.{L}.ffn_up_shexp.weight", S::kAny, X::kNone, R::kNone, kShFsH},
    {"layers.{L}.mlp.shared_expert.down_proj.weight", "blk.{L}.ffn_down_shexp.weight", S::kAny, X::kNone, R::kNone, kShHFs},
    {"layers.{L}.mlp.shared_expert_gate.weight", "blk.{L}.ffn_gate_inp_shexp.weight", S::kAny, X::kNone, R::kNone, kSh1H},
    // Dense FFN (qwen35).
    {"layers.{L}.mlp.gate_proj.weight", "blk.{L}.ffn_gate.weight", S::kAny, X::kNone, R::kNone, kShFdH},
    {"layers.{L}.mlp.up_proj.weight", "blk.{L}.ffn_up.weight", S::kAny, X::kNone, R::kNone, kShFdH},
    {"layers.{L}.mlp.down_proj.weight", "blk.{L}.ffn_down.weight", S::kAny, X::kNone, R::kNone, kShHFd},
    // Full attention: q_proj keeps its per-head interleaved [query | gate] rows.
    {"layers.{L}.self_attn.q_proj.weight", "blk.{L}.attn_q.weight", S::kFull, X::kNone, R::kNone, kShQ},
    {"layers.{L}.self_attn.k_proj.weight", "blk.{L}.attn_k.weight", S::kFull, X::kNone, R::kNone, kShKV},
    {"layers.{L}.self_attn.v_proj.weight", "blk.{L}.attn_v.weight", S::kFull, X::kNone, R::kNone, kShKV},
    {"layers.{L}.self_attn.o_proj.weight", "blk.{L}.attn_output.weight", S::kFull, X::kNone, R::kNone, kShO},
    {"layers.{L}.self_attn.q_norm.weight", "blk.{L}.attn_q_norm.weight", S::kFull, X::kNormPlusOne, R::kNone, kShHd},
    {"layers.{L}.self_attn.k_norm.weight", "blk.{L}.attn_k_norm.weight", S::kFull, X::kNormPlusOne, R::kNone, kShHd},
    // Gated DeltaNet.
    {"layers.{L}.linear_attn.in_proj_qkv.weight", "blk.{L}.attn_qkv.weight", S::kLinear, X::kNone, R::kQkvRows, kShQkv},
    {"layers.{L}.linear_attn.in_proj_z.weight", "blk.{L}.attn_gate.weight", S::kLinear, X::kNone, R::kRows, kShZ},
    {"layers.{L}.linear_attn.in_proj_b.weight", "blk.{L}.ssm_beta.weight", S::kLinear, X::kNone, R::kRowsHead1, kShHvH},
    {"layers.{L}.linear_attn.in_proj_a.weight", "blk.{L}.ssm_alpha.weight", S::kLinear, X::kNone, R::kRowsHead1, kShHvH},
    // Qwen3-Next's fused in-projections (value heads stay in HF's grouped order: no reorder).
    {"layers.{L}.linear_attn.in_proj_qkvz.weight", "blk.{L}.attn_qkv.weight", S::kLinear, X::kNone, R::kNone, kShQkvz},
    {"layers.{L}.linear_attn.in_proj_ba.weight", "blk.{L}.ssm_ba.weight", S::kLinear, X::kNone, R::kNone, kShBa},
    {"layers.{L}.linear_attn.conv1d.weight", "blk.{L}.ssm_conv1d.weight", S::kLinear, X::kNone, R::kConvRows, kShConv},
    {"layers.{L}.linear_attn.dt_bias", "blk.{L}.ssm_dt.bias", S::kLinear, X::kNone, R::kVec, kShHv},
    {"layers.{L}.linear_attn.A_log", "blk.{L}.ssm_a", S::kLinear, X::kNegExp, R::kVec, kShHv},
    {"layers.{L}.linear_attn.norm.weight", "blk.{L}.ssm_norm.weight", S::kLinear, X::kNone, R::kNone, kShDv},
    {"layers.{L}.linear_attn.out_proj.weight", "blk.{L}.ssm_out.weight", S::kLinear, X::kNone, R::kCols, kShOut},
    // MTP head (names after `mtp.`); its layers reuse the layer rules at block n_layer + j.
    {"fc.weight", "blk.{N}.nextn.eh_proj.weight", S::kMtpHead, X::kNone, R::kNone, kShFc},
    {"pre_fc_norm_embedding.weight", "blk.{N}.nextn.enorm.weight", S::kMtpHead, X::kNormPlusOne, R::kNone, kShH},
    {"pre_fc_norm_hidden.weight", "blk.{N}.nextn.hnorm.weight", S::kMtpHead, X::kNormPlusOne, R::kNone, kShH},
    {"norm.weight", "blk.{N}.nextn.shared_head_norm.weight", S::kMtpHead, X::kNormPlusOne, R::kNone, kShH},
};

}  // namespace

const std::vector<Rule>& qwen35moe_rules() { return kRules; }

std::vector<int64_t> expected_shape(const Rule& r, const HParams& h) {
  if (h.glm()) return expected_shape_glm(r, h);
  const int64_t H = h.n_embd, E = h.n_expert, F = h.n_ff_exp, Fs = h.n_ff_shexp;
  switch (r.shape_id) {
    case kShH: return {H};
    case kShVH: return {h.n_vocab, H};
    case kShEH: return {E, H};
    case kShE2FH: return {E, 2 * F, H};
    case kShEHF: return {E, H, F};
    case kShFH: return {F, H};
    case kShHF: return {H, F};
    case kShFsH: return {Fs, H};
    case kShHFs: return {H, Fs};
    case kSh1H: return {1, H};
    case kShQ: return {2 * h.n_head * h.head_dim, H};  // attn_output_gate: [query | gate] per head
    case kShKV: return {h.n_head_kv * h.head_dim, H};
    case kShO: return {H, h.n_head * h.head_dim};
    case kShHd: return {h.head_dim};
    case kShQkv: return {h.conv_dim(), H};
    case kShZ: return {h.ssm_v_heads * h.ssm_v_dim, H};
    case kShHvH: return {h.ssm_v_heads, H};
    case kShConv: return {h.conv_dim(), 1, h.ssm_conv_kernel};
    case kShHv: return {h.ssm_v_heads};
    case kShDv: return {h.ssm_v_dim};
    case kShOut: return {H, h.ssm_v_heads * h.ssm_v_dim};
    case kShFc: return {H, 2 * H};
    case kShFdH: return {h.n_ff, H};
    case kShHFd: return {H, h.n_ff};
    case kShQkvz: return {h.conv_dim() + h.ssm_v_heads * h.ssm_v_dim, H};
    case kShBa: return {2 * h.ssm_v_heads, H};
  }
  return {};
}

Classified classify(const std::string& full, const HParams& hp, bool keep_mtp) {
  if (hp.glm()) return classify_glm(full, hp, keep_mtp);
  Classified c;
  std::string name = full;
  bool mtp = false;
  if (starts_with(name, "model.visual.")) {
    c.cls = TensorClass::kSkipVisual;
    return c;
  }
  if (starts_with(name, "model.language_model.")) name = name.substr(21);
  else if (starts_with(name, "model.mtp.")) name = name.substr(6), mtp = true;
  else if (starts_with(name, "mtp.")) name = name.substr(4), mtp = true;
  else if (starts_with(name, "model.")) name = name.substr(6);
  else if (name != "lm_head.weight") {
    c.why = "unknown prefix";
    return c;
  }
  if (mtp) {
    c.cls = keep_mtp ? TensorClass::kConvert : TensorClass::kSkipMtp;
    if (!keep_mtp) return c;
  }
  for (const Rule& r : kRules) {
    if ((r.scope == S::kMtpHead) != (mtp && !starts_with(name, "layers."))) continue;
    if (r.scope == S::kGlobal && (mtp || (std::string(r.hf) == "lm_head.weight") != (full == "lm_head.weight")))
      continue;
    int64_t L = -1, E = -1;
    if (!match(r.hf, name, L, E)) continue;
    c.rule = &r;
    c.expert = E;
    if (mtp) {
      L = hp.n_layer + (L < 0 ? 0 : L);
    } else if (L >= hp.n_layer) {
      c.cls = TensorClass::kUnknown;
      c.why = "layer index past num_hidden_layers";
      return c;
    }
    c.layer = L;
    const bool dense_rule = r.shape_id == kShFdH || r.shape_id == kShHFd;
    const bool moe_rule = r.shape_id == kShEH || r.shape_id == kShE2FH || r.shape_id == kShEHF || r.shape_id == kShFH ||
                          r.shape_id == kShHF || r.shape_id == kShFsH || r.shape_id == kShHFs || r.shape_id == kSh1H;
    if ((dense_rule && !hp.dense()) || (moe_rule && hp.dense())) {
      c.cls = TensorClass::kUnknown;
      c.why = hp.dense() ? "MoE tensor in a dense model" : "dense FFN tensor in an MoE model";
      return c;
    }
    const bool next_rule = r.shape_id == kShQkvz || r.shape_id == kShBa;
    const bool split_rule = r.shape_id == kShQkv || r.shape_id == kShZ || r.shape_id == kShHvH;
    if ((next_rule && !hp.next()) || (split_rule && hp.next())) {
      c.cls = TensorClass::kUnknown;
      c.why = hp.next() ? "Qwen3.5 in-projection in a Qwen3-Next model" : "Qwen3-Next in-projection in a Qwen3.5 model";
      return c;
    }
    const bool recurrent = L >= 0 && L < hp.n_layer && hp.recurrent[static_cast<size_t>(L)];
    if ((r.scope == S::kLinear && !recurrent) || (r.scope == S::kFull && recurrent && !mtp)) {
      c.cls = TensorClass::kUnknown;
      c.why = recurrent ? "attention tensor in a linear-attention layer" : "linear-attention tensor in a full-attention layer";
      return c;
    }
    c.cls = TensorClass::kConvert;
    c.gguf = fill(r.gguf, L);
    return c;
  }
  c.cls = TensorClass::kUnknown;
  c.why = "no rule";
  return c;
}

int64_t OutTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Plan make_plan(const Checkpoint& ck, bool keep_mtp) {
  if (ck.hp.glm()) return make_plan_glm(ck, keep_mtp);
  const HParams& hp = ck.hp;
  Plan plan;
  plan.keep_mtp = keep_mtp;
  auto conv = detail::classify_all(ck, keep_mtp, plan);
  for (auto& [s, c] : conv)
    if (c.layer >= hp.n_layer) plan.n_mtp_layers = std::max(plan.n_mtp_layers, c.layer - hp.n_layer + 1);
  plan.block_count = hp.n_layer + plan.n_mtp_layers;

  std::map<int64_t, detail::ExpertGroup> groups;
  std::map<std::string, const SourceTensor*> done;  // GGUF name -> first source (duplicate detection)
  auto emit = [&](OutTensor t, const SourceTensor* s) {
    if (auto it = done.find(t.name); it != done.end())
      fail("%s: maps to GGUF tensor '%s', already produced from '%s'", src_label(ck, *s).c_str(), t.name.c_str(),
           it->second->name.c_str());
    done[t.name] = s;
    plan.tensors.push_back(std::move(t));
  };
  for (auto& [s, c] : conv) {
    const Rule& r = *c.rule;
    OutTensor t;
    t.name = c.gguf;
    t.layer = c.layer;
    t.xform = r.xform;
    t.reorder = hp.ssm_k_heads != hp.ssm_v_heads && !hp.next() ? r.reorder : Reorder::kNone;
    t.shape = s->info->shape;
    t.srcs = {s};
    if (c.expert >= 0) {
      for (OutTensor& st : detail::gather_expert(groups, ck, hp, t, c.expert, s)) emit(std::move(st), s);
      continue;
    }
    if (r.shape_id == kShE2FH) {  // gate_up_proj [E, 2F, H] -> gate [E, F, H], up [E, F, H]
      t.shape[1] /= 2;
      t.combine = Combine::kSplitGate;
      OutTensor up = t;
      up.name = "blk." + std::to_string(c.layer) + ".ffn_up_exps.weight";
      up.combine = Combine::kSplitUp;
      emit(std::move(t), s);
      emit(std::move(up), s);
      continue;
    }
    if (r.shape_id == kShQkvz) {  // in_proj_qkvz -> attn_qkv [conv_dim, H], attn_gate [value_dim, H]
      t.shape = {hp.conv_dim(), hp.n_embd};
      t.combine = Combine::kSplitQkv;
      OutTensor z = t;
      z.name = "blk." + std::to_string(c.layer) + ".attn_gate.weight";
      z.shape = {hp.ssm_v_heads * hp.ssm_v_dim, hp.n_embd};
      z.combine = Combine::kSplitZ;
      emit(std::move(t), s);
      emit(std::move(z), s);
      continue;
    }
    if (r.shape_id == kShConv) t.shape = {t.shape[0], t.shape[2]};  // squeeze [C, 1, K] -> [C, K]
    emit(std::move(t), s);
  }
  detail::check_experts_complete(groups, ck, hp);

  // Completeness: every layer has its tensors (a missing one would otherwise surface only at load time).
  std::vector<std::string> missing;
  auto need = [&](const std::string& n) {
    if (!done.count(n)) missing.push_back(n);
  };
  need("token_embd.weight");
  need("output_norm.weight");
  if (!hp.tie_word_embeddings) need("output.weight");
  for (int64_t il = 0; il < plan.block_count; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const bool rec = il < hp.n_layer && hp.recurrent[static_cast<size_t>(il)];
    for (const char* n : {"attn_norm.weight", "post_attention_norm.weight"}) need(b + n);
    if (hp.dense())
      for (const char* n : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) need(b + n);
    else
      for (const char* n : {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                            "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
                            "ffn_gate_inp_shexp.weight"})
        need(b + n);
    if (rec && hp.next())
      for (const char* n : {"attn_qkv.weight", "attn_gate.weight", "ssm_ba.weight", "ssm_conv1d.weight", "ssm_dt.bias",
                            "ssm_a", "ssm_norm.weight", "ssm_out.weight"})
        need(b + n);
    else if (rec)
      for (const char* n : {"attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight",
                            "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a", "ssm_norm.weight", "ssm_out.weight"})
        need(b + n);
    else
      for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                            "attn_q_norm.weight", "attn_k_norm.weight"})
        need(b + n);
    if (il >= hp.n_layer)
      for (const char* n : {"nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                            "nextn.shared_head_norm.weight"})
        need(b + n);
  }
  detail::fail_missing(ck, missing);
  return plan;
}

}  // namespace tern::convert
