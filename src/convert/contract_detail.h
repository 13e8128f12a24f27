// Helpers shared by the per-family tensor tables (contract.cpp: Qwen3.5 / Qwen3-Next, contract_glm.cpp: GLM-5):
// name-pattern matching, error labels, per-expert key gathering. Internal to src/convert/.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "convert/contract.h"

namespace tern::convert::detail {

// Matches `name` against a pattern with {L} / {E} placeholders (decimal, no leading zeros, at most 9 digits).
bool match(const char* pat, const std::string& name, int64_t& L, int64_t& E);

// The pattern with {L} / {N} replaced by L.
std::string fill(const char* pat, int64_t L);

inline bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

std::string shape_str(const std::vector<int64_t>& s);

// "model-00001.safetensors: tensor 'NAME'" for errors.
std::string src_label(const Checkpoint& ck, const SourceTensor& s);

// Per-expert keys of one layer, gathered until all n_expert * 3 are present (llama.cpp Qwen2MoeModel /
// DeepseekV2Model.modify_tensors), then emitted as ffn_{down,gate,up}_exps in that order.
struct ExpertGroup {
  std::map<std::string, std::vector<const SourceTensor*>> by_proj;  // GGUF name -> [n_expert]
  size_t count = 0;
};

// Adds one per-expert source (its GGUF stacked name in t.name) to groups; when the layer is complete, returns the
// three stacked tensors (down, gate, up) and forgets the layer, else returns nothing.
std::vector<OutTensor> gather_expert(std::map<int64_t, ExpertGroup>& groups, const Checkpoint& ck, const HParams& hp,
                                     const OutTensor& t, int64_t expert, const SourceTensor* s);

// Fails naming every layer whose per-expert keys are incomplete.
void check_experts_complete(const std::map<int64_t, ExpertGroup>& groups, const Checkpoint& ck, const HParams& hp);

// Fails listing (up to 20 of) the GGUF names that have no source.
void fail_missing(const Checkpoint& ck, const std::vector<std::string>& missing);

}  // namespace tern::convert::detail
