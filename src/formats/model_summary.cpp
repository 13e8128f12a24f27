// Geometry summary of a GGUF model. Key names follow gguf-py's constants (Keys.LLM / Keys.Attention / Keys.SSM);
// the hybrid layer rule is formats/hybrid_layers.h's (read_hybrid_layers); the last
// `<arch>.nextn_predict_layers` blocks are MTP blocks.
#include "formats/model_summary.h"

#include <algorithm>
#include <cinttypes>

#include "core/error.h"
#include "formats/gguf_util.h"

namespace tern::gguf {

bool is_hybrid_architecture(const std::string& arch) {
  return arch == "qwen35moe" || arch == "qwen35" || arch == "qwen3next";
}

bool is_routed_expert_tensor(std::string_view name) {
  return block_index(name) >= 0 && name.find("_exps.") != std::string_view::npos;
}

namespace {

// A u32 hyperparameter stored as a scalar or as a per-layer array (llama.cpp get_key_or_arr): the maximum.
std::optional<uint32_t> u32_or_array_max(const File& f, const std::string& key) {
  const Value* v = f.find(key);
  if (!v) return std::nullopt;
  if (!v->is_array()) return f.get_u32(key);
  uint64_t m = 0;
  try {
    for (uint64_t i = 0; i < v->array_size(); ++i) {
      const int64_t x = v->array_i64(i);
      if (x < 0 || x > UINT32_MAX) fail("key '%s': element %" PRIu64 " = %" PRId64 " is not a u32", key.c_str(), i, x);
      m = std::max<uint64_t>(m, static_cast<uint64_t>(x));
    }
  } catch (const Error& e) {
    fail("%s: %s", f.name().c_str(), e.what());
  }
  return static_cast<uint32_t>(m);
}

void read_geometry(const File& f, ModelSummary& s) {
  const std::string a = s.architecture + ".";
  auto u32 = [&](const std::string& k) { return f.opt_u32(a + k).value_or(0); };
  s.n_layer = u32("block_count");
  s.n_layer_nextn = u32("nextn_predict_layers");
  s.n_embd = u32("embedding_length");
  s.n_head = u32_or_array_max(f, a + "attention.head_count").value_or(0);
  s.n_head_kv = u32_or_array_max(f, a + "attention.head_count_kv").value_or(s.n_head);
  s.head_dim = u32("attention.key_length");
  if (s.head_dim == 0 && s.n_head > 0) s.head_dim = s.n_embd / s.n_head;
  s.n_ff = u32_or_array_max(f, a + "feed_forward_length").value_or(0);
  s.n_expert = u32("expert_count");
  s.n_expert_used = u32("expert_used_count");
  s.n_ff_exp = u32("expert_feed_forward_length");
  s.n_ff_shexp = u32("expert_shared_feed_forward_length");
  if (s.n_ff_shexp == 0) s.n_ff_shexp = u32("expert_shared_count") * s.n_ff_exp;  // DeepSeek / GLM: n shared of expert width
  s.n_ctx_train = f.opt_u64(a + "context_length").value_or(0);
  if (s.n_expert_used > s.n_expert)
    fail("%s: key '%sexpert_used_count': %u experts used per token, but only %u experts", f.name().c_str(), a.c_str(),
         s.n_expert_used, s.n_expert);
  if (s.n_layer > kMaxLayers)
    fail("%s: key '%sblock_count': %u layers, more than the %u tern accepts", f.name().c_str(), a.c_str(), s.n_layer,
         kMaxLayers);
  if (s.n_layer_nextn > s.n_layer)
    fail("%s: key '%snextn_predict_layers': %u exceeds block_count %u", f.name().c_str(), a.c_str(), s.n_layer_nextn,
         s.n_layer);
  static const char* kShown[] = {"block_count", "nextn_predict_layers", "embedding_length", "attention.head_count",
                                 "attention.head_count_kv", "attention.key_length", "feed_forward_length",
                                 "expert_count", "expert_used_count", "expert_feed_forward_length",
                                 "expert_shared_feed_forward_length", "expert_shared_count", "context_length", "vocab_size"};
  for (const Value& v : f.metadata()) {
    std::string_view k = v.key();
    if (k.substr(0, a.size()) != a || !v.is_integer()) continue;
    std::string rest(k.substr(a.size()));
    if (std::find(std::begin(kShown), std::end(kShown), rest) != std::end(kShown)) continue;
    if (v.type() == ValueType::U64 && v.as_u64() > INT64_MAX) continue;
    s.extra[rest] = v.to_i64();
  }
}

void read_layer_kinds(const File& f, ModelSummary& s) {
  const std::string a = s.architecture + ".";
  if (!f.find(a + "attention.recurrent_layers") && !f.find(a + "full_attention_interval") &&
      !is_hybrid_architecture(s.architecture))
    return;
  HybridLayers h = read_hybrid_layers(f, s.architecture, int64_t{s.n_layer} - s.n_layer_nextn, s.n_layer_nextn);
  s.layer_kinds = std::move(h.kinds);
  s.layer_rule = std::move(h.rule);
}

uint64_t scale(uint64_t x, uint64_t num, uint64_t den) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(x) * num / den);
}

