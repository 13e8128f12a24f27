// Contract violations found before any tensor data is read: unknown names (all listed), unsupported dtypes,
// missing tensors, shards that disagree with their index. Each case edits a copy of the committed `odd`
// checkpoint by rewriting its safetensors file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/checkpoint_edit.h"
#include "convert/convert.h"
#include "core/error.h"
#include "formats/safetensors.h"

namespace {

namespace fs = std::filesystem;
using namespace tern;
using test::Entry;
using test::load_entries;
using test::save_entries;

// A copy of the odd checkpoint whose tensors `edit` may change; returns the conversion error ("" if none).
std::string convert_error(const std::function<void(std::vector<Entry>&)>& edit, const std::string& tag) {
  const fs::path dir = test::copy_checkpoint("odd", "convert_err_" + tag);
  auto v = load_entries((dir / "model.safetensors").string());
  edit(v);
  save_entries((dir / "model.safetensors").string(), v);
  return test::dry_run_error(dir);  // every check here happens before data is read
}

TEST(ConvertErrors, UnchangedCopyConverts) { EXPECT_EQ(convert_error([](auto&) {}, "none"), ""); }

TEST(ConvertErrors, ListsEveryUnknownName) {
  const std::string e = convert_error(
      [](std::vector<Entry>& v) {
        v.push_back({"model.language_model.layers.0.mlp.router_bias", "F32", {7}, std::vector<uint8_t>(28)});
        v.push_back({"extra_head.weight", "F32", {2}, std::vector<uint8_t>(8)});
      },
      "unknown");
  EXPECT_NE(e.find("2 tensor name(s) not in the qwen35moe contract"), std::string::npos) << e;
  EXPECT_NE(e.find("model.language_model.layers.0.mlp.router_bias"), std::string::npos) << e;
  EXPECT_NE(e.find("extra_head.weight"), std::string::npos) << e;
}

TEST(ConvertErrors, UnsupportedDtypeIsNamed) {
  const std::string e = convert_error(
      [](std::vector<Entry>& v) {
        for (Entry& t : v)
          if (t.name == "model.language_model.layers.0.linear_attn.A_log") t.dtype = "I16";  // same byte size as BF16
      },
      "dtype");
  EXPECT_NE(e.find("tensor 'model.language_model.layers.0.linear_attn.A_log': dtype I16 is not supported"),
            std::string::npos) << e;
}

TEST(ConvertErrors, MissingTensorIsNamed) {
  const std::string e = convert_error(
      [](std::vector<Entry>& v) {
        std::erase_if(v, [](const Entry& t) { return t.name == "model.language_model.layers.4.self_attn.k_norm.weight"; });
      },
      "missing");
  EXPECT_NE(e.find("blk.4.attn_k_norm.weight"), std::string::npos) << e;
}

TEST(ConvertErrors, ShapeMismatchIsNamed) {
  const std::string e = convert_error(
      [](std::vector<Entry>& v) {
        for (Entry& t : v)
          if (t.name == "model.language_model.layers.1.self_attn.q_norm.weight") t.shape = {4, 6};  // 24 elements
      },
      "shape");
  EXPECT_NE(e.find("self_attn.q_norm.weight': shape [4, 6], expected [24]"), std::string::npos) << e;
}

}  // namespace
