// config.json and safetensors discovery. Key lookups follow llama.cpp's converter (conversion/base.py
// TextModel.__init__, Qwen3NextModel.set_gguf_parameters) so the same config gives the same GGUF keys; for GLM-5
// the config is first put through what transformers' GlmMoeDsaConfig makes of it (glm_autoconfig), because
// llama.cpp reads AutoConfig's values, not the file.
#include "convert/hf_config.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include "core/error.h"
#include "formats/hybrid_layers.h"

namespace tern::convert {

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

OJson read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("%s: cannot open (missing file?)", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return OJson::parse(ss.str());
  } catch (const OJson::exception& e) {
    fail("%s: not valid JSON: %s", path.c_str(), e.what());
  }
}

namespace {

int64_t req_int(const OJson& h, const char* key, const std::string& file) {
  auto it = h.find(key);
  if (it == h.end() || !it->is_number_integer()) fail("%s: missing integer '%s'", file.c_str(), key);
  const int64_t v = it->get<int64_t>();
  if (v <= 0 || v > (1ll << 40)) fail("%s: '%s' = %lld is out of range", file.c_str(), key, static_cast<long long>(v));
  return v;
}

HParams read_hparams(const OJson& h, const std::string& file, bool dense) {
  HParams p;
  p.model_type = h.value("model_type", std::string());
  p.arch = dense ? "qwen35" : "qwen35moe";
  p.n_layer = req_int(h, "num_hidden_layers", file);
  p.n_embd = req_int(h, "hidden_size", file);
  p.n_vocab = req_int(h, "vocab_size", file);
  p.n_head = req_int(h, "num_attention_heads", file);
  p.n_head_kv = req_int(h, "num_key_value_heads", file);
  p.head_dim = h.contains("head_dim") ? req_int(h, "head_dim", file) : p.n_embd / p.n_head;
  if (dense) {
    p.n_ff = req_int(h, "intermediate_size", file);
  } else {
    p.n_expert = req_int(h, "num_experts", file);
    p.n_expert_used = req_int(h, "num_experts_per_tok", file);
    p.n_ff_exp = req_int(h, "moe_intermediate_size", file);
    p.n_ff_shexp = req_int(h, "shared_expert_intermediate_size", file);
  }
  p.ssm_conv_kernel = req_int(h, "linear_conv_kernel_dim", file);
  p.ssm_k_heads = req_int(h, "linear_num_key_heads", file);
  p.ssm_v_heads = req_int(h, "linear_num_value_heads", file);
  p.ssm_k_dim = req_int(h, "linear_key_head_dim", file);
  p.ssm_v_dim = req_int(h, "linear_value_head_dim", file);
  if (p.ssm_v_heads % p.ssm_k_heads != 0)
    fail("%s: linear_num_value_heads %lld is not a multiple of linear_num_key_heads %lld", file.c_str(),
         static_cast<long long>(p.ssm_v_heads), static_cast<long long>(p.ssm_k_heads));
  // The hybrid rule (formats/hybrid_layers.h): layer_types when listed, else the interval. MTP layers are
  // not part of the trunk here (contract.cpp places them after it).
  gguf::HybridLayerRule rule;
  rule.n_layer = p.n_layer;
  rule.source = file;
  rule.recurrent_key = "layer_types";
  rule.interval_key = "full_attention_interval";
  if (h.contains("full_attention_interval")) {
    p.full_attention_interval = req_int(h, "full_attention_interval", file);
    rule.interval = p.full_attention_interval;
  }
  if (h.contains("mtp_num_hidden_layers") && h["mtp_num_hidden_layers"].is_number_integer())
    p.n_mtp = h["mtp_num_hidden_layers"].get<int64_t>();
  p.tie_word_embeddings = h.value("tie_word_embeddings", false);
  auto lt = h.find("layer_types");
  if (lt != h.end() && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != p.n_layer)
      fail("%s: layer_types must list num_hidden_layers (%lld) entries", file.c_str(), static_cast<long long>(p.n_layer));
    p.has_layer_types = true;
    rule.recurrent.emplace();
    for (const auto& t : *lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s != "linear_attention" && s != "full_attention")
        fail("%s: layer_types entry '%s' (expected linear_attention or full_attention)", file.c_str(), t.dump().c_str());
      rule.recurrent->push_back(s == "linear_attention");
    }
  }
  for (gguf::LayerKind k : gguf::hybrid_layer_kinds(rule)) p.recurrent.push_back(k == gguf::LayerKind::kRecurrent);
  return p;
}

