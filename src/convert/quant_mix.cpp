// Type rules (see quant_mix.h for provenance). Only the branches reachable for qwen35moe and the file types we
// offer are implemented; everything else in llama.cpp's tables concerns other architectures or IQ types. For
// glm-dsa only the converter's types are offered (convert.cpp refuses the llama-quantize ones).
#include "convert/quant_mix.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace tern::convert {

namespace {

using quant::Type;

struct FtRow {
  FileType ft;
  const char* name;
  uint32_t llama_id;
  Type base;
};
constexpr FtRow kFt[] = {
    {FileType::F32, "f32", 0, Type::F32},        {FileType::F16, "f16", 1, Type::F16},
    {FileType::BF16, "bf16", 32, Type::BF16},    {FileType::Q8_0, "q8_0", 7, Type::Q8_0},
    {FileType::Q4_0, "q4_0", 2, Type::Q4_0},     {FileType::Q4_1, "q4_1", 3, Type::Q4_1},
    {FileType::Q5_0, "q5_0", 8, Type::Q5_0},     {FileType::Q5_1, "q5_1", 9, Type::Q5_1},
    {FileType::Q4_K_M, "q4_k_m", 15, Type::Q4_K}, {FileType::Q5_K_M, "q5_k_m", 17, Type::Q5_K},
    {FileType::Q6_K, "q6_k", 18, Type::Q6_K},
};

const FtRow& row(FileType t) {
  for (const FtRow& r : kFt)
    if (r.ft == t) return r;
  return kFt[0];
}

bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::char_traits<char>::length(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}
bool has(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

// ggml_n_dims: trailing 1s do not count ({2048, 1} is 1-D).
int n_dims(const std::vector<int64_t>& ne) {
  int n = static_cast<int>(ne.size());
  while (n > 1 && ne[static_cast<size_t>(n) - 1] == 1) --n;
  return n;
}

// llama.cpp converter (prepare_tensors) for f32/f16/bf16/q8_0. `shape` is PyTorch order.
Type converter_type(const OutTensor& t, FileType ft) {
  const std::string& n = t.name;
  if (t.shape.size() <= 1 || ends_with(n, "_norm.weight")) return Type::F32;
  // glm-dsa's indexer.proj (INDEXER_PROJ: "DSA indexer weights should be F32") too.
  if (has(n, "ffn_gate_inp.weight") || has(n, "ffn_gate_inp_shexp.weight") || has(n, "ssm_conv1d.weight") ||
      has(n, ".indexer.proj.weight") || !ends_with(n, ".weight"))
    return Type::F32;
  const Type base = row(ft).base;
  if (base == Type::Q8_0 && t.shape.back() % 32 != 0) return Type::F16;  // gguf-py QuantError -> F16
  return base;
}

// llama-quant.cpp tensor_allows_quantization for these names.
bool allows_quantization(const OutTensor& t) {
  const std::string& n = t.name;
  if (n_dims(t.ne()) < 2) return false;
  return ends_with(n, "weight") && !has(n, "_norm.weight") && !has(n, "ffn_gate_inp.weight") && !has(n, "ssm_conv1d");
}

enum class Cat { kOutput, kTokenEmbd, kAttnQkv, kAttnV, kAttnK, kAttnQ, kAttnOutput, kFfnUp, kFfnGate, kFfnDown, kOther };

Cat category(const std::string& n) {
  if (n == "output.weight") return Cat::kOutput;
  if (n == "token_embd.weight") return Cat::kTokenEmbd;
  if (has(n, "attn_qkv.weight")) return Cat::kAttnQkv;
  if (has(n, "attn_v.weight")) return Cat::kAttnV;
  if (has(n, "attn_k.weight")) return Cat::kAttnK;
  if (has(n, "attn_q.weight")) return Cat::kAttnQ;
  if (has(n, "attn_output.weight")) return Cat::kAttnOutput;
  if (has(n, "ffn_up")) return Cat::kFfnUp;
  if (has(n, "ffn_gate")) return Cat::kFfnGate;
  if (has(n, "ffn_down")) return Cat::kFfnDown;
  return Cat::kOther;
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

struct MixState {
  int64_t n_attention_wv = 0, i_attention_wv = 0;
  int64_t n_layer_all = 0;
  int64_t n_expert = 0;
  bool tied = true;
};

// llama_tensor_get_type_impl, the branches reachable for our file types.
Type mix_type(MixState& qs, const OutTensor& t, FileType ft, Type new_type) {
  const Cat cat = category(t.name);
  const bool km = ft == FileType::Q4_K_M || ft == FileType::Q5_K_M;
  if (cat == Cat::kOutput || (qs.tied && cat == Cat::kTokenEmbd)) {
    const int64_t nx = t.ne()[0];
    if (nx % quant::traits(new_type).block_size != 0) new_type = Type::Q8_0;
    else if (new_type != Type::Q8_0) new_type = Type::Q6_K;
  } else if (cat == Cat::kTokenEmbd) {
    // no rule for these file types
  } else if (cat == Cat::kAttnV || cat == Cat::kAttnQkv) {  // category_is_attn_v (the QKV branch is unreachable)
    if (km && use_more_bits(qs.i_attention_wv, qs.n_attention_wv)) new_type = Type::Q6_K;
    if (qs.n_expert == 8) new_type = Type::Q8_0;
    ++qs.i_attention_wv;
  } else if (cat == Cat::kAttnK) {
    if (qs.n_expert == 8) new_type = Type::Q8_0;
  } else if (cat == Cat::kFfnDown) {
    const int64_t il = t.layer;  // n_expert > 1: the layer comes from the name (blk.N.)
    if (km && use_more_bits(il, qs.n_layer_all)) new_type = Type::Q6_K;
  } else if (cat == Cat::kAttnOutput) {
    if (qs.n_expert == 8 && ft == FileType::Q4_K_M) new_type = Type::Q5_K;
  }
  return new_type;
}

// tensor_type_fallback: rows that are not a multiple of the block size.
Type fallback(const OutTensor& t, Type ty) {
  const int64_t ncols = t.ne()[0];
  if (ncols % quant::traits(ty).block_size == 0) return ty;
  switch (ty) {
    case Type::Q4_K: ty = Type::Q5_0; break;
    case Type::Q5_K: ty = Type::Q5_1; break;
    case Type::Q6_K: ty = Type::Q8_0; break;
    case Type::Q2_K:
    case Type::Q3_K: ty = Type::Q4_0; break;
    default: break;  // 32-block types have nothing smaller
  }
  if (ncols % quant::traits(ty).block_size != 0) ty = Type::F16;
  return ty;
}

}  // namespace

std::optional<FileType> file_type_from_name(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const FtRow& r : kFt)
    if (l == r.name) return r.ft;
  return std::nullopt;
}
const char* file_type_name(FileType t) { return row(t).name; }
std::string file_type_list() {
  std::string s;
  for (const FtRow& r : kFt) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}
uint32_t llama_ftype_id(FileType t) { return row(t).llama_id; }

bool via_llama_quantize(FileType t) {
  return !(t == FileType::F32 || t == FileType::F16 || t == FileType::BF16 || t == FileType::Q8_0);
}

std::vector<Type> choose_types(const Plan& plan, const HParams& hp, FileType ft, std::optional<Type> expert_type) {
  std::vector<Type> out;
  const bool via_quantize = via_llama_quantize(ft);
  MixState qs;
  qs.n_layer_all = plan.block_count;
  qs.n_expert = hp.n_expert;
  for (const OutTensor& t : plan.tensors) {
    const Cat c = category(t.name);
    if (c == Cat::kAttnV || c == Cat::kAttnQkv) ++qs.n_attention_wv;
    if (c == Cat::kOutput) qs.tied = false;
  }
  for (const OutTensor& t : plan.tensors) {
    const bool expert = t.name.find("_exps.") != std::string::npos;
    if (!via_quantize) {
      Type ty = converter_type(t, ft);
      // --expert-type on a converter type: the expert tensors are requantized from the converter's values,
      // i.e. the same rules as llama-quantize --tensor-type (then the row-size fallback).
      if (expert && expert_type) ty = fallback(t, *expert_type);
      out.push_back(ty);
      continue;
    }
    // llama-quantize reads the converter's F32 output: tensors it does not quantize keep that type.
    if (!allows_quantization(t)) {
      out.push_back(converter_type(t, FileType::F32));
      continue;
    }
    Type ty = row(ft).base;
    if (expert && expert_type) ty = *expert_type;
    else ty = mix_type(qs, t, ft, ty);
    out.push_back(fallback(t, ty));
  }
  return out;
}

}  // namespace tern::convert
