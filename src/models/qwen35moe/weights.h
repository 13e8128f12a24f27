// Qwen3.5-MoE weights: the only place that knows tensor names and shapes (GGUF as llama.cpp's converter
// writes them; contract section 3). Matrices are zero-copy views into the mapped file; small vectors
// (norms, gates, conv taps) are dequantized to f32 once at load.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/mmap.h"
#include "formats/gguf.h"
#include "models/blocks/attention.h"
#include "models/blocks/deltanet.h"
#include "models/blocks/ffn.h"
#include "models/blocks/linear.h"
#include "models/blocks/moe.h"
#include "models/blocks/tensor_split.h"
#include "models/expert_store.h"
#include "models/model.h"
#include "models/qwen35moe/config.h"

namespace tern::models::qwen35moe {

struct LayerWeights {
  LayerKind kind = LayerKind::kRecurrent;
  backend::Floats attn_norm, post_norm;  // [n_embd], folded 1 + w
  AttentionWeights attn;
  DeltaNetWeights dn;
  MoeWeights moe;   // qwen35moe
  FfnWeights ffn;   // qwen35 (dense)
};

// The multi-token-prediction block, as llama.cpp's converter writes Qwen3.5 / Qwen3-Next MTP: tensors
// blk.{n_layer}.nextn.* plus a full-attention decoder layer at that block index (held as layers[n_layer]). It drafts
// the token after next from the trunk's final-normed hidden state and the next token's embedding:
// x = eh_proj([enorm(embed(token)) | hnorm(hidden)]), one decoder layer, head_norm, LM head.
struct MtpWeights {
  Linear eh_proj;                // {2 * n_embd, n_embd}
  backend::Floats enorm, hnorm;  // [n_embd], folded 1 + w
  backend::Floats head_norm;     // [n_embd]: nextn.shared_head_norm, else the trunk's output_norm
  Linear embed;                  // nextn.embed_tokens, else the trunk's token_embd
  Linear head;                   // nextn.shared_head_head, else the trunk's output
  bool own_embed = false, own_head = false;  // the file has the block's own; else it shares (and follows) the trunk's
  // A cheaper draft head (optional, metadata key tern.draft_vocab: token ids, e.g. a corpus's most frequent): the
  // head's rows for those ids only (padded to a multiple of 8 rows by repeating the last id), so a draft step's LM
  // head reads vocab.size() rows instead of n_vocab; tokens outside it are never drafted (their logits -inf).
  std::vector<int32_t> vocab;    // [rows of head_sub]
  Linear head_sub;
};

inline constexpr const char* kDraftVocabKey = "tern.draft_vocab";

struct Weights {
  Linear token_embd;         // {n_embd, n_vocab}
  Linear output;             // {n_embd, n_vocab}: output.weight, or token_embd when tied
  bool tied_output = false;
  backend::Floats output_norm;
  std::vector<LayerWeights> layers;  // [n_layer] trunk, then the MTP block's decoder layer when mtp is loaded
  bool has_mtp = false;
  MtpWeights mtp;
  std::vector<std::string> unused;  // tensors present but not used (MTP blocks past the first), reported at load
  std::vector<std::shared_ptr<backend::Buffer>> owned;  // matrices rearranged at load (legacy qwen3next ssm_in)

