// Test helpers: a byte-level GGUF builder for crafting valid and hostile files by hand (independent of
// gguf::Writer), and a parse wrapper.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace tern::gguf::test {

struct Raw {
  std::vector<uint8_t> b;
  template <typename T>
  Raw& put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  Raw& u8(uint8_t v) { return put(v); }
  Raw& u32(uint32_t v) { return put(v); }
  Raw& u64(uint64_t v) { return put(v); }
  Raw& i64(int64_t v) { return put(v); }
  Raw& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  Raw& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  // Tensor info: name, dims (ggml order), ggml type id, offset.
  Raw& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) i64(d);
    return u32(type).u64(offset);
  }
  Raw& pad(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

// The File views `b`, which must outlive it: temporaries are refused at compile time.
inline File parse(const std::vector<uint8_t>& b, const std::string& name = "t.gguf") {
  return File::parse(name, b.data(), b.size());
}
File parse(std::vector<uint8_t>&& b, const std::string& name = "t.gguf") = delete;

}  // namespace tern::gguf::test
