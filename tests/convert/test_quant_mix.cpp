// K-quant mix rules on the 35B-A3B geometry. Expected types are derived by hand from llama.cpp's
// src/llama-quant.cpp (llama_tensor_get_type_impl, tensor_type_fallback) for LLAMA_FTYPE_MOSTLY_Q4_K_M, not
// from tern's output; the converter rules from conversion/base.py prepare_tensors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "convert/quant_mix.h"
#include "formats/hybrid_layers.h"

namespace {

using namespace tern::convert;
using tern::quant::Type;

OutTensor t(const std::string& name, std::vector<int64_t> shape, int64_t layer = -1) {
  OutTensor o;
  o.name = name;
  o.shape = std::move(shape);
  o.layer = layer;
  return o;
}

Plan plan_35b() {
  Plan p;
  p.block_count = 40;
  p.tensors = {
      t("output.weight", {248320, 2048}),
      t("token_embd.weight", {248320, 2048}),
      t("blk.0.attn_qkv.weight", {8192, 2048}, 0),          // attn_v-like #0 of 40: use_more_bits -> Q6_K
      t("blk.1.attn_qkv.weight", {8192, 2048}, 1),          // #1 < 40/8 -> Q6_K
      t("blk.3.attn_v.weight", {512, 2048}, 3),             // #2 < 5 -> Q6_K
      t("blk.0.ffn_down_exps.weight", {256, 2048, 512}, 0), // layer 0 < 5 -> Q6_K
      t("blk.5.ffn_down_exps.weight", {256, 2048, 512}, 5), // (5-5)%3 = 0 -> Q4_K
      t("blk.7.ffn_down_shexp.weight", {2048, 512}, 7),     // (7-5)%3 = 2 -> Q6_K
      t("blk.0.ffn_gate_inp.weight", {256, 2048}, 0),       // router: not quantized -> F32
      t("blk.0.ffn_gate_inp_shexp.weight", {1, 2048}, 0),   // ggml_n_dims 1 -> F32
      t("blk.0.ssm_alpha.weight", {32, 2048}, 0),           // quantizable 2-D -> Q4_K
      t("blk.0.ssm_conv1d.weight", {8192, 4}, 0),           // never quantized -> F32
      t("blk.0.attn_norm.weight", {2048}, 0),
      t("blk.3.attn_output.weight", {2048, 4096}, 3),       // n_expert != 8 -> Q4_K
      t("blk.3.attn_k.weight", {512, 2000}, 3),             // row 2000: Q4_K -> Q5_0 (2000 % 32 != 0) -> F16
  };
  for (int i = 8; i < 40; ++i) p.tensors.push_back(t("blk.x.attn_qkv.weight", {8192, 2048}, i));  // pad the count
  return p;
}

HParams hp() {
  HParams h;
  h.n_expert = 256;
  return h;
}

TEST(QuantMix, Q4KMFollowsLlamaQuantize) {
  const auto ty = choose_types(plan_35b(), hp(), FileType::Q4_K_M, std::nullopt);
  const std::vector<Type> want = {Type::Q6_K, Type::Q4_K, Type::Q6_K, Type::Q6_K, Type::Q6_K, Type::Q6_K, Type::Q4_K,
                                  Type::Q6_K, Type::F32,  Type::F32,  Type::Q4_K, Type::F32,  Type::F32,  Type::Q4_K,
                                  Type::F16};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(ty[i], want[i]) << plan_35b().tensors[i].name;
}

TEST(QuantMix, ExpertTypeOverridesRoutedExpertsOnly) {
  const auto ty = choose_types(plan_35b(), hp(), FileType::Q4_K_M, Type::Q8_0);
  EXPECT_EQ(ty[5], Type::Q8_0);  // ffn_down_exps
  EXPECT_EQ(ty[6], Type::Q8_0);
  EXPECT_EQ(ty[7], Type::Q6_K);  // shared expert keeps the mix
}

TEST(QuantMix, ConverterTypes) {
  const auto ty = choose_types(plan_35b(), hp(), FileType::Q8_0, std::nullopt);
  EXPECT_EQ(ty[0], Type::Q8_0);   // the converter has no output.weight special case for q8_0
  EXPECT_EQ(ty[8], Type::F32);    // router
  EXPECT_EQ(ty[9], Type::F32);    // shared-expert gate
  EXPECT_EQ(ty[11], Type::F32);   // conv
  EXPECT_EQ(ty[14], Type::F16);   // row 2000 is not a multiple of 32: gguf-py QuantError -> F16
}

// The same rules against llama.cpp's own quantizer at the 35B-A3B's real widths, all 40 layers and every tensor
// (tools/record_kquant_real_width.py: llama_model_quantize on a zero-filled BF16 GGUF in the converter's layout;
// type choice reads names, order, row lengths and hparams, never data). Exact: a type is right or wrong.
TEST(QuantMix, RealWidthMixesMatchLlamaQuantize) {
  std::ifstream f(std::string(TERN_FIXTURES_DIR) + "/convert/llamacpp_kquants_real_width.json");
  ASSERT_TRUE(f) << "missing llamacpp_kquants_real_width.json";
  const nlohmann::json ref = nlohmann::json::parse(f);
  HParams h;
  h.n_expert = ref["n_expert"];
  const std::map<std::string, FileType> mixes = {
      {"q4_k_m", FileType::Q4_K_M}, {"q5_k_m", FileType::Q5_K_M}, {"q6_k", FileType::Q6_K}};
  ASSERT_EQ(ref["mixes"].size(), mixes.size());
  for (const auto& [mix, ft] : mixes) {
    const auto& tensors = ref["mixes"][mix];
    Plan p;
    p.block_count = ref["n_layer"];
    for (const auto& t : tensors) {
      const std::string name = t[0];
      std::vector<int64_t> ne = t[1].get<std::vector<int64_t>>();
      const int64_t layer = tern::gguf::block_index(name);
      p.tensors.push_back(OutTensor{});
      p.tensors.back().name = name;
      p.tensors.back().shape.assign(ne.rbegin(), ne.rend());
      p.tensors.back().layer = layer;
    }
    const auto ty = choose_types(p, h, ft, std::nullopt);
    ASSERT_EQ(ty.size(), tensors.size());
    int wrong = 0;
    for (size_t i = 0; i < ty.size(); ++i) {
      const std::string want = tensors[i][2];
      const auto want_type = tern::quant::type_from_name(want);
      ASSERT_TRUE(want_type) << want;
      if (*want_type != ty[i] && ++wrong <= 10)
        ADD_FAILURE() << mix << " " << p.tensors[i].name << ": tern " << tern::quant::type_name(ty[i]) << ", llama.cpp "
                      << want;
    }
    EXPECT_EQ(wrong, 0) << mix << ": " << wrong << " of " << ty.size() << " tensors typed differently";
  }
}

}  // namespace