  // Matrices stay where the backend maps them (the CPU: the file, zero copy); vectors are copied into it.
  static Weights load(const gguf::File& f, const Config& c, backend::Backend& be);  // throws Error naming the tensor
};

// Resident bytes of one GGUF tensor when the model is repacked (repack_experts: the routed experts too), from
// the header alone: the memory planner's figure, computed by the same rules as Model::repack.
bool tensor_repacked(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts);
uint64_t resident_tensor_bytes(const gguf::TensorInfo& t, const Config& c, bool repack, bool repack_experts);
// Extra bytes a repacked model holds beyond its tensors: the LM head's own repacked copy when it is tied to
// the token embeddings (which stay in the file layout for the lookup).
uint64_t repack_extra_bytes(const gguf::File& f, const Config& c, bool repack);
// Bytes of the MTP head's draft-vocabulary rows (tern.draft_vocab), repacked or not; 0 without one.
uint64_t draft_vocab_bytes(const gguf::File& f, const Config& c, bool repack);

// One model: its backend, the mapped file, its config and weights.
struct Model {
  std::unique_ptr<backend::Backend> backend;  // where the weights, scratch and states live and the forward runs
  std::unique_ptr<gguf::File> file;
  Config config;
  Weights weights;
  RepackScope repack_scope = RepackScope::kNone;
  // Across ranks (distribute): `comm` of this job and this rank's vocabulary rows of the LM head [vocab.begin(rank),
  // vocab.begin(rank + 1)); the mixers', experts' and FFN's shares are in the splits below and the layers' weights.
  Comm* comm = nullptr;
  Split vocab;
  TensorSplit attn_split, dn_split;  // heads split across ranks (comm null: each rank runs the block whole)
  std::vector<std::shared_ptr<backend::Buffer>> split_copies;  // rows gathered by distribute (freed once repacked)
  MoeSplit moe_split;                // routed and shared experts split by rows (comm null: whole experts)
  TensorSplit ffn_split;             // a dense FFN split by rows (comm null: whole)
  int64_t moe_ff_local = 0, moe_embd_local = 0;  // by rows: this rank's rows of each expert's gate/up, of its down
  bool distributed() const { return comm && comm->size() > 1; }
  // With whole experts per rank (expert parallel): whether this rank runs layer il's shared expert, one rank per
  // layer in turn.
  bool owns_ffn(int il) const { return !distributed() || il % comm->size() == comm->rank(); }
  std::vector<std::unique_ptr<backend::Buffer>> repacked;  // owns the repacked matrices the weights point into
  // `be`: the backend to run on (null: the CPU backend).
  static std::unique_ptr<Model> load(const std::string& path, std::unique_ptr<backend::Backend> be = nullptr);
  static std::unique_ptr<Model> load(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be = nullptr);

  // Repacks the matrices in `scope` into backend memory, points the weights at them and gives back the file
  // pages they came from. Once per model.
  RepackReport repack(RepackScope scope);
  // Split across comm's ranks (models/model.h Model::distribute): the mixers' heads (split_heads); routed and
  // shared experts by rows (or, opt.whole_experts, routed experts in equal contiguous ranges and the shared expert
  // on rank il % N); a dense FFN by rows; the LM head (and the MTP block's own head) by vocabulary rows in
  // multiples of 8. Before repack (the slices are what gets repacked; the rest of the file is never touched).
  void distribute(Comm& comm, const SplitOptions& opt = {});
  // The head-parallel part of distribute: attention KV heads (with their query heads) and DeltaNet key heads (with
  // their value heads) split when each rank gets at least one; the out projections by rows (blocks/tensor_split.h).
  // config's head counts become this rank's, so the blocks, the state shape and the buffers follow.
  // partial: the out projections by columns where they split on block boundaries (SplitOptions::partial_sums).
  void split_heads(Comm& comm, bool partial = false);
  // Routed and shared experts by rows: each rank keeps rows [f0, f1) of every expert's gate and up and rows [d0, d1) of
  // every down (blocks/moe.h MoeSplit), gathered into stacked matrices of their own.
  // in_file: the routed experts' rows stay in the file's matrices (MoeWeights ff0 / d0 and strides), not copied.
  // partial: each down by columns (this rank's rows of the SwiGLU), where the widths split on its blocks: returns
  // whether it did.
  bool split_expert_rows(Comm& comm, bool in_file = false, bool partial = false);
  // Whether routed experts stay on 8-row groups when sliced per expert (n_ff_exp and n_embd multiples of 8).
  bool expert_rows_grouped() const;
  // The routed experts, for an ExpertStore (models/expert_store.h).
  ExpertLayout expert_layout() const;
};

}  // namespace tern::models::qwen35moe
