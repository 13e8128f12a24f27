// Test helper: a GGUF tern wrote equals the one llama.cpp wrote — the same metadata keys in the same order with
// the same types and values (general.name aside: a provenance key, docs/CONVERT.md), the same tensors in the same
// order with the same types, shapes and bytes. Shared by the Qwen (test_equivalence.cpp) and GLM-5
// (test_glm_convert.cpp) conversion tests.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "formats/gguf.h"

namespace tern::test {

// Deep equality of two metadata values (type and content).
inline void expect_same_value(const gguf::Value& a, const gguf::Value& b) {
  ASSERT_EQ(a.type(), b.type()) << a.key();
  if (a.is_array()) {
    ASSERT_EQ(a.array_type(), b.array_type()) << a.key();
    ASSERT_EQ(a.array_size(), b.array_size()) << a.key();
    for (uint64_t i = 0; i < a.array_size(); ++i) {
      if (a.array_type() == gguf::ValueType::String) ASSERT_EQ(a.array_str(i), b.array_str(i)) << a.key() << "[" << i << "]";
      else if (a.array_type() == gguf::ValueType::F32 || a.array_type() == gguf::ValueType::F64)
        ASSERT_EQ(a.array_f64(i), b.array_f64(i)) << a.key() << "[" << i << "]";
      else ASSERT_EQ(a.array_i64(i), b.array_i64(i)) << a.key() << "[" << i << "]";
    }
  } else if (a.type() == gguf::ValueType::String) {
    EXPECT_EQ(a.as_str(), b.as_str()) << a.key();
  } else if (a.is_float()) {
    EXPECT_EQ(a.to_f64(), b.to_f64()) << a.key();  // exact: both are the f32 of the same config value
  } else {
    EXPECT_EQ(a.to_i64(), b.to_i64()) << a.key();
  }
}

inline void expect_equivalent(const std::string& ours_path, const std::string& ref_path) {
  const gguf::File ours = gguf::File::open(ours_path), ref = gguf::File::open(ref_path);
  ASSERT_EQ(ours.metadata().size(), ref.metadata().size());
  for (size_t i = 0; i < ref.metadata().size(); ++i) {
    const gguf::Value& a = ours.metadata()[i];
    const gguf::Value& b = ref.metadata()[i];
    ASSERT_EQ(a.key(), b.key()) << "key #" << i;
    if (a.key() == "general.name") continue;  // provenance: llama.cpp prettifies the directory name
    expect_same_value(a, b);
  }
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const gguf::TensorInfo& a = ours.tensors()[i];
    const gguf::TensorInfo& b = ref.tensors()[i];
    ASSERT_EQ(a.name, b.name) << "tensor #" << i;
    ASSERT_EQ(a.type, b.type) << a.name;
    ASSERT_EQ(a.shape_str(), b.shape_str()) << a.name;
    ASSERT_EQ(a.n_bytes, b.n_bytes) << a.name;
    // Bit-exact: F32/F16/BF16 are conversions of the same floats and Q8_0 is ggml's reference quantizer. The one
    // exception is ssm_a = -exp(A_log): llama.cpp computes it with torch's vectorised exp, which is not correctly
    // rounded (SLEEF, up to 1 ulp), tern with the correctly rounded expf, so an element may differ by 1 ulp.
    if (std::string_view(a.name).ends_with("ssm_a") && a.type == quant::Type::F32) {
      for (int64_t i = 0; i < static_cast<int64_t>(a.n_bytes / 4); ++i) {
        int32_t ia, ib;
        std::memcpy(&ia, a.data + 4 * i, 4);
        std::memcpy(&ib, b.data + 4 * i, 4);
        EXPECT_LE(std::abs(ia - ib), 1) << a.name << "[" << i << "]: more than 1 ulp apart";
      }
      continue;
    }
    EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0) << a.name << " (" << quant::type_name(a.type) << ")";
  }
}

}  // namespace tern::test
