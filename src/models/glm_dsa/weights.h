// GLM-5 weights: the only place that knows the glm-dsa tensor names and shapes (GGUF as llama.cpp's converter
// writes them; contract section 2). Matrices are zero-copy views into the mapped file; norms and biases f32.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "formats/gguf.h"
#include "models/blocks/ffn.h"
#include "models/blocks/linear.h"
#include "models/blocks/mla.h"
#include "models/blocks/moe.h"
#include "models/expert_store.h"
#include "models/glm_dsa/config.h"
#include "models/model.h"

namespace tern::models::glm_dsa {

struct LayerWeights {
  backend::Floats attn_norm, ffn_norm;  // [n_embd]
  MlaWeights mla;
  FfnWeights ffn;  // the leading dense layers
  MoeWeights moe;  // the others
};

// The NextN (MTP) block at index n_layer (its decoder layer is Weights::layers.back()): h' = eh_proj([enorm(embed(t+1)),
// hnorm(h_t)]), the layer, then head_norm and head give the draft's logits for t+2.
struct MtpWeights {
  Linear eh_proj;                         // {2 * n_embd, n_embd}
  Linear embed, head;                     // nextn.embed_tokens / nextn.shared_head_head, else token_embd / output
  bool own_head = false;                  // head is nextn.shared_head_head (else output, re-pointed after a repack)
  backend::Floats enorm, hnorm, head_norm;  // head_norm: nextn.shared_head_norm, else output_norm
};

struct Weights {
  Linear token_embd, output;  // {n_embd, n_vocab}
  backend::Floats output_norm;
  std::vector<LayerWeights> layers;  // [n_layer], then the MTP block's decoder layer when the file has one
  bool has_mtp = false;
  MtpWeights mtp;
  std::vector<std::string> unused;
  std::vector<std::unique_ptr<backend::Buffer>> owned;  // matrices built at load (the key expansions)

  static Weights load(const gguf::File& f, const Config& c, backend::Backend& be);  // throws Error naming the tensor
};

// The type of a layer's expanded-form key up-projection (MlaWeights::wk_b_t) for a file whose attn_k_b is `wk_b`:
// F32 / F16 copies of float files (exact, BF16 -> F16 up to range), Q8_0 for quantized ones (F16 when kv_lora is
// not whole 32-blocks); and its bytes for the tensor `t` (0 for any other tensor or the MTP block's).
quant::Type key_expansion_type(quant::Type wk_b, const Config& c);
uint64_t key_expansion_bytes(const gguf::TensorInfo& t, const Config& c);

// The memory planner's figure for one tensor, by the same rules as Model::repack.
bool tensor_repacked(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts);
uint64_t resident_tensor_bytes(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts);

struct Model {
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<gguf::File> file;
  Config config;
  Weights weights;
  RepackScope repack_scope = RepackScope::kNone;
  std::vector<std::unique_ptr<backend::Buffer>> repacked;
  static std::unique_ptr<Model> load(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be = nullptr);
  RepackReport repack(RepackScope scope);
  // The routed experts, for an ExpertStore (models/expert_store.h).
  ExpertLayout expert_layout() const;
};

}  // namespace tern::models::glm_dsa
