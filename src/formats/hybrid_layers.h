// Layer kinds of hybrid models (Qwen3.5/3.5-MoE/Qwen3-Next: Gated DeltaNet layers with full attention every
// few layers, NextN/MTP blocks after the trunk) and the block a GGUF tensor belongs to ("blk.N."). The one
// place these rules are written: formats' model summary, the converter and the model configs all call it.
// Non-goal: which tensors a layer kind has (models/<family>/weights and convert/contract know that).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tern::gguf {

class File;

constexpr uint32_t kMaxLayers = 1u << 16;  // layers above this are refused (per-layer tables are sized by it)
constexpr int64_t kDefaultFullAttentionInterval = 4;  // llama.cpp and HF Qwen3-Next when the key is absent

enum class LayerKind { kAttention, kRecurrent, kNextN };  // kNextN: MTP (next-token prediction) block
const char* layer_kind_name(LayerKind k);                 // "attention", "recurrent", "nextn"

// The inputs of the hybrid rule, read from a GGUF header or an HF config.json by the caller.
struct HybridLayerRule {
  int64_t n_layer = 0;  // trunk layers (GGUF block_count - nextn_predict_layers; HF num_hidden_layers)
  int64_t n_nextn = 0;  // NextN/MTP blocks after the trunk
  // Explicit per-layer flags (GGUF `<arch>.attention.recurrent_layers`, HF `layer_types`), true = recurrent;
  // at least n_layer of them (entries past the trunk are ignored). When present they decide, and the interval
  // is neither used nor checked.
  std::optional<std::vector<bool>> recurrent;
  std::optional<int64_t> interval;  // full_attention_interval; absent: kDefaultFullAttentionInterval
  // Where the inputs came from, for errors: "<source>: key '<recurrent_key>': ...".
  std::string source = "hybrid layer rule";              // the file: "m.gguf", "ckpt/config.json"
  std::string recurrent_key = "recurrent_layers";        // "qwen35moe.attention.recurrent_layers", "layer_types"
  std::string interval_key = "full_attention_interval";  // "qwen35moe.full_attention_interval"
};

// The rule, pure: [n_layer + n_nextn] kinds. Trunk layer i is the explicit flag when flags are given, else
// kAttention iff (i + 1) % interval == 0, else kRecurrent; the n_nextn blocks after the trunk are kNextN.
// Throws Error naming the source and key: negative counts, more than kMaxLayers layers in all, fewer flags
// than n_layer, an interval < 1 (when used).
std::vector<LayerKind> hybrid_layer_kinds(const HybridLayerRule& rule);

// The kinds of a GGUF model and how they were decided (for `tern info`): reads
// `<arch>.attention.recurrent_layers` (a flag per layer, or one bool for every trunk layer, as llama.cpp's
// get_key_or_arr) and `<arch>.full_attention_interval` (u32). n_layer is the trunk, n_nextn the blocks after
// it. Throws Error naming the file and key (wrong type, too few flags, interval 0, counts out of range).
struct HybridLayers {
  std::vector<LayerKind> kinds;  // [n_layer + n_nextn]
  std::string rule;              // "qwen35moe.attention.recurrent_layers", "full attention every 4 layers (...)"
};
HybridLayers read_hybrid_layers(const File& f, std::string_view arch, int64_t n_layer, int64_t n_nextn);

// N of a tensor named "blk.N.<rest>", else -1: no "blk." prefix, no digits, no '.' right after them, or N
// above INT64_MAX. Leading zeros are accepted ("blk.03." is 3); signs are not.
int64_t block_index(std::string_view tensor_name);

}  // namespace tern::gguf
