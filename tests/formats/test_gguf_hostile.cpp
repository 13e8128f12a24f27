// Hostile GGUF files: every malformed input must end in tern::Error with a useful message -- never a crash,
// a hang or an allocation sized by an unchecked number (the ASan/UBSan build runs these too).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "gguf_test_util.h"

using namespace tern;
using namespace tern::gguf;
using tern::gguf::test::Raw;

namespace {

constexpr uint32_t kF32 = 0, kQ8_0 = 8;

// Expects parse to throw Error whose message contains every one of `parts`.
void expect_error(const std::vector<uint8_t>& b, std::initializer_list<const char*> parts) {
  try {
    (void)test::parse(b);
    ADD_FAILURE() << "parsed without error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("t.gguf: ", 0), 0u) << m;  // every message names the file first
    for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;  // one line
  }
}

// A small valid file from the writer: a few keys of different types and three tensors. The last tensor's size
// is a multiple of the alignment, so the file ends exactly where its data ends.
std::vector<uint8_t> small_valid() {
  Writer w;
  w.add_str("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "bc", ""});
  w.add_array("x.f", std::vector<float>{1.5f, -2.0f});
  w.add(std::string("x.nested"), Node::array(ValueType::Array, {Node::array_of_bool({true, false}),
                                                                 Node::array_of_bool({})}));
  std::vector<uint8_t> a(4 * 3, 1), q(34 * 2, 2), c(4 * 8, 3);
  w.add_tensor("a", quant::Type::F32, {3}, a);
  w.add_tensor("q", quant::Type::Q8_0, {32, 2}, q);
  w.add_tensor("c", quant::Type::F32, {8}, c);
  return w.serialize();
}

std::vector<uint8_t> read_fixture(const std::string& name) {
  std::ifstream in(std::string(TERN_FIXTURES_DIR) + "/gguf/" + name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Every strict prefix shorter than the end of the last tensor's data must throw; longer ones hold everything.
void truncate_everywhere(const std::vector<uint8_t>& full) {
  const File f = test::parse(full);
  uint64_t data_end = 0;
  for (const auto& t : f.tensors()) data_end = std::max(data_end, t.file_offset + t.n_bytes);
  for (size_t n = 0; n < full.size(); ++n) {
    // A heap copy of exactly n bytes, so ASan catches any read past the prefix.
    std::unique_ptr<uint8_t[]> cut(new uint8_t[n > 0 ? n : 1]);
    std::memcpy(cut.get(), full.data(), n);
    if (n < data_end) {
      EXPECT_THROW((void)File::parse("t.gguf", cut.get(), n), Error) << "prefix of " << n << " bytes";
    } else {
      EXPECT_NO_THROW((void)File::parse("t.gguf", cut.get(), n)) << "prefix of " << n << " bytes";
    }
  }
}

}  // namespace

TEST(GgufHostile, SmallValidFileParses) {
  const auto b = small_valid();
  const File f = test::parse(b);
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.get_arr("x.nested").as_array().arrays[1].array_size(), 0u);
}

TEST(GgufHostile, TruncationAtEveryByte) { truncate_everywhere(small_valid()); }
TEST(GgufHostile, TruncationAtEveryByteOfFixture) { truncate_everywhere(read_fixture("tiny-llama.gguf")); }

// Flipping any byte to a few values never crashes: the result parses or throws Error.
TEST(GgufHostile, ByteCorruptionNeverCrashes) {
  const auto full = small_valid();
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x7f}, uint8_t{0x80}, static_cast<uint8_t>(full[i] + 1)}) {
      auto b = full;
      b[i] = v;
      try {
        (void)test::parse(b);
      } catch (const Error&) {
      }
    }
  }
}

TEST(GgufHostile, HeaderBasics) {
  expect_error({}, {"truncated", "magic"});
  expect_error(Raw().u32(0x46554748).u32(3).u64(0).u64(0).b, {"not a GGUF file"});
  expect_error(Raw().header(0, 0, 1).b, {"version 1 is not supported"});
  expect_error(Raw().header(0, 0, 4).b, {"unsupported GGUF version 4"});
  expect_error(Raw().header(0, 0, 0).b, {"unsupported GGUF version 0"});
  expect_error(Raw().header(0, 0, 0x03000000).b, {"byte-swapped"});
  const auto v2 = Raw().header(0, 0, 2).b;
  EXPECT_NO_THROW((void)test::parse(v2));  // v2: same layout as v3
}

