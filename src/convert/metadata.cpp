// Metadata keys (provenance in metadata.h). Hyperparameter keys are looked up exactly as llama.cpp's
// find_hparam does (first key present wins); tokenizer rules follow TextModel.get_vocab_base and
// gguf-py vocab.py SpecialVocab._try_load_from_tokenizer_json / _try_load_from_config_json; glm-dsa's keys follow
// DeepseekV2Model and GlmMoeDsaModel set_gguf_parameters (conversion/deepseek.py, conversion/glm.py).
#include "convert/metadata.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <set>

#include "core/error.h"

namespace tern::convert {

namespace {

const OJson* find_hparam(const OJson& h, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto it = h.find(k); it != h.end()) return &*it;
  return nullptr;
}

uint32_t as_u32(const OJson& v, const char* what) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > UINT32_MAX)
    fail("config.json: %s = %s is not a non-negative 32-bit integer", what, v.dump().c_str());
  return static_cast<uint32_t>(v.get<int64_t>());
}
float as_f32(const OJson& v, const char* what) {
  if (!v.is_number()) fail("config.json: %s = %s is not a number", what, v.dump().c_str());
  return static_cast<float>(v.get<double>());
}
// int(head_dim * partial_rotary_factor), as the converter computes rope.dimension_count; the factor must be a number
// in (0, 1] (a larger or non-finite one would make the product no dimension count, or overflow the conversion).
uint32_t rotary_dims(int64_t head_dim, const OJson& factor) {
  if (!factor.is_number() || !(factor.get<double>() > 0.0 && factor.get<double>() <= 1.0))
    fail("config.json: partial_rotary_factor = %s is not a number in (0, 1]", factor.dump().c_str());
  return static_cast<uint32_t>(static_cast<int64_t>(static_cast<double>(head_dim) * factor.get<double>()));
}

// gguf-py model_weight_count_rounded_notation(n, min_digits=2).
std::string rounded_notation(uint64_t n) {
  double x;
  const char* suf;
  if (n > 1e12) x = n * 1e-12, suf = "T";
  else if (n > 1e9) x = n * 1e-9, suf = "B";
  else if (n > 1e6) x = n * 1e-6, suf = "M";
  else x = n * 1e-3, suf = "K";
  std::string r = std::to_string(static_cast<long long>(std::nearbyint(x)));  // Python round(): half to even
  r.erase(0, r.find_first_not_of('0'));
  const int fix = std::max(2 - static_cast<int>(r.size()), 0);
  return strf("%.*f%s", fix, x, suf);
}

struct Ctx {
  KeyValues kv;
  std::string arch = "qwen35moe";
  // gguf-py GGUFWriter.add_key_value: a key written twice keeps its first position and takes the new value
  // (DeepseekV2Model rewrites attention.key_length / value_length and rope.dimension_count this way).
  void add(const std::string& k, gguf::Node n) {
    for (auto& [key, node] : kv)
      if (key == k) {
        node = std::move(n);
        return;
      }
    kv.emplace_back(k, std::move(n));
  }
  void u32(const char* k, uint32_t v) { add(arch + "." + k, gguf::Node::u32(v)); }
  void f32(const char* k, float v) { add(arch + "." + k, gguf::Node::f32(v)); }
};

