// Test helper: read a safetensors file into editable entries and write them back (the header as safetensors
// lays it out: JSON of name -> dtype / shape / data_offsets, then the data), to make broken checkpoints.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convert/convert.h"
#include "core/error.h"
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

// A fresh copy of the committed checkpoint tests/fixtures/hf/<fixture> in a temporary folder named by `tag` (and
// the process id); the caller removes it.
inline std::filesystem::path copy_checkpoint(const std::string& fixture, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tern_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(std::string(TERN_FIXTURES_DIR) + "/hf/" + fixture))
    fs::copy(f.path(), dir / f.path().filename());
  return dir;
}

// A dry-run conversion of `dir` (every check that happens before tensor data is read; the fixtures' stand-in mtp.*
// tensors dropped, as llama.cpp --no-mtp): "" when it passes, else the Error's message. Removes `dir`.
inline std::string dry_run_error(const std::filesystem::path& dir) {
  convert::Options o;
  o.input_dir = dir.string();
  o.dry_run = true;
  o.no_mtp = true;
  std::string err;
  try {
    ::testing::internal::CaptureStdout();
    convert::run(o);
  } catch (const Error& e) {
    err = e.what();
  }
  ::testing::internal::GetCapturedStdout();
  std::filesystem::remove_all(dir);
  return err;
}

}  // namespace tern::test
