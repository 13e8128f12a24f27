// Qwen3.5/3.6 hyper-parameters, MoE (GGUF arch "qwen35moe") or dense (arch "qwen35": the same hybrid trunk with a
// dense SwiGLU FFN), and Qwen3-Next (arch "qwen3next": the qwen35moe computation with value heads in grouped order and
// beta/alpha fused), read from GGUF keys and validated; contract: shared/spec/qwen35moe.md sections 1-2. Layer kind is data (layer_kind[i]), never inferred from tensors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/hybrid_layers.h"
#include "models/blocks/attention.h"
#include "models/blocks/deltanet.h"
#include "models/blocks/moe.h"

namespace tern::models::qwen35moe {

using gguf::LayerKind;  // kRecurrent: Gated DeltaNet; kAttention: gated full attention (formats/hybrid_layers.h)

struct Config {
  std::string arch;        // "qwen35moe", "qwen35" or "qwen3next"
  int64_t n_layer = 0;     // trunk layers (block_count minus nextn_predict_layers)
  int64_t n_nextn = 0;     // MTP blocks appended after the trunk; the first one is loaded (Weights::mtp)
  int64_t n_embd = 0;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f;

  // Gated full attention.
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  float rope_freq_base = 10000.0f;

  // Gated DeltaNet.
  int64_t conv_kernel = 0;   // ssm.conv_kernel (4)
  int64_t head_k_dim = 0;    // ssm.state_size (128)
  int64_t n_k_heads = 0;     // ssm.group_count (16)
  int64_t n_v_heads = 0;     // ssm.time_step_rank (32)
  int64_t head_v_dim = 0;    // ssm.inner_size / n_v_heads (128)
  int64_t conv_dim() const { return 2 * n_k_heads * head_k_dim + n_v_heads * head_v_dim; }
  int64_t value_dim() const { return n_v_heads * head_v_dim; }

  // MoE (qwen35moe); all 0 for the dense FFN of qwen35, whose width is n_ff.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  int64_t n_ff = 0;
  bool dense() const { return n_expert == 0; }

  std::vector<LayerKind> layer_kind;  // [n_layer]
  int64_t n_attention_layers() const;
  int64_t n_deltanet_layers() const { return n_layer - n_attention_layers(); }

  // The blocks' parameters (models/blocks/): they know nothing of this model.
  AttentionParams attention() const {
    return {n_embd, n_head, n_head_kv, head_dim, n_rot, rope_freq_base, rms_eps};
  }
  DeltaNetParams deltanet() const {
    return {n_embd, conv_kernel, head_k_dim, n_k_heads, n_v_heads, head_v_dim, rms_eps, arch == "qwen3next"};
  }
  MoeParams moe() const { return {n_embd, n_expert, n_expert_used, n_ff_exp, n_ff_shexp}; }

  static Config from_gguf(const gguf::File& f);  // throws Error naming the file and key
};

// This rank's view of the model split over `ranks` (Model::distribute): the head counts of its share of each mixer
// (blocks/tensor_split.h head_share; unchanged where a mixer runs whole on every rank). The blocks, the state shape
// and the buffers follow it.
Config rank_config(const Config& c, int ranks, int rank);

}  // namespace tern::models::qwen35moe
