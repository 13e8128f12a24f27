// formats/hybrid_layers.h: the hybrid layer rule (explicit flags win, else attention iff (i + 1) % interval == 0,
// default interval 4, NextN blocks after the trunk), its GGUF reader, and block_index ("blk.N." -> N).
// Expected kinds are written out from the rule by hand, not taken from the code's output.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/gguf_writer.h"
#include "formats/hybrid_layers.h"
#include "formats/model_summary.h"
#include "gguf_test_util.h"

using namespace tern;
using namespace tern::gguf;

namespace {

constexpr LayerKind A = LayerKind::kAttention, R = LayerKind::kRecurrent, N = LayerKind::kNextN;

// The message of the Error fn throws ("" when it does not throw).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

HybridLayerRule rule(int64_t n_layer, int64_t n_nextn = 0) {
  HybridLayerRule r;
  r.n_layer = n_layer;
  r.n_nextn = n_nextn;
  r.source = "m.gguf";
  r.recurrent_key = "qwen35moe.attention.recurrent_layers";
  r.interval_key = "qwen35moe.full_attention_interval";
  return r;
}

TEST(HybridLayers, KindNames) {
  EXPECT_STREQ(layer_kind_name(A), "attention");
  EXPECT_STREQ(layer_kind_name(R), "recurrent");
  EXPECT_STREQ(layer_kind_name(N), "nextn");
}

TEST(HybridLayers, DefaultIntervalIsFour) {
  // (i + 1) % 4 == 0: layers 3 and 7 are attention.
  EXPECT_EQ(hybrid_layer_kinds(rule(8)), (std::vector<LayerKind>{R, R, R, A, R, R, R, A}));
  // Qwen3.5-35B-A3B: 40 layers, attention at 3, 7, ..., 39 (10 of them).
  const auto k = hybrid_layer_kinds(rule(40));
  ASSERT_EQ(k.size(), 40u);
  for (size_t i = 0; i < k.size(); ++i) EXPECT_EQ(k[i], i % 4 == 3 ? A : R) << "layer " << i;
}

TEST(HybridLayers, ExplicitInterval) {
  auto r = rule(6);
  r.interval = 3;  // layers 2 and 5
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>{R, R, A, R, R, A}));
  r.interval = 1;  // every layer is attention
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>(6, A)));
  r.interval = 7;  // longer than the model: no attention layer at all
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>(6, R)));
  r.interval = 6;  // only the last
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>{R, R, R, R, R, A}));
}

TEST(HybridLayers, NextNBlocksFollowTheTrunk) {
  auto r = rule(4, 2);
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>{R, R, R, A, N, N}));
  r.recurrent = std::vector<bool>{false, true, true, false, true, true};  // flags past the trunk: ignored
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>{A, R, R, A, N, N}));
  EXPECT_EQ(hybrid_layer_kinds(rule(0, 1)), (std::vector<LayerKind>{N}));
  EXPECT_TRUE(hybrid_layer_kinds(rule(0)).empty());
}

TEST(HybridLayers, ExplicitFlagsWinOverTheInterval) {
  auto r = rule(5);
  r.recurrent = std::vector<bool>{true, false, true, true, false};
  r.interval = 2;  // would give R A R A R
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>{R, A, R, R, A}));
  r.interval = 0;  // not used, so not checked (llama.cpp reads it only without the flags)
  EXPECT_EQ(hybrid_layer_kinds(r), (std::vector<LayerKind>{R, A, R, R, A}));
}

