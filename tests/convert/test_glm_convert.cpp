// tern convert on GLM-5 checkpoints (HF glm_moe_dsa -> GGUF glm-dsa) against llama.cpp's convert_hf_to_gguf.py on
// the same committed toy checkpoints: tests/fixtures/hf/glm5-toy (GLM-5/5.1: every layer runs its own indexer; a
// NextN block at layer index num_hidden_layers) and glm52-toy (GLM-5.2: "shared" indexer layers, which carry no
// indexer tensors; no NextN block); llama.cpp's conversions are tests/fixtures/models/<preset>.<type>.gguf
// (tools/make_glm_fixtures.py). Metadata and tensors must be equal (gguf_compare.h; general.name aside); f32,
// which has no committed llama.cpp file, must hold the f16 file's (f16-representable) values. Then the contract:
// an unknown tensor is refused by name, a missing one is named, the NextN block is counted and kept by default
// and dropped with --no-mtp, and the llama-quantize types are refused for glm-dsa. Contract and config tests at
// GLM-5's real geometry need no fixture.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unistd.h>

#include "convert/checkpoint_edit.h"
#include "convert/contract.h"
#include "convert/convert.h"
#include "convert/gguf_compare.h"
#include "core/error.h"
#include "core/fp16.h"
#include "formats/gguf.h"