TEST(GgufHostile, AbsurdCountsFailFast) {
  const auto t0 = std::chrono::steady_clock::now();
  expect_error(Raw().header(1ull << 63, 0).b, {"tensors", "9223372036854775808"});
  expect_error(Raw().header(0, 1ull << 60).b, {"metadata entries"});
  expect_error(Raw().header(0, ~0ull).b, {"metadata entries"});
  // Slightly too many for the bytes that follow.
  expect_error(Raw().header(0, 2).kv_u32("a", 1).b, {"metadata entries"});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 0.5);  // generous: each check is O(1); a loop or reserve over 2^60 would take far longer
}

TEST(GgufHostile, AbsurdLengths) {
  expect_error(Raw().header(0, 1).u64(1ull << 62).zeros(16).b, {"metadata entry 0 key", "exceeds the limit"});
  expect_error(Raw().header(0, 1).u64(100).zeros(16).b, {"truncated", "metadata entry 0 key"});
  expect_error(Raw().header(0, 1).str("k").u32(8).u64(1ull << 62).zeros(8).b, {"key 'k'", "exceeds the limit"});
  expect_error(Raw().header(0, 1).str("k").u32(8).u64((1ull << 30) + 1).zeros(8).b, {"key 'k'", "exceeds the limit"});
  expect_error(Raw().header(0, 1).str("k").u32(8).u64(1000).zeros(8).b, {"truncated", "key 'k'"});
  expect_error(Raw().header(0, 1).str(std::string(70000, 'k')).u32(4).u32(1).b, {"exceeds the limit of 65536"});
  // Array lengths: over the limit, and within it but past the end of the file (for each element kind).
  expect_error(Raw().header(0, 1).str("k").u32(9).u32(4).u64(1ull << 40).zeros(8).b, {"array length", "limit"});
  expect_error(Raw().header(0, 1).str("k").u32(9).u32(4).u64(1ull << 29).zeros(8).b, {"truncated", "key 'k'"});
  expect_error(Raw().header(0, 1).str("k").u32(9).u32(8).u64(1ull << 29).zeros(8).b, {"truncated", "key 'k'"});
  expect_error(Raw().header(0, 1).str("k").u32(9).u32(9).u64(1ull << 29).zeros(8).b, {"truncated", "key 'k'"});
  expect_error(Raw().header(0, 1).str("k").u32(9).u32(8).u64(1).u64(1ull << 62).zeros(8).b, {"key 'k'[0]", "limit"});
  // Tensor name length.
  expect_error(Raw().header(1, 0).u64(1ull << 62).zeros(32).b, {"tensor 0 name", "exceeds the limit"});
}

TEST(GgufHostile, NestedArrays) {
  auto nested = [](int depth) {
    Raw r;
    r.header(0, 1).str("k").u32(9);
    for (int d = 1; d < depth; ++d) r.u32(9).u64(1);
    return r.u32(4).u64(1).u32(7).b;  // innermost: one u32
  };
  const auto deepest = nested(kMaxArrayDepth);
  const File ok = test::parse(deepest);
  EXPECT_EQ(ok.get("k").array_type(), ValueType::Array);
  expect_error(nested(kMaxArrayDepth + 1), {"key 'k'", "nested deeper than 8"});
  // Deep nesting of the maximum supported length runs out of bytes instead of recursing forever.
  Raw r;
  r.header(0, 1).str("k").u32(9);
  for (int d = 0; d < 100000; ++d) r.u32(9).u64(1);
  expect_error(r.b, {"nested deeper"});
  // Many small inner arrays: capped in total (each costs far more memory than its 12 bytes of file).
  Raw m;
  m.header(0, 1).str("k").u32(9).u32(9).u64(kMaxNestedArrays + 1);
  for (uint64_t i = 0; i <= kMaxNestedArrays; ++i) m.u32(4).u64(0);
  expect_error(m.b, {"key 'k'", "nested arrays"});
}

TEST(GgufHostile, UnknownTypes) {
  expect_error(Raw().header(0, 1).str("k").u32(13).u32(0).b, {"key 'k' type", "unknown value type id 13"});
  expect_error(Raw().header(0, 1).str("k").u32(9).u32(99).u64(0).b, {"array element type", "unknown value type id 99"});
  for (uint32_t id : {4u, 5u, 31u, 40u, 1000u, 0xffffffffu})  // 4, 5, 31..33: removed from ggml
    expect_error(Raw().header(1, 0).tensor("w", {32}, id, 0).pad(32).zeros(128).b, {"tensor 'w'", "unknown ggml type id"});
}

