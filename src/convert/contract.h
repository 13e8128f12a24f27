// The Qwen3.5-MoE tensor contract (docs/../spec qwen35moe.md section 3): every checkpoint tensor name is
// classified before any data is read — converted (with its GGUF name, expected HF shape and transform),
// skipped on purpose (MTP unless kept, vision tower), or unknown (an error listing the names). The table is the
// single place that knows HF names; tests pin it to the real Qwen3.5-35B-A3B index.
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
// (kLinear) or full-attention (kFull) layers, or the MTP head's own tensors (kMtpHead). Not a layer kind: those
// are gguf::LayerKind (formats/hybrid_layers.h).
enum class TensorScope : uint8_t { kGlobal, kAny, kLinear, kFull, kMtpHead };

// How the source tensors of one GGUF tensor are combined.
// kSplitQkv / kSplitZ: Qwen3-Next's in_proj_qkvz, rows per key head [q dk | k dk | v R*dv | z R*dv], into
// attn_qkv [all q | all k | all v] and attn_gate [all z] (llama.cpp Qwen3NextModel.modify_tensors).
enum class Combine : uint8_t { kSingle, kSplitGate, kSplitUp, kStackExperts, kSplitQkv, kSplitZ };

struct Rule {
  const char* hf;    // pattern after the prefix: "layers.{L}.mlp.experts.{E}.down_proj.weight"
  const char* gguf;  // "blk.{L}.ffn_down_exps.weight"
  TensorScope scope;
  Xform xform;
  Reorder reorder;
  int shape_id;      // expected HF shape, see expected_shape()
};

const std::vector<Rule>& qwen35moe_rules();

struct Classified {
  TensorClass cls = TensorClass::kUnknown;
  const Rule* rule = nullptr;
  int64_t layer = -1;   // block index in the GGUF (MTP layers: n_layer + j)
  int64_t expert = -1;  // per-expert keys
  std::string gguf;     // GGUF name (gate_up: the gate name; its up twin is derived)
  std::string why;      // for kUnknown / layer-kind mismatches
};

// Classifies one checkpoint name for a model of geometry hp. keep_mtp only changes kSkipMtp to kConvert.
Classified classify(const std::string& name, const HParams& hp, bool keep_mtp);

// Expected HF (PyTorch-order) shape of a rule's tensor.
std::vector<int64_t> expected_shape(const Rule& r, const HParams& hp);

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
  int64_t n_mtp_layers = 0;         // exported MTP blocks (0 unless keep_mtp and present)
  int64_t block_count = 0;          // n_layer + n_mtp_layers
};

// Classifies every tensor (throws listing all unknown names), checks dtypes, shapes and completeness, and
// lays out the outputs. Reads no tensor data.
Plan make_plan(const Checkpoint& ck, bool keep_mtp);

}  // namespace tern::convert
