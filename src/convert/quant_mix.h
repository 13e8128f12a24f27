// Output tensor types per file type. f32/f16/bf16/q8_0 follow llama.cpp's converter (conversion/base.py
// prepare_tensors: norms, 1-D, routers, conv and non-".weight" tensors stay F32; Q8_0 falls back to F16 when a
// row is not a multiple of 32). The other types follow llama-quantize applied to the converter's F32 output
// (src/llama-quant.cpp: tensor_allows_quantization, llama_tensor_get_type_impl for the *_M mixes, and
// tensor_type_fallback for rows that are not a multiple of the block size). Our code, their rules.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "convert/contract.h"
#include "quant/types.h"

namespace tern::convert {

enum class FileType { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K_M, Q5_K_M, Q6_K };

std::optional<FileType> file_type_from_name(const std::string& s);  // "q4_k_m", case-insensitive
const char* file_type_name(FileType t);
std::string file_type_list();         // "f32, f16, ..." for errors and --help
uint32_t llama_ftype_id(FileType t);  // general.file_type (llama.h enum llama_ftype)
bool via_llama_quantize(FileType t);  // a llama-quantize mix of the converter's F32 output (not f32/f16/bf16/q8_0)

// Assigns a type to every planned tensor, in plan order (the K-quant mixes count attn_v / ffn_down tensors in
// file order, as llama-quantize does). expert_type overrides routed-expert tensors (then the shape fallback
// applies, as with llama-quantize --tensor-type).
std::vector<quant::Type> choose_types(const Plan& plan, const HParams& hp, FileType ft,
                                      std::optional<quant::Type> expert_type);

}  // namespace tern::convert