TEST(GgufHostile, Shapes) {
  expect_error(Raw().header(1, 0).tensor("w", {1, 1, 1, 1, 1}, kF32, 0).pad(32).b, {"tensor 'w'", "5 dimensions"});
  expect_error(Raw().header(1, 0).tensor("w", {4, -1}, kF32, 0).pad(32).b, {"tensor 'w'", "dimension 1 is -1"});
  expect_error(Raw().header(1, 0).tensor("w", {1ll << 32, 1ll << 32}, kF32, 0).pad(32).b, {"tensor 'w'", "2^63"});
  expect_error(Raw().header(1, 0).tensor("w", {1ll << 62, 2}, kF32, 0).pad(32).b, {"tensor 'w'", "2^63"});
  // Fits in int64 elements but not in bytes.
  expect_error(Raw().header(1, 0).tensor("w", {1ll << 62}, kF32, 0).pad(32).b, {"tensor 'w'", "2^64 bytes"});
  expect_error(Raw().header(1, 0).tensor("w", {33}, kQ8_0, 0).pad(32).zeros(64).b, {"tensor 'w'", "block size 32"});
  // Zero-sized dimensions are allowed (as in ggml): no bytes, no data needed.
  const auto empty = Raw().header(1, 0).tensor("w", {0, 7}, kF32, 0).pad(32).b;
  const File f = test::parse(empty);
  EXPECT_EQ(f.tensors()[0].n_bytes, 0u);
  expect_error(Raw().header(1, 0).tensor(std::string(64, 'n'), {4}, kF32, 0).pad(32).zeros(16).b, {"limit is 63"});
  expect_error(Raw().header(1, 0).tensor("", {4}, kF32, 0).pad(32).zeros(16).b, {"empty name"});
  expect_error(Raw().header(0, 1).str("").u32(4).u32(1).b, {"empty key"});
}

TEST(GgufHostile, Offsets) {
  // Past the end, by one byte.
  expect_error(Raw().header(1, 0).tensor("blk.3.ffn_down_exps.weight", {4}, kF32, 0).pad(32).zeros(15).b,
               {"tensor 'blk.3.ffn_down_exps.weight': data [offset 0, 16 bytes] extends past end of file (size"});
  // offset + size wraps around 2^64.
  expect_error(Raw().header(1, 0).tensor("w", {8}, kF32, ~0ull - 31).pad(32).zeros(64).b, {"tensor 'w'", "past end"});
  expect_error(Raw().header(1, 0).tensor("w", {4}, kF32, 16).pad(32).zeros(64).b, {"tensor 'w'", "not a multiple of the alignment 32"});
  // Overlap: b starts inside a.
  expect_error(Raw().header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(128).b,
               {"overlaps tensor"});
  // The data section itself starts past the end of the file (header not padded).
  expect_error(Raw().header(1, 0).tensor("w", {0}, kF32, 0).b, {"data section starts at offset"});
  // Out-of-order, non-overlapping tensors with a gap are fine.
  const auto gap = Raw().header(2, 0).tensor("a", {8}, kF32, 64).tensor("b", {8}, kF32, 0).pad(32).zeros(96).b;
  const File f = test::parse(gap);
  EXPECT_EQ(f.get_tensor("a").offset, 64u);
}

TEST(GgufHostile, Duplicates) {
  expect_error(Raw().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, {"duplicate key 'k'"});
  expect_error(Raw().header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).zeros(64).b,
               {"duplicate tensor name 'w'"});
}

TEST(GgufHostile, Alignment) {
  for (uint32_t a : {0u, 3u, 48u, 0x80000001u})
    expect_error(Raw().header(0, 1).kv_u32(kAlignmentKey, a).b, {"general.alignment", "power of two"});
  expect_error(Raw().header(0, 1).str(kAlignmentKey).u32(10).u64(64).b, {"general.alignment", "expected u32"});
  // A valid non-default alignment moves the data section and constrains offsets.
  Raw r;
  r.header(1, 1).kv_u32(kAlignmentKey, 64).tensor("w", {4}, kF32, 0).pad(64).zeros(16);
  const File f = test::parse(r.b);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  expect_error(Raw().header(1, 1).kv_u32(kAlignmentKey, 64).tensor("w", {4}, kF32, 32).pad(64).zeros(96).b,
               {"not a multiple of the alignment 64"});
}

TEST(GgufHostile, UnprintableNamesStayOneLine) {
  expect_error(Raw().header(0, 2).kv_u32("a\nb", 1).kv_u32("a\nb", 2).b, {"duplicate key 'a\\x0ab'"});
}