// Totals, active parameters and the bytes one decode token reads: every tensor of the main layers once, routed
// experts at n_expert_used / n_expert, token_embd one row (unless it doubles as the output projection), NextN
// blocks not at all (they run only for speculative drafting).
void read_tensor_stats(const File& f, ModelSummary& s) {
  const bool tied = f.find_tensor("output.weight") == nullptr;
  const bool moe = s.n_expert > 0 && s.n_expert_used > 0;
  int64_t max_blk = -1;
  for (const TensorInfo& t : f.tensors()) {
    const uint64_t params = static_cast<uint64_t>(t.n_elements);
    TypeStats& ts = s.by_type[quant::type_name(t.type)];
    ++ts.count, ts.bytes += t.n_bytes, ts.params += params;
    ++s.n_tensors, s.tensor_bytes += t.n_bytes, s.n_params += params;
    const int64_t blk = block_index(t.name);
    max_blk = std::max(max_blk, blk);
    const bool expert = moe && is_routed_expert_tensor(t.name);
    s.n_params_active += expert ? scale(params, s.n_expert_used, s.n_expert) : params;
    const bool nextn = blk >= 0 && s.n_layer_nextn > 0 && blk >= int64_t{s.n_layer} - s.n_layer_nextn;
    if (nextn) continue;
    if (expert) {
      s.bytes_per_token += scale(t.n_bytes, s.n_expert_used, s.n_expert);
    } else if (t.name == "token_embd.weight" && !tied) {
      const int64_t rows = t.n_elements / std::max<int64_t>(t.ne[0], 1);
      s.bytes_per_token += rows > 0 ? t.n_bytes / static_cast<uint64_t>(rows) : 0;
    } else {
      s.bytes_per_token += t.n_bytes;
    }
  }
  if (s.n_layer == 0 && max_blk >= 0 && max_blk < int64_t{kMaxLayers}) s.n_layer = static_cast<uint32_t>(max_blk + 1);
}

}  // namespace

ModelSummary summarize(const File& f) {
  ModelSummary s;
  s.file = f.name();
  s.file_bytes = f.file_size();
  s.version = f.version();
  s.architecture = std::string(f.opt_str("general.architecture").value_or(""));
  s.name = std::string(f.opt_str("general.name").value_or(""));
  if (!s.architecture.empty()) read_geometry(f, s);
  // Vocabulary: <arch>.vocab_size, else the tokenizer's token list, else token_embd's row count.
  if (auto v = s.architecture.empty() ? std::nullopt : f.opt_u64(s.architecture + ".vocab_size")) {
    s.n_vocab = *v;
  } else if (const Value* toks = f.opt_arr("tokenizer.ggml.tokens")) {
    s.n_vocab = toks->array_size();
  } else if (const TensorInfo* te = f.find_tensor("token_embd.weight")) {
    s.n_vocab = static_cast<uint64_t>(te->ne[1]);
  }
  read_tensor_stats(f, s);
  if (!s.architecture.empty()) read_layer_kinds(f, s);
  return s;
}

nlohmann::json to_json(const ModelSummary& s) {
  nlohmann::json j;
  j["file"] = s.file;
  j["file_bytes"] = s.file_bytes;
  j["gguf_version"] = s.version;
  j["architecture"] = s.architecture;
  j["name"] = s.name;
  j["n_layer"] = s.n_layer;
  j["n_layer_nextn"] = s.n_layer_nextn;
  j["n_embd"] = s.n_embd;
  j["n_head"] = s.n_head;
  j["n_head_kv"] = s.n_head_kv;
  j["head_dim"] = s.head_dim;
  j["n_ff"] = s.n_ff;
  j["n_expert"] = s.n_expert;
  j["n_expert_used"] = s.n_expert_used;
  j["n_ff_exp"] = s.n_ff_exp;
  j["n_ff_shexp"] = s.n_ff_shexp;
  j["n_vocab"] = s.n_vocab;
  j["n_ctx_train"] = s.n_ctx_train;
  nlohmann::json kinds = nlohmann::json::array();
  for (LayerKind k : s.layer_kinds) kinds.push_back(layer_kind_name(k));
  j["layer_kinds"] = kinds;
  j["layer_rule"] = s.layer_rule;
  j["hparams"] = s.extra;
  j["n_tensors"] = s.n_tensors;
  j["tensor_bytes"] = s.tensor_bytes;
  nlohmann::json types = nlohmann::json::object(), type_bytes = nlohmann::json::object();
  for (const auto& [name, st] : s.by_type) {
    types[name] = st.count;
    type_bytes[name] = st.bytes;
  }
  j["tensor_types"] = types;
  j["tensor_type_bytes"] = type_bytes;
  j["n_params"] = s.n_params;
  j["n_params_active"] = s.n_params_active;
  j["bytes_per_token"] = s.bytes_per_token;
  return j;
}

}  // namespace tern::gguf
