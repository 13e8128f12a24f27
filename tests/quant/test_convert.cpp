// quant/convert: reference (de)quantization of every supported ggml type against committed vectors from
// independent implementations (tools/gen_quant_vectors.py: gguf-py for dequantization and the legacy
// quantizers, llama.cpp's libggml for the K-quant / IQ4 / Q8_1 / Q8_K quantizers), plus round-trip error
// bounds, F16/BF16 exhaustiveness, and bad-input behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/convert.h"

using namespace tern;
using namespace tern::quant;

namespace {

const std::string kDir = std::string(TERN_FIXTURES_DIR) + "/quant/";

std::vector<uint8_t> read_bytes(const std::string& name) {
  std::ifstream f(kDir + name, std::ios::binary);
  if (!f) throw std::runtime_error("missing fixture " + kDir + name);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> read_floats(const std::string& name) {
  const auto b = read_bytes(name);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

const nlohmann::json& index_json() {
  static const nlohmann::json j = [] {
    std::ifstream f(kDir + "index.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

const char* kTypeNames[] = {"f32",  "f16",  "bf16", "q4_0", "q4_1", "q5_0",   "q5_1",  "q8_0", "q8_1",
                            "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq4_nl", "iq4_xs"};

Type type_of(const std::string& name) {
  const auto t = type_from_name(name);
  if (!t) throw std::runtime_error("unknown type " + name);
  return *t;
}

// First index where two float arrays differ bitwise (NaN payloads included), or -1.
int64_t first_bit_diff(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, 4) != 0) return i;
  return -1;
}

class ConvertType : public ::testing::TestWithParam<const char*> {
 protected:
  std::string name() const { return GetParam(); }
  const nlohmann::json& entry() const { return index_json()["types"][name()]; }
  Type type() const { return type_of(name()); }
};

// Bit-exact: decoding random block bytes (every code value, random finite scales) must give exactly the
// floats gguf-py (or ggml, for Q8_1/Q8_K) computes; dequantization is a fixed sequence of float products.
TEST_P(ConvertType, DequantizeRandomBlocksBitExact) {
  const auto& e = entry();
  const auto q = read_bytes(e["random_quant"]);
  const auto want = read_floats(e["random_dequant"]);
  const int64_t n = e["random_n"];
  ASSERT_EQ(q.size(), row_size(traits(type()), n));
  ASSERT_EQ(static_cast<int64_t>(want.size()), n);
  std::vector<float> got(n + 1, 12345.f);  // one guard element
  dequantize_row(type(), q.data(), got.data(), n);
  EXPECT_EQ(got[n], 12345.f) << "wrote past the end";
  const int64_t i = first_bit_diff(got.data(), want.data(), n);
  EXPECT_EQ(i, -1) << name() << " element " << i << ": got " << got[i] << " want " << want[i] << " ("
                   << e["random_dequant_source"] << ")";
}

// Bit-exact: decoding ggml's own encodings of the fixture rows (real scale distributions, zero blocks).
TEST_P(ConvertType, DequantizeReferenceBytesBitExact) {
  const auto& e = entry();
  if (!e.contains("quant")) GTEST_SKIP() << name() << ": no reference encoding committed: " << e["quant_source"];
  const auto q = read_bytes(e["quant"]);
  const auto want = read_floats(e["dequant"]);
  const auto n = static_cast<int64_t>(want.size());
  std::vector<float> got(n);
  dequantize_row(type(), q.data(), got.data(), n);
  const int64_t i = first_bit_diff(got.data(), want.data(), n);
  EXPECT_EQ(i, -1) << name() << " element " << i << ": got " << got[i] << " want " << want[i];
}

// Byte-identical: quantizing each fixture row must reproduce ggml's reference encoding exactly.
TEST_P(ConvertType, QuantizeMatchesReferenceBytes) {
  const auto& e = entry();
  if (!e.contains("quant")) GTEST_SKIP() << name() << ": no reference encoding committed: " << e["quant_source"];
  const auto want = read_bytes(e["quant"]);
  const auto x = read_floats(index_json()["input"]);
  const auto& tt = traits(type());
  size_t off_x = 0, off_q = 0;
  for (const auto& row : index_json()["rows"]) {
    const int64_t n = row["n"];
    const size_t bytes = row_size(tt, n);
    std::vector<uint8_t> got(bytes + 8, 0xA5);  // guard bytes after the row
    quantize_row_ref(type(), x.data() + off_x, got.data(), n);
    for (size_t g = bytes; g < got.size(); ++g) ASSERT_EQ(got[g], 0xA5) << "wrote past the end";
    ASSERT_LE(off_q + bytes, want.size());
    for (size_t b = 0; b < bytes; ++b) {
      if (got[b] != want[off_q + b]) {
        ADD_FAILURE() << name() << ", row '" << row["desc"].get<std::string>() << "': first differing byte " << b
                      << " (block " << b / tt.type_size << ", offset " << b % tt.type_size << "): got "
                      << int(got[b]) << " want " << int(want[off_q + b]) << " (" << e["quant_source"] << ")";
        break;
      }
    }
    off_x += static_cast<size_t>(n);
    off_q += bytes;
  }
  EXPECT_EQ(off_q, want.size());
}

// Round-trip sanity on Gaussian data: relative RMS error ||x - deq(q(x))|| / ||x|| below a bound per type.
// Bound: a b-bit code with step ~ 2*amax/2^b has RMS error step/sqrt(12); with a block amax of ~2.5 sigma
// that is ~1.44/2^b relative; we allow twice that (2.9/2^b). F16/BF16: half an ulp relative, 2^-11 / 2^-8.
TEST_P(ConvertType, RoundTripErrorBound) {
  const Type t = type();
  double bound;
  switch (t) {
    case Type::F32: bound = 0; break;
    case Type::F16: bound = std::ldexp(1.0, -11); break;
    case Type::BF16: bound = std::ldexp(1.0, -8); break;
    case Type::Q8_0: case Type::Q8_1: case Type::Q8_K: bound = 2.9 / 256; break;
    case Type::Q6_K: bound = 2.9 / 64; break;
    case Type::Q5_0: case Type::Q5_1: case Type::Q5_K: bound = 2.9 / 32; break;
    case Type::Q4_0: case Type::Q4_1: case Type::Q4_K: case Type::IQ4_NL: case Type::IQ4_XS: bound = 2.9 / 16; break;
    case Type::Q3_K: bound = 2.9 / 8; break;
    case Type::Q2_K: bound = 2.9 / 4; break;
    default: FAIL() << "no bound for " << name();
  }
  std::mt19937 rng(42);
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t n = 4096;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = g(rng);
  std::vector<uint8_t> q(row_size(traits(t), n));
  quantize_row_ref(t, x.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  double err = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    ref += double(x[i]) * x[i];
  }
  EXPECT_LE(std::sqrt(err / ref), bound) << name();
}

// NaN and inf inputs must not crash or write out of bounds; whatever bytes result must decode.
TEST_P(ConvertType, NonFiniteInputsDoNotCrash) {
  const Type t = type();
  const int64_t n = 512;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.1f * float(i));
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[40] = std::numeric_limits<float>::infinity();
  x[41] = -std::numeric_limits<float>::infinity();
  for (int64_t i = 256; i < 512; ++i) x[i] = std::numeric_limits<float>::quiet_NaN();  // an all-NaN super-block
  const size_t bytes = row_size(traits(t), n);
  std::vector<uint8_t> q(bytes + 8, 0x5A);
  quantize_row_ref(t, x.data(), q.data(), n);
  for (size_t g = bytes; g < q.size(); ++g) ASSERT_EQ(q[g], 0x5A);
  std::vector<float> y(n);
  dequantize_row(t, q.data(), y.data(), n);
}

// A row whose length is not a multiple of the block size is bad input: tern::Error naming the type.
TEST_P(ConvertType, RejectsPartialBlock) {
  const Type t = type();
  const int64_t block = traits(t).block_size;
  const int64_t n = block == 1 ? -1 : block + 1;
  std::vector<float> x(2 * 256 + 8);
  std::vector<uint8_t> q(4096);
  try {
    quantize_row_ref(t, x.data(), q.data(), n);
    FAIL() << "no error for n=" << n;
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(type_name(t)), std::string::npos) << err.what();
  }
  EXPECT_THROW(dequantize_row(t, q.data(), x.data(), n), Error);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ConvertType, ::testing::ValuesIn(kTypeNames),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace

TEST(Convert, SupportTable) {
  for (const char* n : kTypeNames) {
    EXPECT_TRUE(can_dequantize(type_of(n))) << n;
    EXPECT_TRUE(can_quantize(type_of(n))) << n;
  }
  EXPECT_FALSE(can_dequantize(Type::IQ2_XXS));
  EXPECT_FALSE(can_quantize(Type::MXFP4));
}

TEST(Convert, UnsupportedTypeIsAnErrorListingSupported) {
  float x[256] = {};
  uint8_t q[1024] = {};
  try {
    dequantize_row(Type::IQ2_XXS, q, x, 256);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("iq2_xxs"), std::string::npos) << m;
    EXPECT_NE(m.find("q4_K"), std::string::npos) << m;  // lists what is supported
  }
  EXPECT_THROW(quantize_row_ref(Type::IQ2_XXS, x, q, 256), Error);
  EXPECT_THROW(quantize_row_ref(static_cast<Type>(4), x, q, 256), Error);  // removed ggml id (Q4_2)
}

// Exact: every half / bfloat16 bit pattern decodes to the float with the same value and re-encodes to the
// same bits (NaNs stay NaN).
TEST(Convert, F16AndBF16AllPatternsRoundTrip) {
  for (Type t : {Type::F16, Type::BF16}) {
    std::vector<uint16_t> h(65536), back(65536);
    for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    dequantize_row(t, h.data(), f.data(), 65536);
    quantize_row_ref(t, f.data(), back.data(), 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float want = t == Type::F16 ? fp16_to_fp32(h[i]) : fp32_from_bits(uint32_t{h[i]} << 16);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(f[i]));
        continue;
      }
      ASSERT_EQ(fp32_to_bits(f[i]), fp32_to_bits(want)) << type_name(t) << " 0x" << std::hex << i;
      ASSERT_EQ(back[i], h[i]) << type_name(t) << " 0x" << std::hex << i;
    }
  }
}

// Ties round to even: 1 + 2^-11 lies halfway between halves 1 and 1 + 2^-10 -> 1; bf16 likewise.
TEST(Convert, F16AndBF16RoundHalfToEven) {
  const float x[2] = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11)};
  uint16_t h[2];
  quantize_row_ref(Type::F16, x, h, 2);
  EXPECT_EQ(h[0], 0x3c00);
  EXPECT_EQ(h[1], 0x3c02);
  const float b[2] = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)};
  quantize_row_ref(Type::BF16, b, h, 2);
  EXPECT_EQ(h[0], 0x3f80);
  EXPECT_EQ(h[1], 0x3f82);
}
