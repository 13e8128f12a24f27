// The tensor contract against the real Qwen3.5-35B-A3B checkpoint index (fixture generated from the spec's
// naming rules): every name is known, the class counts and the GGUF tensor count are the spec's (733 tensors
// without MTP), and every rule of the table is exercised by the index or by a listed alternative form.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "convert/contract.h"

namespace {

using namespace tern::convert;

// Spec section 1 geometry.
HParams hp_35b() {
  HParams h;
  h.model_type = "qwen3_5_moe";
  h.n_layer = 40, h.n_embd = 2048, h.n_vocab = 248320, h.n_head = 16, h.n_head_kv = 2, h.head_dim = 256;
  h.n_expert = 256, h.n_expert_used = 8, h.n_ff_exp = 512, h.n_ff_shexp = 512;
  h.ssm_conv_kernel = 4, h.ssm_k_heads = 16, h.ssm_v_heads = 32, h.ssm_k_dim = 128, h.ssm_v_dim = 128;
  for (int i = 0; i < 40; ++i) h.recurrent.push_back((i + 1) % 4 != 0);
  return h;
}

std::vector<std::string> index_names() {
  std::ifstream in(std::string(TERN_FIXTURES_DIR) + "/convert/qwen35moe_35b_a3b_index.txt");
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#') v.push_back(l);
  return v;
}

TEST(Contract, RealIndexIsFullyClassified) {
  const HParams h = hp_35b();
  const auto names = index_names();
  ASSERT_EQ(names.size(), 745u);  // 3 globals + 30*18 + 10*15 + 4 + 15 MTP + 33 visual (generator)
  size_t conv = 0, mtp = 0, vis = 0, outputs = 0;
  for (const auto& n : names) {
    const Classified c = classify(n, h, false);
    ASSERT_NE(c.cls, TensorClass::kUnknown) << n << ": " << c.why;
    if (c.cls == TensorClass::kConvert) {
      ++conv;
      outputs += c.rule->shape_id == qwen35moe_rules()[6].shape_id ? 2 : 1;  // gate_up splits in two
    }
    mtp += c.cls == TensorClass::kSkipMtp;
    vis += c.cls == TensorClass::kSkipVisual;
  }
  EXPECT_EQ(conv, 693u);
  EXPECT_EQ(outputs, 733u);  // the observed GGUF's tensor count (spec section 1 sanity check)
  EXPECT_EQ(mtp, 19u);
  EXPECT_EQ(vis, 33u);
}

TEST(Contract, GgufNamesAndShapesMatchSpec) {
  const HParams h = hp_35b();
  struct Case {
    const char* hf;
    const char* gguf;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"model.language_model.embed_tokens.weight", "token_embd.weight", {248320, 2048}},
      {"lm_head.weight", "output.weight", {248320, 2048}},
      {"model.language_model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight", {8192, 2048}},
      {"model.language_model.layers.0.linear_attn.in_proj_qkv.weight", "blk.0.attn_qkv.weight", {8192, 2048}},
      {"model.language_model.layers.0.linear_attn.conv1d.weight", "blk.0.ssm_conv1d.weight", {8192, 1, 4}},
      {"model.language_model.layers.0.linear_attn.A_log", "blk.0.ssm_a", {32}},
      {"model.language_model.layers.0.linear_attn.dt_bias", "blk.0.ssm_dt.bias", {32}},
      {"model.language_model.layers.5.mlp.experts.gate_up_proj", "blk.5.ffn_gate_exps.weight", {256, 1024, 2048}},
      {"model.language_model.layers.5.mlp.experts.down_proj", "blk.5.ffn_down_exps.weight", {256, 2048, 512}},
      {"model.language_model.layers.5.mlp.shared_expert_gate.weight", "blk.5.ffn_gate_inp_shexp.weight", {1, 2048}},
      {"model.layers.7.self_attn.k_norm.weight", "blk.7.attn_k_norm.weight", {256}},  // text-only prefix
      {"model.layers.2.mlp.experts.17.up_proj.weight", "blk.2.ffn_up_exps.weight", {512, 2048}},
      {"mtp.fc.weight", "blk.40.nextn.eh_proj.weight", {2048, 4096}},
      {"mtp.norm.weight", "blk.40.nextn.shared_head_norm.weight", {2048}},
      {"mtp.layers.0.self_attn.o_proj.weight", "blk.40.attn_output.weight", {2048, 4096}},
  };
  for (const Case& c : cases) {
    const Classified k = classify(c.hf, h, /*keep_mtp=*/true);
    ASSERT_EQ(k.cls, TensorClass::kConvert) << c.hf << ": " << k.why;
    EXPECT_EQ(k.gguf, c.gguf) << c.hf;
    EXPECT_EQ(expected_shape(*k.rule, h), c.shape) << c.hf;
  }
}

