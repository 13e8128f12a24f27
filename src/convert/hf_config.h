// A Hugging Face Qwen3.5-MoE or dense Qwen3.5 checkpoint directory: config.json (text_config merged over the top level, as
// llama.cpp's converter does), the safetensors files (one file or shards listed by model.safetensors.index.json)
// and the tokenizer files. Everything is validated before any tensor data is read.
// Non-goals: pickle (.bin) checkpoints, remote downloads, other architectures.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace tern::convert {

using OJson = nlohmann::ordered_json;

// Geometry read from config.json (names follow the GGUF keys they feed).
struct HParams {
  std::string model_type;  // "qwen3_5_moe", "qwen3_5_moe_text" (GGUF qwen35moe) or "qwen3_5", "qwen3_5_text" (qwen35)
  std::string arch = "qwen35moe";  // the GGUF architecture written
  int64_t n_ff = 0;                // dense FFN width (qwen35: intermediate_size)
  bool dense() const { return arch == "qwen35"; }
  bool next() const { return arch == "qwen3next"; }  // Qwen3-Next: fused in_proj_qkvz / in_proj_ba, V heads grouped
  int64_t n_layer = 0, n_embd = 0, n_vocab = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  int64_t ssm_conv_kernel = 0, ssm_k_heads = 0, ssm_v_heads = 0, ssm_k_dim = 0, ssm_v_dim = 0;
  int64_t full_attention_interval = 4;
  bool has_layer_types = false;   // config lists layer_types (then recurrent_layers is written)
  std::vector<bool> recurrent;    // [n_layer]: true = Gated DeltaNet, false = full attention (gguf::hybrid_layer_kinds)
  int64_t n_mtp = 0;              // mtp_num_hidden_layers (0 when absent)
  bool tie_word_embeddings = false;

  int64_t conv_dim() const { return 2 * ssm_k_heads * ssm_k_dim + ssm_v_heads * ssm_v_dim; }
};

struct SourceTensor {
  std::string name;                        // as stored in the checkpoint
  const safetensors::TensorInfo* info;     // owned by Checkpoint::files
  size_t file = 0;                         // index into Checkpoint::files
};

struct Checkpoint {
  std::string dir;
  OJson hparams;        // config.json with text_config merged over the top level
  HParams hp;
  std::vector<std::unique_ptr<safetensors::File>> files;
  // Sorted by name within each file, files in sorted order; a name in two files is an error.
  std::vector<SourceTensor> tensors;

  static Checkpoint open(const std::string& dir);  // throws Error naming the file
};

// Parses a JSON file; throws Error naming it (missing, unreadable, malformed).
OJson read_json_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace tern::convert