TEST(HybridLayers, Errors) {
  auto r = rule(4);
  r.interval = 0;
  std::string e = error_of([&] { hybrid_layer_kinds(r); });
  EXPECT_NE(e.find("m.gguf"), std::string::npos) << e;
  EXPECT_NE(e.find("qwen35moe.full_attention_interval"), std::string::npos) << e;
  r.interval = -3;
  EXPECT_NE(error_of([&] { hybrid_layer_kinds(r); }).find("= -3"), std::string::npos);

  r = rule(4);
  r.recurrent = std::vector<bool>{true, true, false};  // 3 flags for 4 layers
  e = error_of([&] { hybrid_layer_kinds(r); });
  EXPECT_NE(e.find("m.gguf: key 'qwen35moe.attention.recurrent_layers'"), std::string::npos) << e;
  EXPECT_NE(e.find("at least 4"), std::string::npos) << e;

  EXPECT_NE(error_of([] { hybrid_layer_kinds(rule(-1)); }).find("m.gguf"), std::string::npos);
  EXPECT_NE(error_of([] { hybrid_layer_kinds(rule(2, -1)); }), "");
  // More layers than any table may be sized by: refused before allocating.
  EXPECT_NE(error_of([] { hybrid_layer_kinds(rule(int64_t{1} << 40)); }).find("m.gguf"), std::string::npos);
  EXPECT_NE(error_of([] { hybrid_layer_kinds(rule(kMaxLayers, 1)); }), "");
  EXPECT_NE(error_of([] { hybrid_layer_kinds(rule(INT64_MAX, INT64_MAX)); }), "");  // no overflow in the sum
  EXPECT_EQ(hybrid_layer_kinds(rule(kMaxLayers - 1, 1)).size(), size_t{kMaxLayers});
}

// The GGUF reader: the keys, the scalar form, wrong types, and the rule text `tern info` prints.
TEST(HybridLayers, ReadFromGguf) {
  {
    Writer w;
    w.add_array("qwen3next.attention.recurrent_layers", std::vector<bool>{false, true, true, true, true, false});
    const auto b = w.serialize();
    const HybridLayers h = read_hybrid_layers(test::parse(b), "qwen3next", 5, 1);
    EXPECT_EQ(h.kinds, (std::vector<LayerKind>{A, R, R, R, R, N}));
    EXPECT_EQ(h.rule, "qwen3next.attention.recurrent_layers");
  }
  {
    Writer w;
    w.add_bool("qwen35.attention.recurrent_layers", true);  // one value for every trunk layer
    const auto b = w.serialize();
    const HybridLayers h = read_hybrid_layers(test::parse(b), "qwen35", 3, 1);
    EXPECT_EQ(h.kinds, (std::vector<LayerKind>{R, R, R, N}));
    EXPECT_EQ(h.rule, "qwen35.attention.recurrent_layers (one value for all layers)");
  }
  {
    Writer w;
    w.add_u32("qwen35moe.full_attention_interval", 2);
    const auto b = w.serialize();
    const HybridLayers h = read_hybrid_layers(test::parse(b), "qwen35moe", 4, 0);
    EXPECT_EQ(h.kinds, (std::vector<LayerKind>{R, A, R, A}));
    EXPECT_EQ(h.rule, "full attention every 2 layers (full_attention_interval)");
  }
  {
    Writer w;  // no key: the default 4
    const auto b = w.serialize();
    const HybridLayers h = read_hybrid_layers(test::parse(b), "qwen35moe", 4, 0);
    EXPECT_EQ(h.kinds, (std::vector<LayerKind>{R, R, R, A}));
    EXPECT_EQ(h.rule, "full attention every 4 layers (default, no full_attention_interval key)");
  }
  {
    Writer w;
    w.add_u32("qwen35moe.full_attention_interval", 0);
    const auto b = w.serialize();
    const std::string e = error_of([&] { read_hybrid_layers(test::parse(b, "z.gguf"), "qwen35moe", 4, 0); });
    EXPECT_NE(e.find("z.gguf: key 'qwen35moe.full_attention_interval' = 0"), std::string::npos) << e;
  }
  {
    Writer w;
    w.add_str("qwen35moe.full_attention_interval", "four");  // wrong type: names file and key
    const auto b = w.serialize();
    const std::string e = error_of([&] { read_hybrid_layers(test::parse(b, "z.gguf"), "qwen35moe", 4, 0); });
    EXPECT_NE(e.find("z.gguf"), std::string::npos) << e;
    EXPECT_NE(e.find("qwen35moe.full_attention_interval"), std::string::npos) << e;
  }
  {
    Writer w;
    w.add_array("qwen35moe.attention.recurrent_layers", std::vector<bool>{true, false});  // 2 flags, 4 layers
    const auto b = w.serialize();
    const std::string e = error_of([&] { read_hybrid_layers(test::parse(b, "z.gguf"), "qwen35moe", 4, 0); });
    EXPECT_NE(e.find("z.gguf: key 'qwen35moe.attention.recurrent_layers'"), std::string::npos) << e;
  }
  {
    Writer w;
    w.add_array("qwen35moe.attention.recurrent_layers", std::vector<std::string>{"a", "b", "c", "d"});
    const auto b = w.serialize();
    const std::string e = error_of([&] { read_hybrid_layers(test::parse(b, "z.gguf"), "qwen35moe", 4, 0); });
    EXPECT_NE(e.find("z.gguf"), std::string::npos) << e;
    EXPECT_NE(e.find("qwen35moe.attention.recurrent_layers"), std::string::npos) << e;
  }
  {
    Writer w;  // a hostile count is refused before the scalar form is expanded to it
    w.add_bool("qwen35moe.attention.recurrent_layers", true);
    const auto b = w.serialize();
    EXPECT_NE(error_of([&] { read_hybrid_layers(test::parse(b), "qwen35moe", int64_t{1} << 40, 0); }), "");
  }
}

