// GLM-5 family hyper-parameters (GGUF arch "glm-dsa", HF GlmMoeDsaForCausalLM), read from the keys llama.cpp's
// converter writes and validated; contract /work/shared/spec/glm_moe_dsa.md sections 1 and 12.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "models/blocks/mla.h"
#include "models/blocks/moe.h"

namespace tern::models::glm_dsa {

struct Config {
  std::string arch;       // "glm-dsa"
  int64_t n_layer = 0;    // trunk layers (block_count minus nextn_predict_layers)
  int64_t n_nextn = 0;    // MTP blocks after the trunk: the first drafts (speculative decoding), the rest are ignored
  int64_t n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  float rms_eps = 1e-5f;

  // MLA.
  int64_t n_head = 0, q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v_head = 0;
  float rope_freq_base = 10000.0f;
  // The indexer.
  int64_t idx_heads = 0, idx_dim = 0, idx_topk = 0;
  std::vector<bool> idx_full;  // [n_layer]: the layer runs its own indexer (else reuses the last full layer's top-k)
  bool mtp_own_indexer = false;  // the MTP block has indexer tensors of its own (from the file's tensor table)

  // FFN: the first n_dense layers dense (width n_ff), then MoE.
  int64_t n_dense = 0, n_ff = 0;
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  bool expert_norm = true;
  float expert_scale = 1.0f;
  ops::Gating gating = ops::Gating::kSigmoid;

  bool dense_layer(int64_t il) const { return il < n_dense; }
  // dense_layer for the trunk; the MTP block's layer (il == n_layer) is an MoE layer unless the model has no experts.
  bool dense_block(int64_t il) const { return il < n_layer ? dense_layer(il) : n_expert == 0; }
  int64_t n_full_indexer_layers() const;
  // The MTP block drafts when the model has no indexer or the block has its own: a block that would share one (a
  // GLM-5.2 layout could) has no earlier layer in the draft pass to take a top-k from.
  bool mtp_drafts() const { return n_nextn > 0 && (idx_heads == 0 || mtp_own_indexer); }

  MlaForm mla_form = MlaForm::kAuto;  // not from the file: --mla-form (LoadedModel::set_mla_form)
  MlaParams mla() const;
  MoeParams moe() const;

  static Config from_gguf(const gguf::File& f);  // throws Error naming the file and key
};

}  // namespace tern::models::glm_dsa
