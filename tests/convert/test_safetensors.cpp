// safetensors reader: a well-formed file parses zero-copy; every malformed header is rejected with a message
// naming the file and (where there is one) the tensor. Files are built byte by byte here (the format is
// 8 bytes of length + JSON + data), so each case changes exactly one thing.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/safetensors.h"

namespace {

using tern::safetensors::DType;
using tern::safetensors::File;

std::vector<uint8_t> make(const std::string& header, size_t data_bytes, uint64_t len_override = 0) {
  std::vector<uint8_t> b(8 + header.size());  // sized once: GCC 12 reports a false -Warray-bounds for insert()
  const uint64_t n = len_override ? len_override : header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(i));
  return b;
}

std::string error_of(const std::vector<uint8_t>& b) {
  try {
    File::parse("t.safetensors", b.data(), b.size());
  } catch (const tern::Error& e) {
    return e.what();
  }
  return "";
}

const char* kGood =
    R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[16,28]},)"
    R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";

TEST(Safetensors, ParsesSortedZeroCopy) {
  const auto b = make(kGood, 28);
  File f = File::parse("t.safetensors", b.data(), b.size());
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");  // sorted by name, not by header order
  EXPECT_EQ(f.tensors()[1].dtype, DType::BF16);
  EXPECT_EQ(f.tensors()[1].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.tensors()[1].data, b.data() + 8 + std::strlen(kGood) + 16);  // points into the buffer
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_NE(f.find("b"), nullptr);
  EXPECT_EQ(f.find("c"), nullptr);
}

TEST(Safetensors, ZeroSizeTensorAndEmptyFile) {
  const auto b = make(R"({"z":{"dtype":"F16","shape":[0,4],"data_offsets":[0,0]}})", 0);
  EXPECT_EQ(error_of(b), "");
  EXPECT_EQ(error_of(make("{}", 0)), "");
}

struct Bad {
  const char* what;
  std::string header;
  size_t data;
  const char* expect;  // substring of the message
};

TEST(Safetensors, RejectsMalformedHeaders) {
  const std::vector<Bad> cases = {
      {"truncated json", R"({"a":{"dtype":"F32")", 0, "not valid JSON"},
      {"not an object", R"([1,2])", 0, "JSON object"},
      {"duplicate tensor", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "duplicate key 'a'"},
      {"duplicate field", R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4, "duplicate key 'dtype'"},
      {"unknown dtype", R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4, "unknown dtype 'Q4'"},
      {"missing shape", R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, "tensor 'a': missing array 'shape'"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "not a non-negative integer"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "is 8 bytes but data_offsets span 4"},
      {"reversed offsets", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, "reversed"},
      {"past end", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "past the data section"},
      {"overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "overlaps"},
      {"hole", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "hole"},
      {"trailing bytes", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "data section has 8"},
      {"overflowing shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4, "overflow"},
      {"bad metadata", R"({"__metadata__":{"x":1}})", 0, "__metadata__['x'] is not a string"},
      {"unknown field", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":0}})", 4, "unknown field 'x'"},
  };
  for (const Bad& c : cases) {
    const std::string msg = error_of(make(c.header, c.data));
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": got '" << msg << "'";
    EXPECT_NE(msg.find("t.safetensors"), std::string::npos) << c.what;
  }
}

TEST(Safetensors, RejectsBadLengths) {
  EXPECT_NE(error_of({1, 2, 3}).find("too small"), std::string::npos);
  EXPECT_NE(error_of(make(kGood, 28, 1ull << 40)).find("exceeds"), std::string::npos);
  EXPECT_NE(error_of(make(kGood, 28, 1000)).find("runs past the end"), std::string::npos);
  EXPECT_NE(error_of(make("  {}", 0)).find("does not start with a JSON object"), std::string::npos);
}

}  // namespace