TEST(BlockIndex, Parses) {
  EXPECT_EQ(block_index("blk.0.attn_norm.weight"), 0);
  EXPECT_EQ(block_index("blk.39.ffn_down_exps.weight"), 39);
  EXPECT_EQ(block_index("blk.40.nextn.eh_proj.weight"), 40);
  EXPECT_EQ(block_index("blk.7."), 7);       // empty rest
  EXPECT_EQ(block_index("blk.007.x"), 7);    // leading zeros
  EXPECT_EQ(block_index("blk.4294967296.x"), int64_t{1} << 32);  // past u32
  EXPECT_EQ(block_index("blk.9223372036854775807.x"), INT64_MAX);
}

TEST(BlockIndex, RejectsEverythingElse) {
  for (const char* s : {"", "blk", "blk.", "blk..x", "blk.x.attn", "blk.3", "blk.3x.w", "blk.3_w", "blk.-1.w",
                        "blk.+1.w", "blk. 1.w", "Blk.1.w", "blk1.w", "xblk.1.w", "token_embd.weight",
                        "output.weight", "blk.9223372036854775808.w", "blk.99999999999999999999999.w"})
    EXPECT_EQ(block_index(s), -1) << s;
  // A view that stops right after the digits has no '.', even if the bytes after it do.
  const std::string full = "blk.12.w";
  EXPECT_EQ(block_index(std::string_view(full).substr(0, 6)), -1);
  EXPECT_EQ(block_index(std::string_view(full).substr(0, 7)), 12);
  // Embedded NUL and high bytes are just non-matching bytes.
  EXPECT_EQ(block_index(std::string_view("blk.\0.w", 7)), -1);
  EXPECT_EQ(block_index("blk.1\xff.w"), -1);
}

TEST(BlockIndex, RoutedExpertTensors) {
  EXPECT_TRUE(is_routed_expert_tensor("blk.3.ffn_down_exps.weight"));
  EXPECT_FALSE(is_routed_expert_tensor("blk.3.ffn_down_shexp.weight"));
  EXPECT_FALSE(is_routed_expert_tensor("blk.x.ffn_down_exps.weight"));  // not a block tensor
  EXPECT_FALSE(is_routed_expert_tensor("ffn_down_exps.weight"));
}

}  // namespace
