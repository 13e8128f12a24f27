// Test helper: read a safetensors file into editable entries and write them back (the header as safetensors
// lays it out: JSON of name -> dtype / shape / data_offsets, then the data), to make broken checkpoints.
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace tern::test {

struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline std::vector<Entry> load_entries(const std::string& path) {
  const auto f = safetensors::File::open(path);
  std::vector<Entry> v;
  for (const auto& t : f.tensors())
    v.push_back({t.name, safetensors::dtype_name(t.dtype), t.shape, {t.data, t.data + t.n_bytes()}});
  return v;
}

inline void save_entries(const std::string& path, const std::vector<Entry>& v) {
  nlohmann::ordered_json h;
  uint64_t off = 0;
  for (const Entry& e : v) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  const std::string js = h.dump();
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = js.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << js;
  for (const Entry& e : v) out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
}

}  // namespace tern::test
