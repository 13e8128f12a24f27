// config.json and safetensors discovery. Key lookups follow llama.cpp's converter (conversion/base.py
// TextModel.__init__, Qwen3NextModel.set_gguf_parameters) so the same config gives the same GGUF keys.
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

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  c.dir = dir;
  const std::string cfg = dir + "/config.json";
  OJson top = read_json_file(cfg);
  if (!top.is_object()) fail("%s: not a JSON object", cfg.c_str());
  const std::string mt = top.value("model_type", std::string());
  const bool dense = mt == "qwen3_5" || mt == "qwen3_5_text";
  if (mt != "qwen3_5_moe" && mt != "qwen3_5_moe_text" && !dense && mt != "qwen3_next")
    fail("%s: model_type '%s' is not supported (supported: qwen3_5_moe, qwen3_5_moe_text, qwen3_5, qwen3_5_text, "
         "qwen3_next)", cfg.c_str(), mt.c_str());
  c.hparams = top;
  if (top.contains("text_config") && top["text_config"].is_object())
    for (auto& [k, v] : top["text_config"].items()) c.hparams[k] = v;
  c.hp = read_hparams(c.hparams, cfg, dense);
  c.hp.model_type = mt;
  if (mt == "qwen3_next") c.hp.arch = "qwen3next";

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
