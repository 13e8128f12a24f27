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
#include "convert/gguf_compare.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "models/qwen35moe/forward.h"
#include "models/qwen35moe/state.h"

namespace {

namespace fs = std::filesystem;
using namespace tern;
using test::expect_equivalent;

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
