// Read-only memory map of a whole file. Tensor views point into it (zero-copy); it lives as long as the model.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tern {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Anonymous memory from mmap (page-aligned; transparent huge pages requested when large), for data tern builds
// at load, such as weights repacked for the kernels. Pages are backed on first write.
class AnonBuffer {
 public:
  AnonBuffer() = default;
  explicit AnonBuffer(size_t n);  // throws Error when the memory cannot be mapped
  ~AnonBuffer();
  AnonBuffer(const AnonBuffer&) = delete;
  AnonBuffer& operator=(const AnonBuffer&) = delete;
  AnonBuffer(AnonBuffer&& o) noexcept;
  AnonBuffer& operator=(AnonBuffer&& o) noexcept;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Gives back the whole pages inside [p, p + n) of a file mapping: they leave this process's resident set and
// are read again from the file only if touched again. For source bytes tern no longer reads (repacked weights).
void drop_pages(const void* p, size_t n);

}  // namespace tern
