// gguf::Writer: what it writes reads back through tern's reader with every value type, nested arrays, tensors
// and alignments; its byte layout matches a hand-built file; write() never leaves a partial file behind.
// (Interop with gguf-py and llama.cpp's reader: tests/shell/gguf_writer_interop.sh.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/model_summary.h"
#include "gguf_test_util.h"

using namespace tern;
using namespace tern::gguf;
namespace fs = std::filesystem;

namespace {

// One file with a key of every type, nested arrays and tensors of several types; used here and, through
// WriterInterop.WriteSamples, by the Python / llama.cpp interop script.
Writer sample_writer(uint32_t alignment, bool nested) {
  Writer w(alignment);
  w.add_str("general.architecture", "llama");
  w.add_str("general.name", "tern writer sample \xc3\xa9");
  w.add_u8("t.u8", 200);
  w.add_i8("t.i8", -100);
  w.add_u16("t.u16", 60000);
  w.add_i16("t.i16", -30000);
  w.add_u32("t.u32", 4000000000u);
  w.add_i32("t.i32", -2000000000);
  w.add_f32("t.f32", 0.15625f);
  w.add_bool("t.bool", true);
  w.add_u64("t.u64", 18000000000000000000ull);
  w.add_i64("t.i64", -9000000000000000000ll);
  w.add_f64("t.f64", -1.0 / 3.0);
  w.add_array("t.arr_u8", std::vector<uint8_t>{1, 2, 255});
  w.add_array("t.arr_i32", std::vector<int32_t>{-1, 0, 7});
  w.add_array("t.arr_f32", std::vector<float>{0.5f, -1.25f});
  w.add_array("t.arr_f64", std::vector<double>{1e300, -2.5});
  w.add_array("t.arr_u64", std::vector<uint64_t>{1, 1ull << 40});
  w.add_array("t.arr_i16", std::vector<int16_t>{-5, 5});
  w.add_array("t.arr_bool", std::vector<bool>{true, false, true});
  w.add_array("t.arr_str", std::vector<std::string>{"alpha", "", "\xe4\xb8\xad"});
  if (nested)  // arrays of arrays: legal GGUF, read by gguf-py; ggml's own reader rejects them
    w.add("t.arr_arr", Node::array(ValueType::Array, {Node::array_of<int32_t>(std::vector<int32_t>{1, 2}),
                                                     Node::array_of<int32_t>(std::vector<int32_t>{3})}));
  w.add_u32("llama.block_count", 1);
  std::vector<float> a(32 * 3);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f - 7.0f;
  w.add_tensor("blk.0.attn_norm.weight", quant::Type::F32, {32, 3},
               std::span(reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4));
  std::vector<uint8_t> q(34 * 4);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 7 + 3);
  w.add_tensor("blk.0.ffn_up.weight", quant::Type::Q8_0, {64, 2}, q);
  std::vector<uint8_t> h(2 * 5, 0x3c);  // f16 values of 1.00390625
  w.add_tensor("output_norm.weight", quant::Type::F16, {5}, h);
  return w;
}

std::string temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("tern_gguf_writer_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d.string();
}

}  // namespace