namespace {

namespace fs = std::filesystem;
using namespace tern;
using convert::OJson;

std::string fixtures() { return TERN_FIXTURES_DIR; }

// The checkpoint and llama.cpp's conversion of it to `type`.
bool have_fixture(const std::string& preset, const std::string& type = "f16") {
  return fs::exists(fixtures() + "/hf/" + preset + "/config.json") &&
         fs::exists(fixtures() + "/models/" + preset + "." + type + ".gguf");
}

#define REQUIRE_FIXTURE(preset, ...)                                                                         \
  if (!have_fixture(preset, ##__VA_ARGS__))                                                                  \
  GTEST_SKIP() << "fixture " << (preset) << " not present (tests/fixtures/hf/" << (preset)                  \
               << ", tests/fixtures/models/" << (preset) << ".<type>.gguf)"

fs::path tmp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("tern_glm_convert_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// ---------------------------------------------------------------------------------------------------------------
// Equivalence with llama.cpp.

struct Case {
  const char* preset;
  const char* type;
};

class GlmEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(GlmEquivalence, MatchesLlamaCpp) {
  const Case c = GetParam();
  REQUIRE_FIXTURE(c.preset, c.type);
  convert::Options o;
  o.input_dir = fixtures() + "/hf/" + c.preset;
  o.output = (tmp_dir(std::string(c.preset) + c.type) / "out.gguf").string();
  o.type = *convert::file_type_from_name(c.type);
  const convert::Summary s = convert::run(o);
  // The NextN block is kept, as llama.cpp keeps it by default (glm52-toy declares none).
  const int64_t n_mtp = convert::read_json_file(o.input_dir + "/config.json").value("num_nextn_predict_layers", 0);
  EXPECT_EQ(s.n_mtp_layers, n_mtp);
  EXPECT_EQ(s.n_mtp_sources > 0, n_mtp > 0);
  test::expect_equivalent(o.output, fixtures() + "/models/" + c.preset + "." + c.type + ".gguf");
  fs::remove_all(fs::path(o.output).parent_path());
}

// The committed converter outputs (tools/make_glm_fixtures.py). Its f32 files stay in its work directory (see
// GlmF32 below); glm5-toy.q8_0.gguf is llama-quantize's requantization of the f32 file, not the converter's q8_0
// (llama-quantize also quantizes indexer.proj, which the converter keeps F32, and moves general.file_type), so
// it is no reference for `tern convert --type q8_0`.
INSTANTIATE_TEST_SUITE_P(Fixtures, GlmEquivalence,
                         ::testing::Values(Case{"glm5-toy", "f16"}, Case{"glm52-toy", "f16"}),
                         [](const auto& i) {
                           std::string s = std::string(i.param.preset) + "_" + i.param.type;
                           for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return s;
                         });

// f32 has no committed llama.cpp file; the fixtures' weights are f16-representable (tools/fixturelib/glm.py), so
// tern's f32 conversion must hold exactly the values of llama.cpp's f16 one, with llama.cpp's f32 types: the
// tensors the converter keeps in F32 are F32 in both, every other one F32 here and F16 there. The metadata is the
// same but for general.file_type (0, ALL_F32).
class GlmF32 : public ::testing::TestWithParam<const char*> {};

TEST_P(GlmF32, HoldsTheValuesOfLlamaCppF16) {
  const std::string preset = GetParam();
  REQUIRE_FIXTURE(preset, "f16");
  convert::Options o;
  o.input_dir = fixtures() + "/hf/" + preset;
  o.output = (tmp_dir(preset + "f32") / "out.gguf").string();
  o.type = convert::FileType::F32;
  convert::run(o);
  const gguf::File ours = gguf::File::open(o.output), ref = gguf::File::open(fixtures() + "/models/" + preset + ".f16.gguf");
  ASSERT_EQ(ours.metadata().size(), ref.metadata().size());
  for (size_t i = 0; i < ref.metadata().size(); ++i) {
    const gguf::Value& a = ours.metadata()[i];
    const gguf::Value& b = ref.metadata()[i];
    ASSERT_EQ(a.key(), b.key()) << "key #" << i;
    if (a.key() == "general.name") continue;
    if (a.key() == "general.file_type") {
      EXPECT_EQ(a.to_i64(), 0);
      continue;
    }
    test::expect_same_value(a, b);
  }
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const gguf::TensorInfo& a = ours.tensors()[i];
    const gguf::TensorInfo& b = ref.tensors()[i];
    ASSERT_EQ(a.name, b.name) << "tensor #" << i;
    ASSERT_EQ(a.shape_str(), b.shape_str()) << a.name;
    ASSERT_EQ(a.type, quant::Type::F32) << a.name;
    ASSERT_TRUE(b.type == quant::Type::F32 || b.type == quant::Type::F16) << a.name;
    const int64_t n = static_cast<int64_t>(a.n_bytes / 4);
    int64_t bad = 0;
    for (int64_t j = 0; j < n; ++j) {
      float x, y;
      std::memcpy(&x, a.data + 4 * j, 4);
      if (b.type == quant::Type::F32) {
        std::memcpy(&y, b.data + 4 * j, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, b.data + 2 * j, 2);
        y = fp16_to_fp32(h);
      }
      bad += std::memcmp(&x, &y, 4) != 0;
    }
    EXPECT_EQ(bad, 0) << a.name << ": values differ from llama.cpp's f16 file";
  }
  fs::remove_all(fs::path(o.output).parent_path());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GlmF32, ::testing::Values("glm5-toy", "glm52-toy"), [](const auto& i) {
  std::string s = i.param;
  for (char& ch : s) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return s;
});

// ---------------------------------------------------------------------------------------------------------------
// The contract on edited copies of glm5-toy.

struct Edited {
  fs::path dir;
  ~Edited() { fs::remove_all(dir); }
};

// A copy of glm5-toy with its tensors (and optionally config.json) edited.
std::unique_ptr<Edited> edited_copy(const std::string& tag, const std::function<void(std::vector<test::Entry>&)>& edit,
                                    const std::function<void(OJson&)>& edit_config = nullptr) {
  auto e = std::make_unique<Edited>();
  e->dir = tmp_dir(tag);
  for (const auto& f : fs::directory_iterator(fixtures() + "/hf/glm5-toy")) fs::copy(f.path(), e->dir / f.path().filename());
  const std::string st = (e->dir / "model.safetensors").string();
  auto v = test::load_entries(st);
  edit(v);
  test::save_entries(st, v);
  if (edit_config) {
    OJson cfg = convert::read_json_file((e->dir / "config.json").string());
    edit_config(cfg);
    std::ofstream((e->dir / "config.json").string()) << cfg.dump();
  }
  return e;
}

// The error of a dry run ("" when it succeeds).
std::string dry_run_error(const fs::path& dir, bool no_mtp = false) {
  convert::Options o;
  o.input_dir = dir.string();
  o.dry_run = true;  // every contract check happens before data is read
  o.no_mtp = no_mtp;
  std::string err;
  ::testing::internal::CaptureStdout();
  try {
    convert::run(o);
  } catch (const Error& ex) {
    err = ex.what();
  }
  ::testing::internal::GetCapturedStdout();
  return err;
}

int64_t n_layer_of(const std::string& dir) {
  return convert::read_json_file(dir + "/config.json")["num_hidden_layers"].get<int64_t>();
}

TEST(GlmContract, UnchangedCopyPasses) {
  REQUIRE_FIXTURE("glm5-toy");
  auto e = edited_copy("same", [](auto&) {});
  EXPECT_EQ(dry_run_error(e->dir), "");
}

TEST(GlmContract, UnknownTensorIsRefusedByName) {
  REQUIRE_FIXTURE("glm5-toy");
  auto e = edited_copy("unknown", [](std::vector<test::Entry>& v) {
    v.push_back({"model.layers.1.self_attn.indexer.extra_proj.weight", "F32", {2}, std::vector<uint8_t>(8)});
    v.push_back({"model.rotary_emb.inv_freq", "F32", {2}, std::vector<uint8_t>(8)});
  });
  const std::string err = dry_run_error(e->dir);
  EXPECT_NE(err.find("2 tensor name(s) not in the glm-dsa contract"), std::string::npos) << err;
  EXPECT_NE(err.find("model.layers.1.self_attn.indexer.extra_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("model.rotary_emb.inv_freq"), std::string::npos) << err;
}

TEST(GlmContract, IndexerTensorsOfASharedLayerAreRefused) {
  REQUIRE_FIXTURE("glm5-toy");
  // Mark layer 1 "shared": HF builds no indexer there, so its indexer tensors are not part of the model.
  auto e = edited_copy("shared", [](auto&) {}, [](OJson& cfg) {
    OJson types = OJson::array();
    for (int i = 0; i < cfg["num_hidden_layers"].get<int>(); ++i) types.push_back(i == 1 ? "shared" : "full");
    cfg["indexer_types"] = types;
  });
  const std::string err = dry_run_error(e->dir);
  EXPECT_NE(err.find("model.layers.1.self_attn.indexer.wk.weight (indexer tensor in a layer whose indexer_types "
                     "entry is \"shared\")"),
            std::string::npos)
      << err;
}

TEST(GlmContract, MissingTensorsAreNamed) {
  REQUIRE_FIXTURE("glm5-toy");
  const std::string dir = fixtures() + "/hf/glm5-toy";
  const int64_t last = n_layer_of(dir) - 1;  // an MoE layer (first_k_dense_replace < num_hidden_layers)
  const std::string b = "model.layers." + std::to_string(last) + ".";
  struct Case {
    std::string erase, want;
  };
  for (const Case& c : {Case{b + "self_attn.kv_b_proj.weight", "blk." + std::to_string(last) + ".attn_k_b.weight"},
                        Case{b + "mlp.gate.e_score_correction_bias", "blk." + std::to_string(last) + ".exp_probs_b.bias"},
                        Case{b + "self_attn.indexer.weights_proj.weight",
                             "blk." + std::to_string(last) + ".indexer.proj.weight"},
                        Case{b + "mlp.experts.0.up_proj.weight", "per-expert tensors present"},
                        Case{"model.layers." + std::to_string(last + 1) + ".eh_proj.weight",
                             "blk." + std::to_string(last + 1) + ".nextn.eh_proj.weight"}}) {
    auto e = edited_copy("missing", [&](std::vector<test::Entry>& v) {
      const size_t n = v.size();
      std::erase_if(v, [&](const test::Entry& t) { return t.name == c.erase; });
      ASSERT_EQ(v.size(), n - 1) << c.erase << " is not in the fixture";
    });
    const std::string err = dry_run_error(e->dir);
    EXPECT_NE(err.find(c.want), std::string::npos) << "erased " << c.erase << ": " << err;
  }
}

TEST(GlmContract, ShapeMismatchIsNamed) {
  REQUIRE_FIXTURE("glm5-toy");
  auto e = edited_copy("shape", [](auto&) {}, [](OJson& cfg) { cfg["kv_lora_rank"] = cfg["kv_lora_rank"].get<int>() + 1; });
  const std::string err = dry_run_error(e->dir);
  EXPECT_NE(err.find("kv_a_layernorm.weight': shape"), std::string::npos) << err;
}

// The NextN block: counted and kept by default (block n_layer, nextn_predict_layers), dropped with --no-mtp.
TEST(GlmContract, NextnBlockKeptByDefaultDroppedWithNoMtp) {
  REQUIRE_FIXTURE("glm5-toy");
  const std::string dir = fixtures() + "/hf/glm5-toy";
  const int64_t n_layer = n_layer_of(dir);
  const std::string mtp_prefix = "model.layers." + std::to_string(n_layer) + ".";
  size_t n_mtp_names = 0;
  for (const auto& t : test::load_entries(dir + "/model.safetensors")) n_mtp_names += t.name.rfind(mtp_prefix, 0) == 0;
  ASSERT_GT(n_mtp_names, 0u) << "glm5-toy has no NextN block";

  const fs::path tmp = tmp_dir("mtp");
  convert::Options o;
  o.input_dir = dir;
  o.type = convert::FileType::F16;
  // Default: kept and counted, and the dry-run report says so.
  o.dry_run = true;
  ::testing::internal::CaptureStdout();
  convert::Summary s = convert::run(o);
  const std::string report = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(s.n_mtp_sources, n_mtp_names);
  EXPECT_EQ(s.n_mtp_layers, 1);
  EXPECT_EQ(s.n_skipped_mtp, 0u);
  EXPECT_NE(report.find("mtp:       " + std::to_string(n_mtp_names) + " source tensors kept as 1 MTP block(s)"),
            std::string::npos)
      << report;
  // --no-mtp: the same names are counted as skipped and nothing of block n_layer is written.
  o.dry_run = false;
  o.no_mtp = true;
  o.output = (tmp / "nomtp.gguf").string();
  s = convert::run(o);
  EXPECT_EQ(s.n_skipped_mtp, n_mtp_names);
  EXPECT_EQ(s.n_mtp_sources, 0u);
  EXPECT_EQ(s.n_mtp_layers, 0);
  const gguf::File nomtp = gguf::File::open(o.output);
  const gguf::File ref = gguf::File::open(fixtures() + "/models/glm5-toy.f16.gguf");  // MTP kept
  ASSERT_NE(nomtp.find("glm-dsa.block_count"), nullptr);
  EXPECT_EQ(nomtp.find("glm-dsa.block_count")->to_i64(), n_layer);
  EXPECT_EQ(nomtp.find("glm-dsa.nextn_predict_layers"), nullptr);
  EXPECT_NE(ref.find("glm-dsa.nextn_predict_layers"), nullptr);
  // The trunk is the reference's, tensor for tensor, without block n_layer.
  const std::string blk = "blk." + std::to_string(n_layer) + ".";
  std::vector<const gguf::TensorInfo*> ref_trunk;
  for (const auto& t : ref.tensors())
    if (t.name.rfind(blk, 0) != 0) ref_trunk.push_back(&t);
  ASSERT_EQ(nomtp.tensors().size(), ref_trunk.size());
  for (size_t i = 0; i < ref_trunk.size(); ++i) {
    const gguf::TensorInfo& a = nomtp.tensors()[i];
    ASSERT_EQ(a.name, ref_trunk[i]->name);
    ASSERT_EQ(a.n_bytes, ref_trunk[i]->n_bytes) << a.name;
    EXPECT_EQ(std::memcmp(a.data, ref_trunk[i]->data, a.n_bytes), 0) << a.name;
  }
  fs::remove_all(tmp);
}

TEST(GlmContract, LlamaQuantizeTypesAreRefused) {
  REQUIRE_FIXTURE("glm5-toy");
  convert::Options o;
  o.input_dir = fixtures() + "/hf/glm5-toy";
  o.dry_run = true;
  o.type = convert::FileType::Q4_K_M;
  try {
    convert::run(o);
    FAIL() << "q4_k_m accepted for glm-dsa";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--type q4_k_m: not supported for glm-dsa"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// GLM-5's real geometry (spec glm_moe_dsa.md sections 1 and 2), no fixture needed.

convert::HParams hp_glm5() {
  convert::HParams h;
  h.model_type = "glm_moe_dsa";
  h.arch = "glm-dsa";
  h.n_layer = 78, h.n_embd = 6144, h.n_vocab = 154880, h.n_head = 64, h.n_head_kv = 64;
  h.n_ff = 12288, h.n_expert = 256, h.n_expert_used = 8, h.n_ff_exp = 2048, h.n_ff_shexp = 2048;
  h.q_lora = 2048, h.kv_lora = 512, h.qk_nope = 192, h.qk_rope = 64, h.v_head_dim = 256, h.head_dim = 256;
  h.n_dense_lead = 3, h.idx_heads = 32, h.idx_dim = 128, h.n_mtp = 1;
  h.indexer_full.assign(78, true);
  return h;
}

TEST(GlmContract, SpecTableNamesAndShapes) {
  const convert::HParams h = hp_glm5();
  struct Case {
    const char* hf;
    const char* gguf;
    std::vector<int64_t> shape;  // HF (PyTorch) order
  };
  const std::vector<Case> cases = {
      {"model.embed_tokens.weight", "token_embd.weight", {154880, 6144}},
      {"model.norm.weight", "output_norm.weight", {6144}},
      {"lm_head.weight", "output.weight", {154880, 6144}},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight", {6144}},
      {"model.layers.5.self_attn.q_a_proj.weight", "blk.5.attn_q_a.weight", {2048, 6144}},
      {"model.layers.5.self_attn.q_a_layernorm.weight", "blk.5.attn_q_a_norm.weight", {2048}},
      {"model.layers.5.self_attn.q_b_proj.weight", "blk.5.attn_q_b.weight", {16384, 2048}},
      {"model.layers.5.self_attn.kv_a_proj_with_mqa.weight", "blk.5.attn_kv_a_mqa.weight", {576, 6144}},
      {"model.layers.5.self_attn.kv_a_layernorm.weight", "blk.5.attn_kv_a_norm.weight", {512}},
      {"model.layers.5.self_attn.kv_b_proj.weight", "blk.5.attn_k_b.weight", {28672, 512}},  // + attn_v_b
      {"model.layers.5.self_attn.o_proj.weight", "blk.5.attn_output.weight", {6144, 16384}},
      {"model.layers.5.self_attn.indexer.wq_b.weight", "blk.5.indexer.attn_q_b.weight", {4096, 2048}},
      {"model.layers.5.self_attn.indexer.wk.weight", "blk.5.indexer.attn_k.weight", {128, 6144}},
      {"model.layers.5.self_attn.indexer.k_norm.weight", "blk.5.indexer.k_norm.weight", {128}},
      {"model.layers.5.self_attn.indexer.k_norm.bias", "blk.5.indexer.k_norm.bias", {128}},
      {"model.layers.5.self_attn.indexer.weights_proj.weight", "blk.5.indexer.proj.weight", {32, 6144}},
      {"model.layers.5.post_attention_layernorm.weight", "blk.5.ffn_norm.weight", {6144}},
      {"model.layers.2.mlp.gate_proj.weight", "blk.2.ffn_gate.weight", {12288, 6144}},
      {"model.layers.2.mlp.down_proj.weight", "blk.2.ffn_down.weight", {6144, 12288}},
      {"model.layers.3.mlp.gate.weight", "blk.3.ffn_gate_inp.weight", {256, 6144}},
      {"model.layers.3.mlp.gate.e_score_correction_bias", "blk.3.exp_probs_b.bias", {256}},
      {"model.layers.3.mlp.experts.255.gate_proj.weight", "blk.3.ffn_gate_exps.weight", {2048, 6144}},
      {"model.layers.3.mlp.experts.7.down_proj.weight", "blk.3.ffn_down_exps.weight", {6144, 2048}},
      {"model.layers.3.mlp.shared_experts.up_proj.weight", "blk.3.ffn_up_shexp.weight", {2048, 6144}},
      {"model.layers.78.eh_proj.weight", "blk.78.nextn.eh_proj.weight", {6144, 12288}},
      {"model.layers.78.enorm.weight", "blk.78.nextn.enorm.weight", {6144}},
      {"model.layers.78.shared_head.norm.weight", "blk.78.nextn.shared_head_norm.weight", {6144}},
      {"model.layers.78.shared_head.head.weight", "blk.78.nextn.shared_head_head.weight", {154880, 6144}},
      {"model.layers.78.embed_tokens.weight", "blk.78.nextn.embed_tokens.weight", {154880, 6144}},
      {"model.layers.78.self_attn.kv_b_proj.weight", "blk.78.attn_k_b.weight", {28672, 512}},
      {"model.layers.78.mlp.experts.0.up_proj.weight", "blk.78.ffn_up_exps.weight", {2048, 6144}},
      {"model.language_model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight", {6144}},
  };
  for (const Case& c : cases) {
    const convert::Classified k = convert::classify(c.hf, h, /*keep_mtp=*/true);
    ASSERT_EQ(k.cls, convert::TensorClass::kConvert) << c.hf << ": " << k.why;
    EXPECT_EQ(k.gguf, c.gguf) << c.hf;
    EXPECT_EQ(convert::expected_shape(*k.rule, h), c.shape) << c.hf;
  }
}

TEST(GlmContract, RefusesMisplacedNames) {
  convert::HParams h = hp_glm5();
  h.indexer_full[10] = false;  // a GLM-5.2-style "shared" layer
  for (const char* n : {"model.layers.3.mlp.gate_proj.weight",            // dense FFN in an MoE layer
                        "model.layers.2.mlp.gate.weight",                 // router in a dense layer
                        "model.layers.2.mlp.experts.0.up_proj.weight",    // expert in a dense layer
                        "model.layers.10.self_attn.indexer.wk.weight",    // indexer in a shared layer
                        "model.layers.5.eh_proj.weight",                  // NextN tensor in a trunk layer
                        "model.layers.79.input_layernorm.weight",         // past the NextN block
                        "model.layers.3.mlp.experts.gate_up_proj",        // fused experts: llama.cpp cannot merge them
                        "mtp.fc.weight", "model.layers.03.input_layernorm.weight", "model.layers.3.self_attn.q_proj.weight"})
    EXPECT_EQ(convert::classify(n, h, true).cls, convert::TensorClass::kUnknown) << n;
  // --no-mtp drops the whole NextN block by index, before any rule (llama.cpp's filter_tensors).
  EXPECT_EQ(convert::classify("model.layers.78.eh_proj.weight", h, false).cls, convert::TensorClass::kSkipMtp);
  EXPECT_EQ(convert::classify("model.layers.78.input_layernorm.weight", h, false).cls, convert::TensorClass::kSkipMtp);
}

TEST(GlmContract, EveryRuleIsUsedBySpecNames) {
  const convert::HParams h = hp_glm5();
  std::set<const convert::Rule*> used;
  for (const char* l : {"2", "3", "78"})
    for (const convert::Rule& r : convert::glm_dsa_rules()) {
      std::string n = r.hf;
      for (const auto& [ph, v] : {std::pair<std::string, std::string>{"{L}", l}, {"{E}", "0"}})
        if (size_t at = n.find(ph); at != std::string::npos) n = n.substr(0, at) + v + n.substr(at + ph.size());
      if (n != "lm_head.weight") n = "model." + n;
      const convert::Classified c = convert::classify(n, h, true);
      if (c.cls == convert::TensorClass::kConvert) used.insert(c.rule);
    }
  for (const convert::Rule& r : convert::glm_dsa_rules()) EXPECT_TRUE(used.count(&r)) << "rule never applies: " << r.hf;
}

// What llama.cpp reads is transformers' GlmMoeDsaConfig, not the raw file (conversion/base.py load_hparams).
TEST(GlmConfig, AutoconfigAppliesClassDefaultsAndPostInit) {
  // A GLM-5-style config.json: rope_theta at the top, head_dim the legacy 64, no indexer_types, n_group absent.
  const OJson raw = OJson::parse(R"({"model_type": "glm_moe_dsa", "num_hidden_layers": 6, "qk_rope_head_dim": 16,
      "qk_nope_head_dim": 32, "head_dim": 64, "rope_theta": 8000000, "index_topk_freq": 2,
      "index_skip_topk_offset": 1})");
  const OJson h = convert::glm_autoconfig(raw);
  EXPECT_EQ(h["head_dim"], 16);  // __post_init__: head_dim = qk_rope_head_dim
  EXPECT_EQ(h["qk_head_dim"], 48);
  EXPECT_EQ(h["n_group"], 1);
  EXPECT_EQ(h["routed_scaling_factor"], 2.5);
  EXPECT_EQ(h["first_k_dense_replace"], 3);
  EXPECT_EQ(h["rope_parameters"]["rope_theta"], 8000000);
  EXPECT_EQ(h["rope_parameters"]["rope_type"], "default");
  // layer i is full iff max(i - offset + 1, 0) % freq == 0
  EXPECT_EQ(h["indexer_types"], OJson::parse(R"(["full", "shared", "full", "shared", "full", "shared"])"));
  // A pattern overrides the schedule; no rope_theta anywhere gives transformers' default 10000.
  const OJson p = convert::glm_autoconfig(OJson::parse(R"({"num_hidden_layers": 3, "index_topk_pattern": "FSF"})"));
  EXPECT_EQ(p["indexer_types"], OJson::parse(R"(["full", "shared", "full"])"));
  EXPECT_EQ(p["rope_parameters"]["rope_theta"], 10000.0);
}

}  // namespace
