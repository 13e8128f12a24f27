// GGUF reader and model summary vs the reference: fixtures written by gguf-py (tools/make_test_ggufs.py), whose
// <name>.expected.json holds what gguf.GGUFReader reads back and statistics computed independently in Python.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/model_summary.h"

using namespace tern;
using nlohmann::json;

namespace {

std::string fixture(const std::string& name) { return std::string(TERN_FIXTURES_DIR) + "/gguf/" + name; }

json load_expected(const std::string& name) {
  std::ifstream in(fixture(name + ".expected.json"));
  if (!in) throw std::runtime_error("missing fixture " + name + ".expected.json (run tools/make_test_ggufs.py)");
  return json::parse(in);
}

// CRC-32 (IEEE, as zlib.crc32) written here so tensor bytes can be compared with the Python side.
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return ~c;
}

void check_value(const gguf::Value& v, const json& e) {
  SCOPED_TRACE(std::string(v.key()));
  ASSERT_EQ(static_cast<int>(v.type()), e["type"].get<int>());
  if (v.is_array()) {
    ASSERT_EQ(static_cast<int>(v.array_type()), e["elem_type"].get<int>());
    ASSERT_EQ(v.array_size(), e["len"].get<uint64_t>());
    if (v.array_size() == 0) return;
    if (v.array_type() == gguf::ValueType::String)
      EXPECT_EQ(v.array_str(0), e["first"].get<std::string>());
    else if (v.array_type() == gguf::ValueType::F32 || v.array_type() == gguf::ValueType::F64)
      EXPECT_EQ(v.array_f64(0), e["first"].get<double>());  // exact: float -> double is lossless on both sides
    else
      EXPECT_EQ(v.array_i64(0), e["first"].get<int64_t>());
    return;
  }
  switch (v.type()) {
    case gguf::ValueType::String: EXPECT_EQ(v.as_str(), e["value"].get<std::string>()); break;
    case gguf::ValueType::Bool: EXPECT_EQ(v.as_bool(), e["value"].get<bool>()); break;
    case gguf::ValueType::F32: case gguf::ValueType::F64:
      EXPECT_EQ(v.to_f64(), e["value"].get<double>());  // exact: both sides widen the same stored float
      break;
    default: EXPECT_EQ(v.to_i64(), e["value"].get<int64_t>()); break;
  }
}

void check_file(const std::string& name) {
  const json e = load_expected(name);
  const gguf::File f = gguf::File::open(fixture(name + ".gguf"));
  EXPECT_EQ(f.file_size(), e["file_bytes"].get<uint64_t>());
  EXPECT_EQ(f.version(), e["version"].get<uint32_t>());
  EXPECT_EQ(f.alignment(), e["alignment"].get<uint64_t>());
  const auto& order = e["kv_order"];
  ASSERT_EQ(f.metadata().size(), order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string key = order[i].get<std::string>();
    EXPECT_EQ(f.metadata()[i].key(), key) << "metadata order";
    const gguf::Value* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    check_value(*v, e["kv"][key]);
  }
  const auto& ts = e["tensors"];
  ASSERT_EQ(f.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const gguf::TensorInfo& t = f.tensors()[i];
    const json& et = ts[i];
    SCOPED_TRACE(et["name"].get<std::string>());
    EXPECT_EQ(t.name, et["name"].get<std::string>());
    EXPECT_EQ(static_cast<int>(t.type), et["type"].get<int>());
    const auto ne = et["ne"].get<std::vector<int64_t>>();
    ASSERT_EQ(t.n_dims, ne.size());
    for (size_t d = 0; d < ne.size(); ++d) EXPECT_EQ(t.ne[d], ne[d]);
    EXPECT_EQ(t.n_elements, et["n_elements"].get<int64_t>());
    EXPECT_EQ(t.n_bytes, et["n_bytes"].get<uint64_t>());
    EXPECT_EQ(t.file_offset, et["file_offset"].get<uint64_t>());
    EXPECT_EQ(crc32(t.data, t.n_bytes), et["crc32"].get<uint32_t>());
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
}

void check_summary(const std::string& name) {
  const json e = load_expected(name);
  const gguf::File f = gguf::File::open(fixture(name + ".gguf"));
  const json s = gguf::to_json(gguf::summarize(f));
  for (const char* k : {"architecture", "n_layer", "n_embd", "n_head", "n_head_kv", "n_expert", "n_expert_used",
                        "n_vocab", "layer_kinds", "n_params", "n_params_active", "bytes_per_token", "tensor_types",
                        "n_tensors", "file_bytes"})
    EXPECT_EQ(s[k], e[k]) << k;
}

}  // namespace

TEST(GgufFixtures, Qwen35MoeMatchesGgufPy) { check_file("tiny-qwen35moe"); }
TEST(GgufFixtures, LlamaMatchesGgufPy) { check_file("tiny-llama"); }
TEST(ModelSummary, Qwen35MoeMatchesPythonStats) { check_summary("tiny-qwen35moe"); }
TEST(ModelSummary, LlamaMatchesPythonStats) { check_summary("tiny-llama"); }

TEST(GgufFixtures, TypedGetters) {
  const gguf::File f = gguf::File::open(fixture("tiny-qwen35moe.gguf"));
  EXPECT_EQ(f.get_str("general.architecture"), "qwen35moe");
  EXPECT_EQ(f.get_u32("qwen35moe.block_count"), 4u);
  EXPECT_FALSE(f.opt_u32("qwen35moe.no_such_key").has_value());
  EXPECT_EQ(f.get_arr("tokenizer.ggml.tokens").array_str(1), "tok1");
  // Wrong type: the message names the file and the key.
  try {
    (void)f.get_u32("general.architecture");
    FAIL() << "expected an Error";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("tiny-qwen35moe.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("general.architecture"), std::string::npos) << m;
  }
  EXPECT_THROW((void)f.get_str("qwen35moe.block_count"), Error);
  EXPECT_THROW((void)f.opt_str("qwen35moe.block_count"), Error);
  EXPECT_THROW((void)f.get_u32("missing.key"), Error);
  EXPECT_THROW((void)f.get_tensor("missing.weight"), Error);
  EXPECT_THROW((void)f.get_arr("tokenizer.ggml.tokens").array_str(64), Error);  // index out of range
}
