// Dispatch of tensor-type conversions to the scalar references in quant/ref/, with input validation.
#include "quant/convert.h"

#include <string>

#include "core/error.h"
#include "quant/ref/ref.h"

namespace tern::quant {
namespace {

using DequantFn = void (*)(const void*, float*, int64_t);
using QuantFn = void (*)(const float*, void*, int64_t);

struct Converter {
  Type type;
  DequantFn dequantize;
  QuantFn quantize;
};

// Adapts a typed reference function to the untyped table signature.
template <typename Block, void (*F)(const Block*, float*, int64_t)>
void dq(const void* x, float* y, int64_t n) {
  F(static_cast<const Block*>(x), y, n);
}
template <typename Block, void (*F)(const float*, Block*, int64_t)>
void qz(const float* x, void* y, int64_t n) {
  F(x, static_cast<Block*>(y), n);
}

#define TERN_CONVERTER(T, Block, name) \
  Converter { Type::T, dq<Block, ref::dequantize_##name>, qz<Block, ref::quantize_##name> }

const Converter kConverters[] = {
    TERN_CONVERTER(F32, float, f32),
    TERN_CONVERTER(F16, uint16_t, f16),
    TERN_CONVERTER(BF16, uint16_t, bf16),
    TERN_CONVERTER(Q4_0, BlockQ4_0, q4_0),
    TERN_CONVERTER(Q4_1, BlockQ4_1, q4_1),
    TERN_CONVERTER(Q5_0, BlockQ5_0, q5_0),
    TERN_CONVERTER(Q5_1, BlockQ5_1, q5_1),
    TERN_CONVERTER(Q8_0, BlockQ8_0, q8_0),
    TERN_CONVERTER(Q8_1, BlockQ8_1, q8_1),
    TERN_CONVERTER(Q2_K, BlockQ2_K, q2_k),
    TERN_CONVERTER(Q3_K, BlockQ3_K, q3_k),
    TERN_CONVERTER(Q4_K, BlockQ4_K, q4_k),
    TERN_CONVERTER(Q5_K, BlockQ5_K, q5_k),
    TERN_CONVERTER(Q6_K, BlockQ6_K, q6_k),
    TERN_CONVERTER(Q8_K, BlockQ8_K, q8_k),
    TERN_CONVERTER(IQ4_NL, BlockIQ4_NL, iq4_nl),
    TERN_CONVERTER(IQ4_XS, BlockIQ4_XS, iq4_xs),
};
#undef TERN_CONVERTER

const Converter* find(Type t) {
  for (const auto& c : kConverters)
    if (c.type == t) return &c;
  return nullptr;
}

std::string supported_list() {
  std::string s;
  for (const auto& c : kConverters) s += std::string(s.empty() ? "" : ", ") + type_name(c.type);
  return s;
}

const Converter& checked(const char* what, Type t, int64_t n) {
  const auto tt = type_traits(static_cast<uint32_t>(t));
  if (!tt) fail("%s: unknown ggml type id %u", what, static_cast<unsigned>(t));
  const Converter* c = find(t);
  if (!c) fail("%s: type %s is not supported (supported: %s)", what, tt->name, supported_list().c_str());
  if (n < 0 || n % tt->block_size != 0)
    fail("%s: type %s: element count %lld is not a non-negative multiple of the block size %lld", what,
         tt->name, static_cast<long long>(n), static_cast<long long>(tt->block_size));
  return *c;
}

}  // namespace

bool can_dequantize(Type t) { return find(t) != nullptr; }
bool can_quantize(Type t) { return find(t) != nullptr; }

void dequantize_row(Type t, const void* src, float* dst, int64_t n) {
  checked("dequantize_row", t, n).dequantize(src, dst, n);
}

void quantize_row_ref(Type t, const float* src, void* dst, int64_t n) {
  checked("quantize_row_ref", t, n).quantize(src, dst, n);
}

}  // namespace tern::quant
