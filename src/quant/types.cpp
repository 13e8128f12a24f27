#include "quant/types.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace tern::quant {

static const TypeTraits kTraits[] = {
    {Type::F32, "f32", 1, 4, true},
    {Type::F16, "f16", 1, 2, true},
    {Type::Q4_0, "q4_0", 32, 18, true},
    {Type::Q4_1, "q4_1", 32, 20, true},
    {Type::Q5_0, "q5_0", 32, 22, true},
    {Type::Q5_1, "q5_1", 32, 24, true},
    {Type::Q8_0, "q8_0", 32, 34, true},
    {Type::Q8_1, "q8_1", 32, 36, false},
    {Type::Q2_K, "q2_K", 256, 84, true},
    {Type::Q3_K, "q3_K", 256, 110, true},
    {Type::Q4_K, "q4_K", 256, 144, true},
    {Type::Q5_K, "q5_K", 256, 176, true},
    {Type::Q6_K, "q6_K", 256, 210, true},
    {Type::Q8_K, "q8_K", 256, 292, false},
    {Type::IQ2_XXS, "iq2_xxs", 256, 66, false},
    {Type::IQ2_XS, "iq2_xs", 256, 74, false},
    {Type::IQ3_XXS, "iq3_xxs", 256, 98, false},
    {Type::IQ1_S, "iq1_s", 256, 50, false},
    {Type::IQ4_NL, "iq4_nl", 32, 18, true},
    {Type::IQ3_S, "iq3_s", 256, 110, false},
    {Type::IQ2_S, "iq2_s", 256, 82, false},
    {Type::IQ4_XS, "iq4_xs", 256, 136, true},
    {Type::I8, "i8", 1, 1, false},
    {Type::I16, "i16", 1, 2, false},
    {Type::I32, "i32", 1, 4, false},
    {Type::I64, "i64", 1, 8, false},
    {Type::F64, "f64", 1, 8, false},
    {Type::IQ1_M, "iq1_m", 256, 56, false},
    {Type::BF16, "bf16", 1, 2, true},
    {Type::TQ1_0, "tq1_0", 256, 54, false},
    {Type::TQ2_0, "tq2_0", 256, 66, false},
    {Type::MXFP4, "mxfp4", 32, 17, false},
};

std::optional<TypeTraits> type_traits(uint32_t id) {
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const TypeTraits& traits(Type t) {
  for (const auto& tt : kTraits)
    if (tt.type == t) return tt;
  fail("internal: undefined ggml type id %u", static_cast<unsigned>(t));
}

const char* type_name(Type t) { return traits(t).name; }

std::optional<Type> type_from_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& t : kTraits) {
    std::string n = t.name;
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
    if (n == lower) return t.type;
  }
  return std::nullopt;
}

std::vector<TypeTraits> all_types() { return {std::begin(kTraits), std::end(kTraits)}; }

}  // namespace tern::quant