int64_t opt_int(const OJson& h, const char* key, int64_t dflt, int64_t lo, const std::string& file) {
  auto it = h.find(key);
  if (it == h.end() || it->is_null()) return dflt;
  if (!it->is_number_integer()) fail("%s: '%s' is not an integer", file.c_str(), key);
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > (1ll << 40)) fail("%s: '%s' = %lld is out of range", file.c_str(), key, static_cast<long long>(v));
  return v;
}

// The trunk geometry of a glm_moe_dsa config (already through glm_autoconfig). MLA needs one kv_b_proj block per
// attention head: llama.cpp splits kv_b by num_key_value_heads and its loader reads it by head_count, so the two
// must agree (they do in every GLM-5 release: 64 / 64).
HParams read_glm_hparams(const OJson& h, const std::string& file) {
  HParams p;
  p.arch = "glm-dsa";
  p.n_layer = req_int(h, "num_hidden_layers", file);
  if (p.n_layer > int64_t{gguf::kMaxLayers})
    fail("%s: num_hidden_layers %lld is more than a GGUF file may hold (%u)", file.c_str(),
         static_cast<long long>(p.n_layer), gguf::kMaxLayers);
  p.n_embd = req_int(h, "hidden_size", file);
  p.n_vocab = req_int(h, "vocab_size", file);
  p.n_head = req_int(h, "num_attention_heads", file);
  p.n_head_kv = req_int(h, "num_key_value_heads", file);
  if (p.n_head_kv != p.n_head)
    fail("%s: num_key_value_heads %lld != num_attention_heads %lld (MLA stores kv_b_proj per attention head)",
         file.c_str(), static_cast<long long>(p.n_head_kv), static_cast<long long>(p.n_head));
  p.n_ff = req_int(h, "intermediate_size", file);
  p.n_expert = req_int(h, "n_routed_experts", file);
  p.n_expert_used = req_int(h, "num_experts_per_tok", file);
  p.n_ff_exp = req_int(h, "moe_intermediate_size", file);
  const int64_t n_shared = opt_int(h, "n_shared_experts", 0, 0, file);
  if (n_shared > 0 && p.n_ff_exp > (int64_t{1} << 40) / n_shared)
    fail("%s: moe_intermediate_size x n_shared_experts (%lld x %lld) is out of range", file.c_str(),
         static_cast<long long>(p.n_ff_exp), static_cast<long long>(n_shared));
  p.n_ff_shexp = p.n_ff_exp * n_shared;
  if (!h.contains("q_lora_rank") || h["q_lora_rank"].is_null())
    fail("%s: q_lora_rank is null (an uncompressed q_proj); glm-dsa needs the low-rank query path", file.c_str());
  p.q_lora = req_int(h, "q_lora_rank", file);
  p.kv_lora = req_int(h, "kv_lora_rank", file);
  p.qk_nope = req_int(h, "qk_nope_head_dim", file);
  p.qk_rope = req_int(h, "qk_rope_head_dim", file);
  p.v_head_dim = req_int(h, "v_head_dim", file);
  p.head_dim = p.qk_nope + p.qk_rope;
  p.idx_heads = req_int(h, "index_n_heads", file);
  p.idx_dim = req_int(h, "index_head_dim", file);
  req_int(h, "index_topk", file);
  p.n_dense_lead = opt_int(h, "first_k_dense_replace", 0, 0, file);
  p.n_mtp = opt_int(h, "num_nextn_predict_layers", 0, 0, file);
  p.tie_word_embeddings = h.value("tie_word_embeddings", false);
  const OJson it = h.value("indexer_types", OJson());
  if (!it.is_array() || static_cast<int64_t>(it.size()) != p.n_layer)
    fail("%s: indexer_types must list num_hidden_layers (%lld) entries", file.c_str(), static_cast<long long>(p.n_layer));
  for (const auto& t : it) {
    if (t != "full" && t != "shared") fail("%s: indexer_types entry %s (expected full or shared)", file.c_str(), t.dump().c_str());
    p.indexer_full.push_back(t == "full");
  }
  // HF builds each layer's FFN from mlp_layer_types; llama.cpp only writes first_k_dense_replace. A list that is
  // not "dense" x first_k_dense_replace then "sparse" would give a file that computes another model.
  if (auto m = h.find("mlp_layer_types"); m != h.end() && !m->is_null()) {
    bool ok = m->is_array() && static_cast<int64_t>(m->size()) == p.n_layer;
    for (int64_t i = 0; ok && i < p.n_layer; ++i) ok = (*m)[static_cast<size_t>(i)] == (i < p.n_dense_lead ? "dense" : "sparse");
    if (!ok)
      fail("%s: mlp_layer_types is not %lld x \"dense\" then \"sparse\" (first_k_dense_replace); llama.cpp's glm-dsa "
           "stores only the leading dense count", file.c_str(), static_cast<long long>(p.n_dense_lead));
  }
  return p;
}

