// A Hugging Face Qwen3.5-MoE, dense Qwen3.5, Qwen3-Next or GLM-5 (glm_moe_dsa) checkpoint directory: config.json
// (text_config merged over the top level, as llama.cpp's converter does), the safetensors files (one file or shards
// listed by model.safetensors.index.json) and the tokenizer files. Everything is validated before any tensor data
// is read. Non-goals: pickle (.bin) checkpoints, remote downloads, other architectures.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/safetensors.h"

namespace tern::convert {

using OJson = nlohmann::ordered_json;

// Geometry read from config.json (names follow the GGUF keys they feed).
struct HParams {
  std::string model_type;  // "qwen3_5_moe", "qwen3_5_moe_text" (GGUF qwen35moe) or "qwen3_5", "qwen3_5_text" (qwen35),
                           // "qwen3_next" (qwen3next), "glm_moe_dsa" (glm-dsa)
  std::string arch = "qwen35moe";  // the GGUF architecture written
  int64_t n_ff = 0;                // dense FFN width (qwen35, glm-dsa leading dense layers: intermediate_size)
  bool dense() const { return arch == "qwen35"; }
  bool next() const { return arch == "qwen3next"; }  // Qwen3-Next: fused in_proj_qkvz / in_proj_ba, V heads grouped
  bool glm() const { return arch == "glm-dsa"; }     // GLM-5: MLA + DSA indexer, leading dense layers, MoE
  int64_t n_layer = 0, n_embd = 0, n_vocab = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  int64_t ssm_conv_kernel = 0, ssm_k_heads = 0, ssm_v_heads = 0, ssm_k_dim = 0, ssm_v_dim = 0;
  int64_t full_attention_interval = 4;
  bool has_layer_types = false;   // config lists layer_types (then recurrent_layers is written)
  std::vector<bool> recurrent;    // [n_layer]: true = Gated DeltaNet, false = full attention (gguf::hybrid_layer_kinds)
  int64_t n_mtp = 0;              // mtp_num_hidden_layers (0 when absent)
  bool tie_word_embeddings = false;

  // glm-dsa (spec glm_moe_dsa.md section 1). n_mtp is num_nextn_predict_layers, n_ff_shexp is
  // moe_intermediate_size * n_shared_experts.
  int64_t q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head_dim = 0;
  int64_t n_dense_lead = 0;             // first_k_dense_replace: layers [0, n_dense_lead) have a dense FFN
  int64_t idx_heads = 0, idx_dim = 0;   // index_n_heads, index_head_dim
  std::vector<bool> indexer_full;       // [n_layer]: indexer_types == "full" (false: "shared", no indexer tensors)

  int64_t conv_dim() const { return 2 * ssm_k_heads * ssm_k_dim + ssm_v_heads * ssm_v_dim; }
};

struct SourceTensor {
  std::string name;                        // as stored in the checkpoint
  const safetensors::TensorInfo* info;     // owned by Checkpoint::files
  size_t file = 0;                         // index into Checkpoint::files
};

struct Checkpoint {
  std::string dir;
  OJson config_json;    // config.json as written (gguf-py SpecialVocab reads it raw)
  // config.json with text_config merged over the top level; for glm_moe_dsa, what transformers' AutoConfig
  // .to_dict() gives llama.cpp's converter (class defaults filled in, __post_init__ applied: glm_autoconfig()).
  OJson hparams;
  HParams hp;
  std::vector<std::unique_ptr<safetensors::File>> files;
  // Sorted by name within each file, files in sorted order; a name in two files is an error.
  std::vector<SourceTensor> tensors;

  static Checkpoint open(const std::string& dir);  // throws Error naming the file
};

// GlmMoeDsaConfig (transformers 5) applied to a config.json: absent keys take the class defaults, then
// __post_init__ (indexer_types from index_topk_pattern or index_topk_freq / index_skip_topk_offset, head_dim =
// qk_rope_head_dim, mlp_layer_types) and the RoPE standardisation (rope_parameters with rope_theta, default
// 10000, and rope_type). llama.cpp's converter reads these values, not the raw file. Exposed for tests.
OJson glm_autoconfig(const OJson& raw);

// The geometry of config.json's object `top` (`file` names it in errors): the model type checked, text_config merged
// over the top level (into *hparams when given: what llama.cpp's converter reads; for glm_moe_dsa after
// glm_autoconfig), every key the architecture needs read and range-checked. Throws Error naming the file and key.
HParams parse_config(const OJson& top, const std::string& file, OJson* hparams = nullptr);

// f(), with an nlohmann exception (a value of another JSON type than its key takes) turned into an Error naming
// `where`: the boundary of each step that reads a checkpoint's JSON files.
template <class F>
auto json_checked(const std::string& where, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    fail("%s: %s", where.c_str(), e.what());
  }
}

// Parses a JSON file; throws Error naming it (missing, unreadable, malformed).
OJson read_json_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace tern::convert
