#include "models/dump.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace tern::models {

TensorDump::TensorDump(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) fail("--dump-tensors %s: cannot create directory: %s", dir_.c_str(), ec.message().c_str());
}

void TensorDump::operator()(const char* name, int layer, const float* data, std::vector<int64_t> shape) const {
  if (!enabled()) return;
  std::string file = layer < 0 ? std::string(name) : strf("%s-%d", name, layer);
  write_npy(dir_ + "/" + file + ".npy", data, shape);
}

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t n = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ",";
    n *= d;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Total header (magic 6 + version 2 + len 2 + text + '\n') padded to a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("%s: cannot write: %s", path.c_str(), std::strerror(errno));
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(&hlen, 2, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, sizeof(float), static_cast<size_t>(n), f) == static_cast<size_t>(n);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) fail("%s: write failed", path.c_str());
}

}  // namespace tern::models