// Shard names from the index (sorted, as llama.cpp's index_tensors), or the single model.safetensors.
std::vector<std::string> shard_names(const std::string& dir, std::set<std::string>* index_names) {
  const std::string index = dir + "/model.safetensors.index.json";
  if (file_exists(index)) {
    OJson j = read_json_file(index);
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) fail("%s: no 'weight_map' object", index.c_str());
    std::set<std::string> parts;
    for (auto& [name, part] : j["weight_map"].items()) {
      if (!part.is_string()) fail("%s: weight_map['%s'] is not a file name", index.c_str(), name.c_str());
      const std::string p = part.get<std::string>();
      if (p.empty() || p.find('/') != std::string::npos || p == "." || p == "..")
        fail("%s: weight_map['%s'] = '%s' is not a plain file name", index.c_str(), name.c_str(), p.c_str());
      parts.insert(p);
      index_names->insert(name);
    }
    if (parts.empty()) fail("%s: weight_map is empty", index.c_str());
    return {parts.begin(), parts.end()};
  }
  if (file_exists(dir + "/model.safetensors")) return {"model.safetensors"};
  fail("%s: no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are supported)",
       dir.c_str());
}

}  // namespace

OJson glm_autoconfig(const OJson& raw) {
  // GlmMoeDsaConfig field defaults (transformers 5 configuration_glm_moe_dsa.py) that llama.cpp's converter reads.
  static const OJson kDefaults = {
      {"vocab_size", 154880}, {"hidden_size", 6144}, {"intermediate_size", 12288}, {"moe_intermediate_size", 2048},
      {"num_hidden_layers", 78}, {"num_attention_heads", 64}, {"num_key_value_heads", 64}, {"n_shared_experts", 1},
      {"n_routed_experts", 256}, {"routed_scaling_factor", 2.5}, {"kv_lora_rank", 512}, {"q_lora_rank", 2048},
      {"qk_rope_head_dim", 64}, {"v_head_dim", 256}, {"qk_nope_head_dim", 192}, {"n_group", 1}, {"topk_group", 1},
      {"num_experts_per_tok", 8}, {"norm_topk_prob", true}, {"max_position_embeddings", 202752},
      {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", false}, {"index_topk", 2048}, {"index_head_dim", 128},
      {"index_n_heads", 32}, {"first_k_dense_replace", 3},
  };
  OJson h = raw;
  if (!h.contains("n_routed_experts")) {  // attribute_map num_local_experts, and the BC kwarg num_experts
    if (h.contains("num_local_experts")) h["n_routed_experts"] = h["num_local_experts"];
    if (h.contains("num_experts") && !h["num_experts"].is_null()) h["n_routed_experts"] = h["num_experts"];
  }
  for (auto& [k, v] : kDefaults.items())
    if (!h.contains(k)) h[k] = v;
  // An integer key or d; clamped to +-2^40 (what read_glm_hparams accepts) so the sums below cannot overflow: a
  // value beyond is refused there with its name.
  auto num = [&](const char* k, int64_t d) {
    const auto it = h.find(k);
    const int64_t v = it != h.end() && it->is_number_integer() ? it->get<int64_t>() : d;
    return std::clamp<int64_t>(v, -(int64_t{1} << 40), int64_t{1} << 40);
  };
  // __post_init__.
  if (!h.contains("indexer_types") || h["indexer_types"].is_null()) {
    OJson types = OJson::array();
    const OJson pat = h.value("index_topk_pattern", OJson());
    if (pat.is_string()) {
      for (char ch : pat.get<std::string>()) types.push_back(ch == 'F' ? "full" : ch == 'S' ? "shared" : std::string(1, ch));
    } else if (pat.is_array()) {
      types = pat;
    } else {
      const int64_t freq = std::max<int64_t>(num("index_topk_freq", 1), 1), off = num("index_skip_topk_offset", 2);
      // More layers than a GGUF may hold are refused by read_glm_hparams (indexer_types then lists none).
      int64_t n_layer = num("num_hidden_layers", 0);
      if (n_layer > int64_t{gguf::kMaxLayers}) n_layer = 0;
      for (int64_t i = 0; i < n_layer; ++i)
        types.push_back(std::max<int64_t>(i - off + 1, 0) % freq == 0 ? "full" : "shared");
    }
    h["indexer_types"] = types;
  }
  h["qk_head_dim"] = num("qk_nope_head_dim", 0) + num("qk_rope_head_dim", 0);
  h["head_dim"] = h["qk_rope_head_dim"];
  // RoPE standardisation (modeling_rope_utils convert_rope_params_to_dict / standardize_rope_params).
  const auto nonempty = [&](const char* k) { return h.contains(k) && h[k].is_object() && !h[k].empty(); };
  OJson rope = nonempty("rope_scaling") ? h["rope_scaling"] : nonempty("rope_parameters") ? h["rope_parameters"]
                                                                                           : OJson::object();
  if (!rope.contains("rope_theta")) rope["rope_theta"] = h.contains("rope_theta") ? h["rope_theta"] : OJson(10000.0);
  if (h.contains("partial_rotary_factor") && !rope.contains("partial_rotary_factor"))
    rope["partial_rotary_factor"] = h["partial_rotary_factor"];
  if (!rope.contains("rope_type")) rope["rope_type"] = rope.contains("type") ? rope["type"] : OJson("default");
  h["rope_parameters"] = rope;
  h.erase("rope_scaling");
  h.erase("rope_theta");
  return h;
}

namespace {
HParams parse_config_checked(const OJson& top, const std::string& file, OJson* hparams_out) {
  if (!top.is_object()) fail("%s: not a JSON object", file.c_str());
  const auto mt_it = top.find("model_type");
  const std::string mt = mt_it != top.end() && mt_it->is_string() ? mt_it->get<std::string>() : std::string();
  const bool dense = mt == "qwen3_5" || mt == "qwen3_5_text";
  const bool glm = mt == "glm_moe_dsa";
  if (mt != "qwen3_5_moe" && mt != "qwen3_5_moe_text" && !dense && mt != "qwen3_next" && !glm)
    fail("%s: model_type '%s' is not supported (supported: qwen3_5_moe, qwen3_5_moe_text, qwen3_5, qwen3_5_text, "
         "qwen3_next, glm_moe_dsa)", file.c_str(), mt.c_str());
  OJson hparams = top;
  if (const auto tc = top.find("text_config"); tc != top.end() && tc->is_object())
    for (auto& [k, v] : tc->items()) hparams[k] = v;
  HParams hp;
  if (glm) {
    hparams = glm_autoconfig(hparams);
    hp = read_glm_hparams(hparams, file);
  } else {
    hp = read_hparams(hparams, file, dense);
  }
  hp.model_type = mt;
  if (mt == "qwen3_next") hp.arch = "qwen3next";
  if (hparams_out) *hparams_out = std::move(hparams);
  return hp;
}
}  // namespace

HParams parse_config(const OJson& top, const std::string& file, OJson* hparams_out) {
  return json_checked(file, [&] { return parse_config_checked(top, file, hparams_out); });
}

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  c.dir = dir;
  const std::string cfg = dir + "/config.json";
  c.config_json = read_json_file(cfg);
  c.hp = parse_config(c.config_json, cfg, &c.hparams);

  std::set<std::string> index_names;
  std::map<std::string, size_t> seen;
  for (const std::string& part : shard_names(dir, &index_names)) {
    const std::string path = dir + "/" + part;
    if (!file_exists(path)) fail("%s: missing model file (listed in model.safetensors.index.json)", path.c_str());
    c.files.push_back(std::make_unique<safetensors::File>(safetensors::File::open(path)));
    const size_t fi = c.files.size() - 1;
    for (const safetensors::TensorInfo& t : c.files[fi]->tensors()) {
      if (auto it = seen.find(t.name); it != seen.end())
        fail("%s: tensor '%s' also appears in %s", path.c_str(), t.name.c_str(), c.files[it->second]->name().c_str());
      seen[t.name] = fi;
      c.tensors.push_back({t.name, &t, fi});
    }
  }
  if (!index_names.empty()) {
    std::vector<std::string> missing, extra;
    for (const std::string& n : index_names)
      if (!seen.count(n)) missing.push_back(n);
    for (const auto& [n, fi] : seen)
      if (!index_names.count(n)) extra.push_back(n);
    if (!missing.empty() || !extra.empty()) {
      std::string msg;
      for (size_t i = 0; i < missing.size() && i < 10; ++i) msg += " missing:" + missing[i];
      for (size_t i = 0; i < extra.size() && i < 10; ++i) msg += " extra:" + extra[i];
      fail("%s/model.safetensors.index.json: weight_map does not match the shards (%zu missing, %zu extra):%s",
           dir.c_str(), missing.size(), extra.size(), msg.c_str());
    }
  }
  return c;
}

}  // namespace tern::convert
