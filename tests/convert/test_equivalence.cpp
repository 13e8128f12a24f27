// tern convert vs llama.cpp's convert_hf_to_gguf.py on the same committed checkpoints
// (tools/make_convert_fixtures.py; q35-ratio, odd, the 2.4T shape cut to 8 layers, dense Qwen3.5 dense-tiny and
// Qwen3-Next next-tiny): same metadata keys in
// the same order with the same values (general.name aside: a provenance key, docs/CONVERT.md), same tensors in
// the same order with the same types and shapes, byte-identical tensor data, and tern's forward gives identical
// logits on both files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string_view>
#include <filesystem>
#include <string>

#include "convert/convert.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "models/qwen35moe/forward.h"
#include "models/qwen35moe/state.h"

namespace {

namespace fs = std::filesystem;
using namespace tern;

std::string fixtures() { return TERN_FIXTURES_DIR; }

fs::path tmp_dir() {
  fs::path d = fs::temp_directory_path() / ("tern_convert_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string convert_to(const std::string& preset, const std::string& type) {
  convert::Options o;
  o.input_dir = fixtures() + "/hf/" + preset;
  o.output = (tmp_dir() / (preset + "." + type + ".gguf")).string();
  o.type = *convert::file_type_from_name(type);
  // The multimodal-layout fixtures carry stand-in mtp.* tensors (wrong shapes) that llama.cpp converted with
  // --no-mtp; the text-only ones have no MTP block.
  o.no_mtp = preset == "odd" || preset == "q24t-shape-first8";
  convert::run(o);
  return o.output;
}

// Deep equality of two metadata values (type and content).
void expect_same_value(const gguf::Value& a, const gguf::Value& b) {
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

void expect_equivalent(const std::string& ours_path, const std::string& ref_path) {
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

std::vector<float> logits(const std::string& path, const std::vector<int32_t>& toks) {
  auto m = models::qwen35moe::Model::load(path);
  models::SequenceState st(*m->backend, models::qwen35moe::state_shape(m->config), 64, ops::KvType::kF32);
  models::qwen35moe::Forward fw(*m);
  std::vector<models::SeqInput> b(1);
  b[0] = {&st, toks, true};
  return fw.run(b);
}

struct Case {
  const char* preset;
  const char* type;
};

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, MatchesLlamaCpp) {
  const Case c = GetParam();
  // q35-mtp's llama.cpp conversion is also its model fixture (tests/fixtures/models, tools/make_mtp_fixture.py).
  const std::string ref = fixtures() + (std::string(c.preset) == "q35-mtp" ? "/models/" : "/convert/") + c.preset + "." +
                          c.type + ".gguf";
  const std::string ours = convert_to(c.preset, c.type);
  expect_equivalent(ours, ref);
  // Same bytes must give the same forward; checked end to end anyway (same weights, same code: exact, but for a
  // 1-ulp ssm_a, which moves the logits by rounding only).
  const std::vector<int32_t> toks = {1, 17, 42, 5, 99, 3, 250, 7};
  const std::vector<float> la = logits(ours, toks), lb = logits(ref, toks);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * (1 + std::fabs(lb[i]))) << i;
  fs::remove(ours);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Equivalence,
                         ::testing::Values(Case{"q35-ratio", "bf16"}, Case{"q35-ratio", "q8_0"}, Case{"odd", "f32"},
                                           Case{"odd", "f16"}, Case{"q24t-shape-first8", "bf16"},
                                           Case{"dense-tiny", "bf16"}, Case{"next-tiny", "bf16"},
                                           Case{"q35-mtp", "bf16"}),  // the MTP block kept, as llama.cpp does
                         [](const auto& i) {
                           std::string s = std::string(i.param.preset) + "_" + i.param.type;
                           for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return s;
                         });

TEST(Convert, DryRunWritesNothing) {
  convert::Options o;
  o.input_dir = fixtures() + "/hf/odd";
  o.output = (tmp_dir() / "never.gguf").string();
  o.dry_run = true;
  o.no_mtp = true;
  const convert::Summary s = convert::run(o);
  EXPECT_FALSE(fs::exists(o.output));
  EXPECT_EQ(s.n_skipped_visual, 2u);  // the fixture's two model.visual.* tensors
  EXPECT_EQ(s.n_skipped_mtp, 2u);     // and its two mtp.* tensors
}

}  // namespace
