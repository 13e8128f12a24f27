// Reading a model's weights out of a GGUF, for every architecture: tensors looked up by name with their shapes
// checked (errors name the file and the tensor), matrices as zero-copy views the backend maps, small vectors
// dequantized to f32 once, and the tensors a model did not use listed. Repacker moves matrices into the
// backend's kernel layout after load and gives back the file pages they came from.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "formats/gguf.h"
#include "models/blocks/linear.h"
#include "models/model.h"

namespace tern::models {

class Loader {
 public:
  Loader(const gguf::File& f, backend::Backend& be) : f_(f), be_(be) {}

  // The tensor, its shape checked against `shape` (ne order, missing trailing dims 1); marks it used.
  const gguf::TensorInfo& tensor(const std::string& name, std::vector<int64_t> shape);
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  const gguf::TensorInfo* optional(const std::string& name, std::vector<int64_t> shape) {
    return has(name) ? &tensor(name, std::move(shape)) : nullptr;
  }
  // A matrix {n_in, n_out[, n_expert]} used through the matmul kernels.
  Linear linear(const std::string& name, std::vector<int64_t> shape) { return to_linear(tensor(name, shape), name); }
  Linear to_linear(const gguf::TensorInfo& t, const std::string& name);
  // A small tensor dequantized to f32 (norms, biases, conv taps), in backend memory.
  backend::Floats vec(const std::string& name, std::vector<int64_t> shape);
  // Tensors of the file not looked up so far.
  std::vector<std::string> unused() const;

  const std::string& file_name() const { return f_.name(); }
  const gguf::File& file() const { return f_; }
  backend::Backend& backend() { return be_; }

 private:
  const gguf::File& f_;
  backend::Backend& be_;
  std::set<std::string> used_;
};

// <arch>.<key> hyper-parameters, range-checked; errors name the file and the key.
struct KeyReader {
  const gguf::File& f;
  std::string arch;
  std::string key(const char* k) const { return arch + "." + k; }
  int64_t req(const char* k, int64_t lo, int64_t hi) const;                 // throws when absent or out of range
  int64_t opt(const char* k, int64_t dflt, int64_t lo, int64_t hi) const {  // dflt when absent
    return f.find(key(k)) ? req(k, lo, hi) : dflt;
  }
};

// "blk.<i>.<name>"
std::string blk(int64_t i, const char* name);

// Repacks matrices one at a time into backend memory it keeps (owned), counting them in a report.
class Repacker {
 public:
  Repacker(backend::Backend& be, const gguf::File& f, std::vector<std::unique_ptr<backend::Buffer>>& owned)
      : be_(be), f_(f), owned_(owned) {}
  // w repacked in place (w then points at the repacked copy). A matrix under one 8-row group stays as it is; one the
  // backend has no layout for is listed in the report's `kept`. `drop_source`: give back its file pages.
  void one(Linear& w, bool drop_source);
  RepackReport& report() { return rep_; }

 private:
  backend::Backend& be_;
  const gguf::File& f_;
  std::vector<std::unique_ptr<backend::Buffer>>& owned_;
  RepackReport rep_;
};

}  // namespace tern::models
