// config.json and tokenizer files of unexpected shape: every case is a tern::Error naming the file (never an
// nlohmann exception, an undefined lookup, a signed overflow or an allocation sized by a hostile number). The cases
// are the classes fuzz_hf_files looks for; before the checks each escaped as an nlohmann exception, hung, or (the
// head-dimension sums) overflowed, which the sanitizer build reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "convert/checkpoint_edit.h"
#include "convert/hf_config.h"
#include "convert/metadata.h"
#include "core/error.h"

namespace {

namespace fs = std::filesystem;
using namespace tern;
using convert::OJson;

const std::string kHf = std::string(TERN_FIXTURES_DIR) + "/hf/";

// parse_config on a fixture's config.json after `edit`: "" when it parses, else the Error's message. Any other
// exception fails the test.
std::string config_error(const std::string& fixture, const std::function<void(OJson&)>& edit) {
  OJson cfg = convert::read_json_file(kHf + fixture + "/config.json");
  edit(cfg);
  try {
    convert::parse_config(cfg, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConvertInput, ConfigValuesOfTheWrongTypeAreErrorsNamingTheFile) {
  ASSERT_EQ(config_error("odd", [](OJson&) {}), "");
  ASSERT_EQ(config_error("glm5-toy", [](OJson&) {}), "");
  for (const char* fx : {"odd", "glm5-toy"}) {
    std::string e = config_error(fx, [](OJson& c) { c["tie_word_embeddings"] = "yes"; });
    EXPECT_NE(e.find("config.json"), std::string::npos) << fx << ": " << e;
    e = config_error(fx, [](OJson& c) { c["model_type"] = 7; });
    EXPECT_NE(e.find("model_type"), std::string::npos) << fx << ": " << e;
  }
  EXPECT_NE(config_error("odd", [](OJson& c) { c = OJson::array(); }).find("not a JSON object"), std::string::npos);
}

// GLM-5's AutoConfig step ran on values no key check had seen yet: a layer count sized its indexer_types loop, and
// head-dimension sums and the skip offset could overflow.
TEST(ConvertInput, GlmConfigNumbersAreBoundedBeforeTheyAreUsed) {
  const int64_t big = int64_t{1} << 39, max = std::numeric_limits<int64_t>::max();
  std::string e = config_error("glm5-toy", [&](OJson& c) {
    c["num_hidden_layers"] = big;
    c.erase("indexer_types");
    c.erase("index_topk_pattern");
  });
  EXPECT_NE(e.find("num_hidden_layers"), std::string::npos) << e;
  e = config_error("glm5-toy", [&](OJson& c) {
    c["qk_nope_head_dim"] = max;
    c["qk_rope_head_dim"] = max;
  });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = config_error("glm5-toy", [&](OJson& c) {
    c.erase("indexer_types");
    c.erase("index_topk_pattern");
    c["index_skip_topk_offset"] = std::numeric_limits<int64_t>::min();
    c["index_topk_freq"] = 3;
  });
  EXPECT_EQ(e, "");  // every layer's i - offset + 1 is positive: a valid (if odd) full/shared pattern
  e = config_error("glm5-toy", [&](OJson& c) {
    c["moe_intermediate_size"] = big;
    c["n_shared_experts"] = big;
  });
  EXPECT_NE(e.find("n_shared_experts"), std::string::npos) << e;
}

// build_vocab on the odd checkpoint's files after edits to tokenizer.json / tokenizer_config.json.
std::string vocab_error(const std::function<void(OJson& tok, OJson& tok_cfg)>& edit, const std::string& tag) {
  const fs::path dir = test::copy_checkpoint("odd", "hf_input_" + tag);
  OJson tok = convert::read_json_file((dir / "tokenizer.json").string());
  OJson tok_cfg = convert::read_json_file((dir / "tokenizer_config.json").string());
  edit(tok, tok_cfg);
  std::ofstream((dir / "tokenizer.json").string()) << tok.dump();
  std::ofstream((dir / "tokenizer_config.json").string()) << tok_cfg.dump();
  std::string err;
  try {
    convert::Checkpoint ck;
    ck.dir = dir.string();
    ck.config_json = convert::read_json_file((dir / "config.json").string());
    ck.hp = convert::parse_config(ck.config_json, "config.json", &ck.hparams);
    convert::build_vocab(ck, {});
  } catch (const Error& e) {
    err = e.what();
  }
  fs::remove_all(dir);
  return err;
}

TEST(ConvertInput, TokenizerFilesOfUnexpectedShapeAreErrors) {
  ASSERT_EQ(vocab_error([](OJson&, OJson&) {}, "as_is"), "");
  // An added_tokens entry that is not an object, or has no id: refused with its name.
  std::string e = vocab_error([](OJson& tok, OJson&) { tok["added_tokens"].push_back(5); }, "not_object");
  EXPECT_NE(e.find("tokenizer"), std::string::npos) << e;
  e = vocab_error([](OJson& tok, OJson&) { tok["added_tokens"][0].erase("id"); }, "no_id");
  EXPECT_NE(e.find("added_tokens"), std::string::npos) << e;
  e = vocab_error([](OJson& tok, OJson&) { tok["added_tokens"][0]["special"] = "true"; }, "special");
  EXPECT_NE(e.find("tokenizer"), std::string::npos) << e;
  e = vocab_error([](OJson& tok, OJson&) { tok["post_processor"] = {{"type", "ByteLevel"}, {"processors", 3}}; },
                  "proc");
  EXPECT_EQ(e, "");
  e = vocab_error([](OJson& tok, OJson&) { tok["post_processor"] = {{"processors", OJson::array({1})}}; }, "proc2");
  EXPECT_NE(e.find("tokenizer"), std::string::npos) << e;
}

// The GGUF metadata step (a dry-run conversion of the odd checkpoint with its config.json edited): rope values of
// the wrong type or range are Errors naming the key, not an nlohmann exception or an out-of-range float-to-int cast.
std::string metadata_error(const std::function<void(OJson&)>& edit, const std::string& tag) {
  const fs::path dir = test::copy_checkpoint("odd", "hf_meta_" + tag);
  OJson cfg = convert::read_json_file((dir / "config.json").string());
  edit(cfg);
  std::ofstream((dir / "config.json").string()) << cfg.dump();
  return test::dry_run_error(dir);
}

TEST(ConvertInput, RopeValuesOfTheWrongTypeOrRangeAreErrors) {
  ASSERT_EQ(metadata_error([](OJson&) {}, "as_is"), "");
  for (const OJson& f : {OJson("half"), OJson(1e300), OJson(-0.5), OJson(0)}) {
    const std::string e = metadata_error([&](OJson& c) { c["rope_parameters"]["partial_rotary_factor"] = f; }, "prf");
    EXPECT_NE(e.find("partial_rotary_factor"), std::string::npos) << f.dump() << ": " << e;
  }
  for (const OJson& m : {OJson(3), OJson::array({1, "a", 1}), OJson::array({1, -1, 1})}) {
    const std::string e = metadata_error([&](OJson& c) { c["rope_parameters"]["mrope_section"] = m; }, "mrope");
    EXPECT_NE(e.find("mrope_section"), std::string::npos) << m.dump() << ": " << e;
  }
  const std::string e = metadata_error([](OJson& c) { c["rope_parameters"]["rope_theta"] = "large"; }, "theta");
  EXPECT_NE(e.find("rope_theta"), std::string::npos) << e;
}

}  // namespace
