// GGUF metadata for a converted checkpoint, in llama.cpp's key order: general.*, <arch>.* hyperparameters
// (TextModel, then Qwen2MoeModel / _QwenMtpMixin / Qwen3NextModel / _Qwen35MRopeMixin or DeepseekV2Model /
// GlmMoeDsaModel set_gguf_parameters), then tokenizer.* (TextModel._set_vocab_gpt2 or _set_vocab_glm + gguf-py
// SpecialVocab). Provenance keys differ on purpose:
// general.name is the checkpoint directory's base name (llama.cpp derives a prettified name from the directory
// and README heuristics) and no general.basename/license/tags/... are written. See docs/CONVERT.md.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "convert/contract.h"
#include "convert/quant_mix.h"
#include "formats/gguf_writer.h"

namespace tern::convert {

using KeyValues = std::vector<std::pair<std::string, gguf::Node>>;

struct VocabOptions {
  std::string pre;  // tokenizer.ggml.pre override; empty = detect from the pre-tokenizer regex
};

// general.size_label as gguf-py computes it ("16x489K"): expert count x (shared + per-expert parameters).
std::string size_label(const Plan& plan);

KeyValues build_metadata(const Checkpoint& ck, const Plan& plan, FileType ft, const std::string& name,
                         const VocabOptions& vo);

// tokenizer.* keys only (exposed for tests).
KeyValues build_vocab(const Checkpoint& ck, const VocabOptions& vo);

}  // namespace tern::convert