TEST(Contract, TransformsFollowSpec) {
  const HParams h = hp_35b();
  auto rule = [&](const char* n) { return classify(n, h, true).rule; };
  // +1 on zero-centred norms, not on the DeltaNet gated norm.
  EXPECT_EQ(rule("model.language_model.norm.weight")->xform, Xform::kNormPlusOne);
  EXPECT_EQ(rule("model.language_model.layers.3.self_attn.q_norm.weight")->xform, Xform::kNormPlusOne);
  EXPECT_EQ(rule("mtp.pre_fc_norm_hidden.weight")->xform, Xform::kNormPlusOne);
  EXPECT_EQ(rule("model.language_model.layers.0.linear_attn.norm.weight")->xform, Xform::kNone);
  EXPECT_EQ(rule("model.language_model.layers.0.linear_attn.A_log")->xform, Xform::kNegExp);
  // Value-head reorder on exactly the spec 8.4 list; q_proj untouched.
  EXPECT_EQ(rule("model.language_model.layers.0.linear_attn.out_proj.weight")->reorder, Reorder::kCols);
  EXPECT_EQ(rule("model.language_model.layers.0.linear_attn.in_proj_b.weight")->reorder, Reorder::kRowsHead1);
  EXPECT_EQ(rule("model.language_model.layers.0.linear_attn.conv1d.weight")->reorder, Reorder::kConvRows);
  EXPECT_EQ(rule("model.language_model.layers.3.self_attn.q_proj.weight")->reorder, Reorder::kNone);
}

TEST(Contract, RejectsUnknownAndMisplacedNames) {
  const HParams h = hp_35b();
  for (const char* n : {"model.language_model.layers.0.self_attn.q_proj.weight",  // layer 0 is DeltaNet
                        "model.language_model.layers.3.linear_attn.A_log",       // layer 3 is attention
                        "model.language_model.layers.40.input_layernorm.weight", // past num_hidden_layers
                        "model.language_model.layers.0.mlp.new_thing.weight", "some.other.weight",
                        "model.language_model.layers.01.input_layernorm.weight"})
    EXPECT_EQ(classify(n, h, false).cls, TensorClass::kUnknown) << n;
}

TEST(Contract, EveryRuleIsPinned) {
  const HParams h = hp_35b();
  std::set<const Rule*> used;
  for (const auto& n : index_names()) {
    const Classified c = classify(n, h, true);
    if (c.rule) used.insert(c.rule);
  }
  // Alternative spellings llama.cpp also accepts (text-only releases, per-expert keys, `.weight` suffixes).
  for (const char* n : {"model.layers.0.mlp.experts.3.gate_proj.weight", "model.layers.0.mlp.experts.3.up_proj.weight",
                        "model.layers.0.mlp.experts.3.down_proj.weight", "model.layers.0.mlp.experts.gate_up_proj.weight",
                        "model.layers.0.mlp.experts.down_proj.weight"})
    used.insert(classify(n, h, true).rule);
  // Dense Qwen3.5 (qwen35): its FFN names, and they are refused in an MoE model (and the MoE names in a dense one).
  HParams dense = h;
  dense.arch = "qwen35";
  for (const char* n : {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                        "model.layers.0.mlp.down_proj.weight"}) {
    used.insert(classify(n, dense, true).rule);
    EXPECT_EQ(classify(n, dense, true).cls, TensorClass::kConvert) << n;
    EXPECT_EQ(classify(n, h, true).cls, TensorClass::kUnknown) << n;
  }
  EXPECT_EQ(classify("model.layers.0.mlp.gate.weight", dense, true).cls, TensorClass::kUnknown);
  // Qwen3-Next (qwen3next): its fused in-projections, refused in a Qwen3.5 model (and Qwen3.5's split ones in it).
  HParams next = h;
  next.arch = "qwen3next";
  for (const char* n : {"model.layers.0.linear_attn.in_proj_qkvz.weight", "model.layers.0.linear_attn.in_proj_ba.weight"}) {
    used.insert(classify(n, next, true).rule);
    EXPECT_EQ(classify(n, next, true).cls, TensorClass::kConvert) << n;
    EXPECT_EQ(classify(n, h, true).cls, TensorClass::kUnknown) << n;
  }
  EXPECT_EQ(classify("model.layers.0.linear_attn.in_proj_qkv.weight", next, true).cls, TensorClass::kUnknown);
  for (const Rule& r : qwen35moe_rules()) EXPECT_TRUE(used.count(&r)) << "rule not exercised: " << r.hf;
}

}  // namespace
