// safetensors reader: a zero-copy view of one .safetensors file (memory-mapped, or a caller-owned buffer for
// fuzzing). The header is validated as strictly as the GGUF reader: length vs file size, well-formed JSON
// object, no duplicate names, known dtypes, shapes whose byte size matches the data offsets, offsets inside
// the data section, tensors tiling the data section without overlaps or holes (the official implementation's
// rule), and a string-to-string __metadata__. Every error names the file and, where one is involved, the tensor.
// Non-goals: writing, big-endian files, pickle checkpoints.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mmap.h"

namespace tern::safetensors {

constexpr uint64_t kMaxHeaderSize = 100ull << 20;  // the official implementation's limit (100 MB)
constexpr size_t kMaxDims = 8;                      // more than any checkpoint uses; bounds shape parsing

// The dtypes the safetensors format defines. Only F32/F16/BF16 can be converted; the rest are parsed (so a
// file with them is still validated) and reported by name.
enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, U16, U32, U64 };
const char* dtype_name(DType t);
size_t dtype_size(DType t);
std::optional<DType> dtype_from_name(std::string_view s);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // PyTorch order (outermost first); empty = scalar
  int64_t n_elements = 1;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the data section
  const uint8_t* data = nullptr;  // end - begin bytes inside the file

  uint64_t n_bytes() const { return end - begin; }
  std::string shape_str() const;  // "[8192, 2048]"
};

class File {
 public:
  static File open(const std::string& path);  // maps and parses; throws Error naming path
  static File parse(std::string name, const uint8_t* data, size_t size);  // buffer must outlive the File

  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& name() const { return name_; }
  uint64_t file_size() const { return size_; }
  uint64_t header_size() const { return header_size_; }

  // Sorted by name (byte order), the order the safetensors library and llama.cpp's converter iterate in.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  File() = default;
  void parse_header();
  std::string name_;
  std::unique_ptr<MappedFile> map_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tern::safetensors
