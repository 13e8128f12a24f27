// The tensor contracts (spec qwen35moe.md section 3, glm_moe_dsa.md section 2): every checkpoint tensor name is
// classified before any data is read — converted (with its GGUF name, expected HF shape and transform),
// skipped on purpose (MTP with --no-mtp, vision tower), or unknown (an error listing the names). The tables
// (contract.cpp: Qwen3.5 / Qwen3-Next, contract_glm.cpp: GLM-5) are the single place that knows HF names;
// tests pin them to the real Qwen3.5-35B-A3B index and to the GLM-5 toy checkpoints.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "convert/hf_config.h"

namespace tern::convert {

enum class TensorClass { kConvert, kSkipMtp, kSkipVisual, kUnknown };

// Value transforms, applied elementwise in float (llama.cpp Qwen3NextModel.modify_tensors).
enum class Xform : uint8_t {
  kNone,
  kNormPlusOne,  // zero-centred RMSNorm weight: stored as 1 + w (not linear_attn.norm)
  kNegExp,       // A_log -> -exp(A_log)
};

// Value-head reorder grouped -> tiled (llama.cpp _LinearAttentionVReorderBase, spec 8.4), by what it permutes.
enum class Reorder : uint8_t {
  kNone,
  kQkvRows,   // in_proj_qkv: only the V rows (after 2 * key_dim q/k rows), head dim dv
  kRows,      // in_proj_z rows, head dim dv
  kRowsHead1, // in_proj_a / in_proj_b rows, head dim 1
  kVec,       // dt_bias, A_log (1-D), head dim 1
  kConvRows,  // conv1d after squeeze: V-channel rows, head dim dv
  kCols,      // out_proj columns, head dim dv
};

// Which tensors a rule applies to: outside the blocks (kGlobal), in any block (kAny), only in linear-attention
// (kLinear) or full-attention (kFull) layers, or the MTP head's own tensors (kMtpHead). GLM-5: the leading dense-FFN
// layers (kDense), the MoE layers (kMoe), layers that run their own DSA indexer (kIndexer: "full" ones and the NextN
// block) and the NextN block's own tensors (kNextn). Not a layer kind: those are gguf::LayerKind
// (formats/hybrid_layers.h).
enum class TensorScope : uint8_t { kGlobal, kAny, kLinear, kFull, kMtpHead, kDense, kMoe, kIndexer, kNextn };

// How the source tensors of one GGUF tensor are combined.
// kSplitQkv / kSplitZ: Qwen3-Next's in_proj_qkvz, rows per key head [q dk | k dk | v R*dv | z R*dv], into
// attn_qkv [all q | all k | all v] and attn_gate [all z] (llama.cpp Qwen3NextModel.modify_tensors).
// kSplitKb / kSplitVb: GLM-5's kv_b_proj [n_head * (nope + v), kv_lora] viewed [n_head, nope + v, kv_lora] into
// attn_k_b = rows [0, nope) transposed per head [n_head, kv_lora, nope] and attn_v_b = rows [nope, nope + v)
// [n_head, v, kv_lora] (llama.cpp DeepseekV2Model.modify_tensors, absorbed MLA).
enum class Combine : uint8_t { kSingle, kSplitGate, kSplitUp, kStackExperts, kSplitQkv, kSplitZ, kSplitKb, kSplitVb };

struct Rule {
  const char* hf;    // pattern after the prefix: "layers.{L}.mlp.experts.{E}.down_proj.weight"
  const char* gguf;  // "blk.{L}.ffn_down_exps.weight"
  TensorScope scope;
  Xform xform;
  Reorder reorder;
  int shape_id;      // expected HF shape, see expected_shape() (ids are per family table)
};

const std::vector<Rule>& qwen35moe_rules();
const std::vector<Rule>& glm_dsa_rules();

struct Classified {
  TensorClass cls = TensorClass::kUnknown;
  const Rule* rule = nullptr;
  int64_t layer = -1;   // block index in the GGUF (MTP layers: n_layer + j)
  int64_t expert = -1;  // per-expert keys
  std::string gguf;     // GGUF name (gate_up: the gate name; its up twin is derived)
  std::string why;      // for kUnknown / layer-kind mismatches
};

// Classifies one checkpoint name for a model of geometry hp (the family's table by hp.arch). keep_mtp only changes
// kSkipMtp to kConvert.
Classified classify(const std::string& name, const HParams& hp, bool keep_mtp);
Classified classify_glm(const std::string& name, const HParams& hp, bool keep_mtp);

// Expected HF (PyTorch-order) shape of a rule's tensor.
std::vector<int64_t> expected_shape(const Rule& r, const HParams& hp);
std::vector<int64_t> expected_shape_glm(const Rule& r, const HParams& hp);

// One GGUF tensor to produce.
struct OutTensor {
  std::string name;                   // GGUF name
  std::vector<int64_t> shape;         // PyTorch order after transforms (GGUF ne is the reverse)
  std::vector<const SourceTensor*> srcs;  // 1, or n_expert for stacked per-expert keys
  Combine combine = Combine::kSingle;
  Xform xform = Xform::kNone;
  Reorder reorder = Reorder::kNone;
  int64_t layer = -1;
  std::vector<int64_t> ne() const { return {shape.rbegin(), shape.rend()}; }
  int64_t n_elements() const;
};

struct Plan {
  std::vector<OutTensor> tensors;   // in llama.cpp's output order
  size_t n_sources_converted = 0, n_skipped_mtp = 0, n_skipped_visual = 0;
  size_t n_mtp_sources = 0;         // of n_sources_converted, those of the MTP / NextN block(s)
  int64_t n_mtp_layers = 0;         // exported MTP blocks (0 with --no-mtp)
  bool keep_mtp = true;             // false with --no-mtp (no nextn keys are written)
  int64_t block_count = 0;          // n_layer + n_mtp_layers
};

// Classifies every tensor (throws listing all unknown names), checks dtypes, shapes and completeness, and
// lays out the outputs. Reads no tensor data.
Plan make_plan(const Checkpoint& ck, bool keep_mtp);
Plan make_plan_glm(const Checkpoint& ck, bool keep_mtp);

namespace detail {
// The shared first half of make_plan: classify every source (throwing with all unknown names), check dtypes and
// shapes, count the classes; returns the sources to convert in checkpoint order.
std::vector<std::pair<const SourceTensor*, Classified>> classify_all(const Checkpoint& ck, bool keep_mtp, Plan& plan);
}  // namespace detail

}  // namespace tern::convert
