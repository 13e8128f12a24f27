// ggml tensor types: ids, names and block geometry exactly as ggml numbers them (ggml.h enum ggml_type).
// Every type a GGUF may carry has traits here, so any file can be size-checked and described; only the
// types with `compute = true` have kernels in tern.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tern::quant {

enum class Type : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct TypeTraits {
  Type type;
  const char* name;      // ggml's name: "q4_K", "f16", ...
  int64_t block_size;    // elements per block
  size_t type_size;      // bytes per block
  bool compute;          // tern has dequantize + dot kernels for it as a weight type
};

// Traits of a known type id, or nullopt for an id ggml does not define (or has removed).
std::optional<TypeTraits> type_traits(uint32_t id);
const TypeTraits& traits(Type t);  // t must be a defined type
const char* type_name(Type t);
std::optional<Type> type_from_name(const std::string& name);  // case-insensitive ("q4_k", "Q4_K")
std::vector<TypeTraits> all_types();

// Bytes of a row of n elements; n must be a multiple of the block size (callers validate first).
inline size_t row_size(const TypeTraits& t, int64_t n) { return static_cast<size_t>(n / t.block_size) * t.type_size; }

}  // namespace tern::quant
