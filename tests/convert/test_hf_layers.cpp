// config.json -> HParams::recurrent through the shared hybrid rule (formats/hybrid_layers.h): layer_types wins,
// else full attention iff (i + 1) % full_attention_interval == 0 (default 4); bad values are errors naming
// config.json. Each case edits a copy of the committed `odd` checkpoint's config (5 layers). Expected flags are
// written out from the rule by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include "convert/hf_config.h"
#include "core/error.h"

namespace {

namespace fs = std::filesystem;
using namespace tern;
using convert::OJson;

struct Opened {
  std::vector<bool> recurrent;
  std::string error;  // "" when the checkpoint opened
};

// Opens a copy of the odd checkpoint whose config.json `edit` changed (text_config merged over the top level).
Opened open_with(const std::function<void(OJson&)>& edit, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("tern_hf_layers_" + tag + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(std::string(TERN_FIXTURES_DIR) + "/hf/odd"))
    fs::copy(f.path(), dir / f.path().filename());
  OJson cfg = convert::read_json_file((dir / "config.json").string());
  OJson& t = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  edit(t);
  std::ofstream((dir / "config.json").string()) << cfg.dump();
  Opened o;
  try {
    o.recurrent = convert::Checkpoint::open(dir.string()).hp.recurrent;
  } catch (const Error& e) {
    o.error = e.what();
  }
  fs::remove_all(dir);
  return o;
}

constexpr bool R = true, A = false;

TEST(ConvertLayers, LayerTypesAsListed) {
  const Opened o = open_with([](OJson&) {}, "as_is");
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.recurrent, (std::vector<bool>{R, A, R, R, A}));  // the fixture's layer_types
}

TEST(ConvertLayers, LayerTypesWinOverTheInterval) {
  const Opened o = open_with([](OJson& t) { t["full_attention_interval"] = 2; }, "wins");
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.recurrent, (std::vector<bool>{R, A, R, R, A}));
}

TEST(ConvertLayers, IntervalWithoutLayerTypes) {
  Opened o = open_with([](OJson& t) { t.erase("layer_types"); }, "default");
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.recurrent, (std::vector<bool>{R, R, R, A, R}));  // default 4: layer 3
  o = open_with([](OJson& t) { t.erase("layer_types"), t["full_attention_interval"] = 2; }, "two");
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.recurrent, (std::vector<bool>{R, A, R, A, R}));  // layers 1 and 3
  o = open_with([](OJson& t) { t["layer_types"] = nullptr, t["full_attention_interval"] = 5; }, "null");
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.recurrent, (std::vector<bool>{R, R, R, R, A}));  // null layer_types: as absent
}

TEST(ConvertLayers, Errors) {
  auto has = [](const Opened& o, const std::string& what) {
    return o.error.find("config.json") != std::string::npos && o.error.find(what) != std::string::npos;
  };
  Opened o = open_with([](OJson& t) { t.erase("layer_types"), t["full_attention_interval"] = 0; }, "zero");
  EXPECT_TRUE(has(o, "full_attention_interval")) << o.error;
  o = open_with([](OJson& t) { t["layer_types"].erase(4); }, "short");
  EXPECT_TRUE(has(o, "layer_types")) << o.error;
  o = open_with([](OJson& t) { t["layer_types"][2] = "sliding_attention"; }, "kind");
  EXPECT_TRUE(has(o, "sliding_attention")) << o.error;
  // A layer count no per-layer table may be sized by is refused, not allocated.
  o = open_with([](OJson& t) { t.erase("layer_types"), t["num_hidden_layers"] = int64_t{1} << 39; }, "huge");
  EXPECT_TRUE(has(o, "layers")) << o.error;
}

}  // namespace
