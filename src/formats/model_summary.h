// Model geometry and weight statistics read from a GGUF's metadata and tensor table, for `tern info` and the
// memory planner. Works for any architecture: the `<arch>.*` keys are read when present; hybrid layer kinds
// (attention vs recurrent) follow llama.cpp's qwen35/qwen35moe/qwen3next rule (formats/hybrid_layers.h).
// Non-goal: validating that a model is loadable (models/<family>/config does that).
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/hybrid_layers.h"  // LayerKind, layer_kind_name, kMaxLayers

namespace tern::gguf {

struct TypeStats {
  uint64_t count = 0, bytes = 0, params = 0;
};

struct ModelSummary {
  std::string file;
  uint64_t file_bytes = 0;
  uint32_t version = 0;
  std::string architecture;  // general.architecture; empty when the file has none
  std::string name;          // general.name
  uint32_t n_layer = 0;      // <arch>.block_count (includes NextN blocks), else 1 + the highest blk.N
  uint32_t n_layer_nextn = 0;
  uint32_t n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;  // head counts: max over layers
  uint32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  uint64_t n_vocab = 0, n_ctx_train = 0;
  std::vector<LayerKind> layer_kinds;  // empty unless the architecture is hybrid
  std::string layer_rule;              // how layer_kinds were derived
  // Other `<arch>.*` integer hyperparameters found (key without the prefix -> value), e.g. ssm.state_size.
  std::map<std::string, int64_t> extra;

  uint64_t n_tensors = 0, tensor_bytes = 0;
  std::map<std::string, TypeStats> by_type;  // ggml type name -> stats
  uint64_t n_params = 0;
  uint64_t n_params_active = 0;  // routed expert tensors (*_exps) count n_expert_used / n_expert
  uint64_t bytes_per_token = 0;  // weights one decode token reads (see summarize())
};

// Throws Error (naming the file and key) when a geometry key has the wrong type or an impossible value.
ModelSummary summarize(const File& f);
nlohmann::json to_json(const ModelSummary& s);

bool is_hybrid_architecture(const std::string& arch);  // qwen35, qwen35moe, qwen3next
bool is_routed_expert_tensor(std::string_view name);   // blk.N.*_exps.*

}  // namespace tern::gguf