// TextModel.set_gguf_parameters (through general.file_type). Returns the rope parameters as TextModel.__init__
// mirrors them (the family parts read partial_rotary_factor, mrope_section, mscale_all_dim from them).
OJson add_text_model(Ctx& c, const OJson& h, const Plan& plan, FileType ft) {
  OJson rope = OJson::object();
  if (auto it = h.find("rope_parameters"); it != h.end() && it->is_object()) rope = *it;
  else if (auto it2 = h.find("rope_scaling"); it2 != h.end() && it2->is_object()) rope = *it2;
  if (!rope.contains("full_attention") && !rope.contains("sliding_attention")) {
    if (!rope.contains("rope_theta"))
      if (const OJson* v = find_hparam(h, {"global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"}); v && !v->is_null())
        rope["rope_theta"] = *v;
    if (!rope.contains("rope_type") && rope.contains("type")) rope["rope_type"] = rope["type"];
    if (!rope.contains("partial_rotary_factor"))
      if (const OJson* v = find_hparam(h, {"partial_rotary_factor", "rope_pct", "rope_percent"}); v && !v->is_null())
        rope["partial_rotary_factor"] = *v;
  }
  const OJson& rp = rope.contains("full_attention") ? rope["full_attention"] : rope;

  c.u32("block_count", static_cast<uint32_t>(plan.block_count));
  if (const OJson* v = find_hparam(h, {"max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"}); v && !v->is_null())
    c.u32("context_length", as_u32(*v, "max_position_embeddings"));
  if (const OJson* v = find_hparam(h, {"hidden_size", "n_embd", "dim"}); v && !v->is_null()) c.u32("embedding_length", as_u32(*v, "hidden_size"));
  if (const OJson* v = find_hparam(h, {"prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner", "hidden_dim"}); v && !v->is_null())
    c.u32("feed_forward_length", as_u32(*v, "intermediate_size"));
  if (const OJson* v = find_hparam(h, {"num_attention_heads", "n_head", "n_heads"}); v && !v->is_null()) c.u32("attention.head_count", as_u32(*v, "num_attention_heads"));
  if (const OJson* v = find_hparam(h, {"num_key_value_heads", "n_kv_heads"}); v && !v->is_null()) c.u32("attention.head_count_kv", as_u32(*v, "num_key_value_heads"));
  if (h.contains("is_causal") && h["is_causal"] == false) c.add(c.arch + ".attention.causal", gguf::Node::boolean(false));
  if (rp.contains("rope_type") && rp["rope_type"].is_string()) {
    const std::string rt = rp["rope_type"].get<std::string>();
    if ((rt == "linear" || rt == "yarn") && rp.contains("factor") && !rp["factor"].is_null())
      fail("config.json: rope_type '%s' with a scaling factor is not supported (supported: default)", rt.c_str());
  }
  if (rope.contains("mrope_section")) {
    std::vector<int32_t> s;
    if (!rope["mrope_section"].is_array()) fail("config.json: mrope_section is not a list");
    for (const auto& x : rope["mrope_section"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        fail("config.json: mrope_section entry %s is not a non-negative 32-bit integer", x.dump().c_str());
      s.push_back(static_cast<int32_t>(x.get<int64_t>()));
    }
    while (s.size() < 4) s.push_back(0);
    s.resize(4);
    c.add(c.arch + ".rope.dimension_sections", gguf::Node::array_of<int32_t>(s));
  }
  if (rp.contains("rope_theta") && !rp["rope_theta"].is_null()) c.f32("rope.freq_base", as_f32(rp["rope_theta"], "rope_theta"));
  if (rope.contains("sliding_attention")) fail("config.json: sliding-window rope parameters are not supported");
  if (const OJson* v = find_hparam(h, {"rms_norm_eps", "norm_eps"}); v && !v->is_null()) c.f32("attention.layer_norm_rms_epsilon", as_f32(*v, "rms_norm_eps"));
  if (const OJson* v = find_hparam(h, {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"}); v && !v->is_null()) c.f32("attention.layer_norm_epsilon", as_f32(*v, "layer_norm_eps"));
  if (const OJson* v = find_hparam(h, {"num_local_experts", "num_experts", "n_routed_experts"}); v && !v->is_null()) c.u32("expert_count", as_u32(*v, "num_experts"));
  if (const OJson* v = find_hparam(h, {"num_experts_per_tok", "num_experts_per_token", "top_k_experts"}); v && !v->is_null()) c.u32("expert_used_count", as_u32(*v, "num_experts_per_tok"));
  if (h.contains("n_group") && !h["n_group"].is_null()) c.u32("expert_group_count", as_u32(h["n_group"], "n_group"));
  if (h.contains("topk_group") && !h["topk_group"].is_null()) c.u32("expert_group_used_count", as_u32(h["topk_group"], "topk_group"));
  if (const OJson* v = find_hparam(h, {"score_function", "scoring_func", "score_func", "moe_router_activation", "moe_router_activation_func", "expert_selection_fn"}); v && !v->is_null()) {
    const std::string f = v->is_string() ? v->get<std::string>() : v->dump();
    if (f == "softmax") c.u32("expert_gating_func", 1);
    else if (f == "sigmoid") c.u32("expert_gating_func", 2);
    else fail("config.json: expert score function '%s' is not supported (supported: softmax, sigmoid)", f.c_str());
  }
  if (h.contains("head_dim") && !h["head_dim"].is_null()) {
    c.u32("attention.key_length", as_u32(h["head_dim"], "head_dim"));
    c.u32("attention.value_length", as_u32(h["head_dim"], "head_dim"));
  }
  c.add("general.file_type", gguf::Node::u32(llama_ftype_id(ft)));
  return rope;
}

// Qwen2MoeModel / _QwenMtpMixin / Qwen3NextModel / _Qwen35MRopeMixin set_gguf_parameters after TextModel's.
void add_qwen(Ctx& c, const Checkpoint& ck, const Plan& plan, const OJson& rope) {
  const OJson& h = ck.hparams;
  if (h.contains("moe_intermediate_size") && !h["moe_intermediate_size"].is_null()) c.u32("expert_feed_forward_length", as_u32(h["moe_intermediate_size"], "moe_intermediate_size"));
  if (h.contains("shared_expert_intermediate_size") && !h["shared_expert_intermediate_size"].is_null())
    c.u32("expert_shared_feed_forward_length", as_u32(h["shared_expert_intermediate_size"], "shared_expert_intermediate_size"));
  if (plan.n_mtp_layers > 0) c.u32("nextn_predict_layers", static_cast<uint32_t>(plan.n_mtp_layers));
  const HParams& hp = ck.hp;
  c.u32("ssm.conv_kernel", static_cast<uint32_t>(hp.ssm_conv_kernel));
  c.u32("ssm.state_size", static_cast<uint32_t>(hp.ssm_k_dim));
  c.u32("ssm.group_count", static_cast<uint32_t>(hp.ssm_k_heads));
  c.u32("ssm.time_step_rank", static_cast<uint32_t>(hp.ssm_v_heads));
  c.u32("ssm.inner_size", static_cast<uint32_t>(hp.ssm_v_dim * hp.ssm_v_heads));
  if (hp.has_layer_types) {
    std::vector<bool> rec = hp.recurrent;
    rec.resize(static_cast<size_t>(plan.block_count), false);
    c.add(c.arch + ".attention.recurrent_layers", gguf::Node::array_of_bool(rec));
  }
  c.u32("full_attention_interval", static_cast<uint32_t>(hp.full_attention_interval));
  c.u32("rope.dimension_count",
        rotary_dims(hp.head_dim, rope.contains("partial_rotary_factor") ? rope["partial_rotary_factor"] : OJson(0.25)));
  if (!rope.contains("mrope_section") && !hp.next()) {  // Qwen3-Next has plain RoPE (no MRoPE mixin)
    const std::vector<int32_t> def = {11, 11, 10, 0};  // llama.cpp _Qwen35MRopeMixin default
    c.add(c.arch + ".rope.dimension_sections", gguf::Node::array_of<int32_t>(def));
  }
}

// DeepseekV2Model then GlmMoeDsaModel set_gguf_parameters after TextModel's (spec glm_moe_dsa.md section 12).
void add_glm(Ctx& c, const Checkpoint& ck, const Plan& plan, const OJson& rope) {
  const OJson& h = ck.hparams;
  const HParams& hp = ck.hp;
  auto u32_of = [&](const char* k) {
    const auto it = h.find(k);
    return as_u32(it == h.end() ? OJson() : *it, k);
  };
  c.u32("leading_dense_block_count", static_cast<uint32_t>(hp.n_dense_lead));
  c.u32("vocab_size", u32_of("vocab_size"));
  c.u32("attention.q_lora_rank", u32_of("q_lora_rank"));
  c.u32("attention.kv_lora_rank", u32_of("kv_lora_rank"));
  c.u32("attention.key_length", static_cast<uint32_t>(hp.kv_lora + hp.qk_rope));  // MQA latent [c ; k_rope]
  c.u32("attention.value_length", static_cast<uint32_t>(hp.kv_lora));
  c.u32("attention.key_length_mla", static_cast<uint32_t>(hp.qk_nope + hp.qk_rope));
  c.u32("attention.value_length_mla", static_cast<uint32_t>(hp.v_head_dim));
  c.u32("expert_feed_forward_length", u32_of("moe_intermediate_size"));
  c.u32("expert_count", u32_of("n_routed_experts"));
  const bool has_shared = h.contains("n_shared_experts") && !h["n_shared_experts"].is_null();
  c.u32("expert_shared_count", has_shared ? u32_of("n_shared_experts") : 0);
  if (h.contains("routed_scaling_factor") && !h["routed_scaling_factor"].is_null())
    c.f32("expert_weights_scale", as_f32(h["routed_scaling_factor"], "routed_scaling_factor"));
  if (h.contains("norm_topk_prob") && h["norm_topk_prob"] == true)
    c.add(c.arch + ".expert_weights_norm", gguf::Node::boolean(true));
  c.u32("rope.dimension_count", static_cast<uint32_t>(hp.qk_rope));
  if (const OJson ms = rope.value("mscale_all_dim", OJson()); !ms.is_null()) {  // [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]
    if (!ms.is_number()) fail("config.json: mscale_all_dim = %s is not a number", ms.dump().c_str());
    c.f32("rope.scaling.yarn_log_multiplier", static_cast<float>(0.1 * ms.get<double>()));
  }
  // GlmMoeDsaModel.
  c.u32("rope.dimension_count", rotary_dims(hp.qk_rope, rope.value("partial_rotary_factor", OJson(1.0))));
  if (plan.keep_mtp && h.contains("num_nextn_predict_layers") && !h["num_nextn_predict_layers"].is_null())
    c.u32("nextn_predict_layers", u32_of("num_nextn_predict_layers"));
  c.u32("attention.indexer.head_count", u32_of("index_n_heads"));
  c.u32("attention.indexer.key_length", u32_of("index_head_dim"));
  c.u32("attention.indexer.top_k", u32_of("index_topk"));
  if (!hp.indexer_full.empty())  // add_array writes nothing for an empty list
    c.add(c.arch + ".attention.indexer.types", gguf::Node::array_of_bool(hp.indexer_full));
}

}  // namespace

std::string size_label(const Plan& plan) {
  uint64_t shared = 0, expert = 0, expert_sum = 0, n_expert_tensors = 0;
  for (const OutTensor& t : plan.tensors) {
    const uint64_t size = static_cast<uint64_t>(t.n_elements());
    if (t.name.find("_exps.") != std::string::npos && t.shape.size() >= 3) {
      const uint64_t ec = static_cast<uint64_t>(t.shape[0]);  // ne[-3] in gguf-py's reversed shape = torch dim 0
      expert += size / ec;
      expert_sum += ec;
      ++n_expert_tensors;
    } else {
      shared += size;
    }
  }
  if (n_expert_tensors == 0) return rounded_notation(shared);
  return std::to_string(expert_sum / n_expert_tensors) + "x" + rounded_notation(shared + expert);
}

namespace {
KeyValues build_metadata_checked(const Checkpoint& ck, const Plan& plan, FileType ft, const std::string& name,
                                 const VocabOptions& vo) {
  Ctx c;
  c.arch = ck.hp.arch;
  c.add("general.architecture", gguf::Node::str(c.arch));
  c.add("general.type", gguf::Node::str("model"));
  c.add("general.name", gguf::Node::str(name));
  c.add("general.size_label", gguf::Node::str(size_label(plan)));
  if (ck.hp.glm()) {
    OJson h = ck.hparams;
    h["num_key_value_heads"] = 1;  // DeepseekV2Model: MLA is written as MQA (one latent KV head)
    if (!h.contains("rms_norm_eps")) h["rms_norm_eps"] = 1e-6;
    add_glm(c, ck, plan, add_text_model(c, h, plan, ft));
  } else {
    add_qwen(c, ck, plan, add_text_model(c, ck.hparams, plan, ft));
  }
  c.add("general.quantization_version", gguf::Node::u32(2));  // GGML_QUANT_VERSION
  for (auto& kv : build_vocab(ck, vo)) c.kv.push_back(std::move(kv));
  return std::move(c.kv);
}
}  // namespace

KeyValues build_metadata(const Checkpoint& ck, const Plan& plan, FileType ft, const std::string& name,
                         const VocabOptions& vo) {
  return json_checked(ck.dir + "/config.json", [&] { return build_metadata_checked(ck, plan, ft, name, vo); });
}

}  // namespace tern::convert
