// Named intermediates: the forward calls dump("attn_norm", layer, data, shape) at each step llama.cpp names
// (same names, "<name>-<layer>" or "<name>" for layer -1). With a directory set, each becomes a float32
// .npy file; without one the call costs a branch. Shapes are numpy order (outermost first).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tern::models {

class TensorDump {
 public:
  TensorDump() = default;
  explicit TensorDump(std::string dir);  // creates dir; throws Error if it cannot
  bool enabled() const { return !dir_.empty(); }
  void operator()(const char* name, int layer, const float* data, std::vector<int64_t> shape) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Writes a float32 C-order .npy file (format 1.0). Throws Error naming the path on failure.
void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);

}  // namespace tern::models