TEST(GgufWriter, RoundTripEveryType) {
  for (uint32_t alignment : {32u, 64u, 1u, 256u}) {
    SCOPED_TRACE(alignment);
    const auto bytes = sample_writer(alignment, true).serialize();
    const File f = test::parse(bytes);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.get("t.u8").as_u8(), 200);
    EXPECT_EQ(f.get("t.i8").as_i8(), -100);
    EXPECT_EQ(f.get("t.u16").as_u16(), 60000);
    EXPECT_EQ(f.get("t.i16").as_i16(), -30000);
    EXPECT_EQ(f.get("t.u32").as_u32(), 4000000000u);
    EXPECT_EQ(f.get("t.i32").as_i32(), -2000000000);
    EXPECT_EQ(f.get("t.f32").as_f32(), 0.15625f);
    EXPECT_EQ(f.get("t.bool").as_bool(), true);
    EXPECT_EQ(f.get("t.u64").as_u64(), 18000000000000000000ull);
    EXPECT_EQ(f.get("t.i64").as_i64(), -9000000000000000000ll);
    EXPECT_EQ(f.get("t.f64").as_f64(), -1.0 / 3.0);
    EXPECT_EQ(f.get("t.arr_u8").to_i64_vector(), (std::vector<int64_t>{1, 2, 255}));
    EXPECT_EQ(f.get("t.arr_i32").to_i64_vector(), (std::vector<int64_t>{-1, 0, 7}));
    EXPECT_EQ(f.get("t.arr_f32").to_f64_vector(), (std::vector<double>{0.5, -1.25}));
    EXPECT_EQ(f.get("t.arr_f64").to_f64_vector(), (std::vector<double>{1e300, -2.5}));
    EXPECT_EQ(f.get("t.arr_u64").to_i64_vector(), (std::vector<int64_t>{1, 1ll << 40}));
    EXPECT_EQ(f.get("t.arr_i16").to_i64_vector(), (std::vector<int64_t>{-5, 5}));
    EXPECT_EQ(f.get("t.arr_bool").to_i64_vector(), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_EQ(f.get("t.arr_str").array_str(2), "\xe4\xb8\xad");
    EXPECT_EQ(f.get("t.arr_str").array_str(1), "");
    const Array& nested = f.get("t.arr_arr").as_array();
    ASSERT_EQ(nested.arrays.size(), 2u);
    EXPECT_EQ(nested.arrays[0].to_i64_vector(), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(nested.arrays[1].to_i64_vector(), (std::vector<int64_t>{3}));
    // Strict getters refuse other types; converting ones range-check.
    EXPECT_THROW((void)f.get("t.u8").as_i8(), Error);
    EXPECT_THROW((void)f.get("t.u64").to_i64(), Error);
    EXPECT_THROW((void)f.get("t.i8").to_u64(), Error);
    EXPECT_THROW((void)f.get_u32("t.u64"), Error);
    EXPECT_EQ(f.get_u32("t.u16"), 60000u);
    ASSERT_EQ(f.tensors().size(), 3u);
    const TensorInfo& t = f.get_tensor("blk.0.attn_norm.weight");
    EXPECT_EQ(t.n_dims, 2u);
    EXPECT_EQ(t.ne[0], 32);
    EXPECT_EQ(t.ne[1], 3);
    EXPECT_EQ(t.n_bytes, 32u * 3 * 4);
    float x;
    std::memcpy(&x, t.data + 4 * 95, 4);
    EXPECT_EQ(x, 95 * 0.5f - 7.0f);
    const TensorInfo& q = f.get_tensor("blk.0.ffn_up.weight");
    EXPECT_EQ(q.n_bytes, 34u * 4);
    EXPECT_EQ(q.data[135], static_cast<uint8_t>(135 * 7 + 3));
    for (const auto& ti : f.tensors()) EXPECT_EQ(ti.file_offset % alignment, 0u) << ti.name;
  }
}

// The writer's bytes equal a file assembled by hand from the format description (header, kv, infos, padding).
TEST(GgufWriter, LayoutMatchesHandBuiltFile) {
  Writer w;
  w.add_u32("a", 7);
  w.add_array("s", std::vector<std::string>{"xy"});
  const std::vector<uint8_t> data(12, 9);
  w.add_tensor("w", quant::Type::F32, {3}, data);
  test::Raw r;
  r.header(1, 2).kv_u32("a", 7).str("s").u32(9).u32(8).u64(1).str("xy");
  r.tensor("w", {3}, 0, 0).pad(32);
  r.b.insert(r.b.end(), data.begin(), data.end());
  r.pad(32);
  EXPECT_EQ(w.serialize(), r.b);
}

TEST(GgufWriter, RejectsBadInput) {
  Writer w;
  w.add_u32("k", 1);
  EXPECT_THROW(w.add_u32("k", 2), Error);
  EXPECT_THROW(w.add_u32("", 2), Error);
  EXPECT_THROW(Writer(3), Error);
  EXPECT_THROW(Writer(0), Error);
  const std::vector<uint8_t> b(34);
  EXPECT_THROW(w.add_tensor("t", quant::Type::Q8_0, {33}, b), Error);         // not a whole block
  EXPECT_THROW(w.add_tensor("t", quant::Type::Q8_0, {32, 2}, b), Error);      // wrong byte count
  EXPECT_THROW(w.add_tensor("t", quant::Type::F32, {1, 1, 1, 1, 1}, b), Error);  // 5 dims
  EXPECT_THROW(w.add_tensor(std::string(64, 'n'), quant::Type::Q8_0, {32}, b), Error);
  w.add_tensor("t", quant::Type::Q8_0, {32}, b);
  EXPECT_THROW(w.add_tensor("t", quant::Type::Q8_0, {32}, b), Error);
  EXPECT_THROW(Node::array(ValueType::U32, {Node::u8(1)}), Error);
}

TEST(GgufWriter, WriteIsAtomic) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/m.gguf";
  sample_writer(32, true).write(path);
  const File f = File::open(path);
  EXPECT_EQ(f.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(f.file_size(), fs::file_size(path));
  // Only the final file is left: no temporary.
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename() == "m.gguf" ? 0 : 1;
  EXPECT_EQ(n, 0u);
  // An unwritable destination throws, naming it, and leaves nothing behind.
  EXPECT_THROW(sample_writer(32, true).write(dir + "/no/such/dir/m.gguf"), Error);
  fs::remove_all(dir);
}

// Writes the interop samples when TERN_GGUF_INTEROP_DIR is set (tests/shell/gguf_writer_interop.sh).
TEST(WriterInterop, WriteSamples) {
  const char* dir = std::getenv("TERN_GGUF_INTEROP_DIR");
  if (!dir) GTEST_SKIP() << "TERN_GGUF_INTEROP_DIR not set (run by tests/shell/gguf_writer_interop.sh)";
  sample_writer(32, true).write(std::string(dir) + "/nested.gguf");
  sample_writer(32, false).write(std::string(dir) + "/flat.gguf");
  sample_writer(64, false).write(std::string(dir) + "/align64.gguf");
}

TEST(ModelSummary, RecurrentLayersArrayAndErrors) {
  auto base = [](Writer& w) {
    w.add_str("general.architecture", "qwen35moe");
    w.add_u32("qwen35moe.block_count", 5);
    w.add_u32("qwen35moe.nextn_predict_layers", 1);
  };
  {
    Writer w;
    base(w);
    w.add_array("qwen35moe.attention.recurrent_layers", std::vector<bool>{true, false, true, true, false});
    const auto b = w.serialize();
    const ModelSummary s = summarize(test::parse(b));
    ASSERT_EQ(s.layer_kinds.size(), 5u);
    EXPECT_EQ(s.layer_kinds[0], LayerKind::kRecurrent);
    EXPECT_EQ(s.layer_kinds[1], LayerKind::kAttention);
    EXPECT_EQ(s.layer_kinds[3], LayerKind::kRecurrent);
    EXPECT_EQ(s.layer_kinds[4], LayerKind::kNextN);  // the last nextn_predict_layers blocks
  }
  {
    Writer w;
    base(w);  // no interval key: llama.cpp's default of 4
    const auto b = w.serialize();
    const ModelSummary s = summarize(test::parse(b));
    EXPECT_EQ(s.layer_kinds[3], LayerKind::kAttention);
    EXPECT_EQ(s.layer_kinds[2], LayerKind::kRecurrent);
  }
  {
    Writer w;
    base(w);
    w.add_u32("qwen35moe.full_attention_interval", 0);
    const auto b = w.serialize();
    EXPECT_THROW((void)summarize(test::parse(b)), Error);
  }
  {
    Writer w;
    base(w);
    w.add_str("qwen35moe.embedding_length", "wide");  // wrong type: an error naming the key
    const auto b = w.serialize();
    EXPECT_THROW((void)summarize(test::parse(b)), Error);
  }
  {
    Writer w;  // a per-layer table sized by a hostile block_count must not be allocated
    w.add_str("general.architecture", "qwen35moe");
    w.add_u32("qwen35moe.block_count", 4000000000u);
    const auto b = w.serialize();
    EXPECT_THROW((void)summarize(test::parse(b)), Error);
  }
  {
    Writer w;
    base(w);
    w.add_bool("qwen35moe.attention.recurrent_layers", false);  // scalar form: every main layer
    const auto b = w.serialize();
    const ModelSummary s = summarize(test::parse(b));
    EXPECT_EQ(s.layer_kinds[0], LayerKind::kAttention);
    EXPECT_EQ(s.layer_kinds[4], LayerKind::kNextN);
  }
  {
    Writer w;
    w.add_str("general.architecture", "mystery");
    w.add_u32("mystery.expert_count", 2);
    w.add_u32("mystery.expert_used_count", 3);  // more used than exist
    const auto b = w.serialize();
    EXPECT_THROW((void)summarize(test::parse(b)), Error);
  }
}
