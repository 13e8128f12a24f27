// The architectures tern runs, keyed by GGUF general.architecture: one line each in registry.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace tern::models {

// The header's description of a model (nothing read from the tensor data): for `tern plan`. The file must outlive
// the result. Throws Error naming the file for an architecture tern does not run, or a bad header.
std::unique_ptr<ModelShape> describe_model(const gguf::File& f);
// Opens and loads a model onto `be` (null: the CPU backend, backend::make_backend("cpu")). Throws Error naming
// the file (unknown architecture, bad header or tensors).
std::unique_ptr<Model> load_model(const std::string& path, std::unique_ptr<backend::Backend> be = nullptr);
std::vector<std::string> supported_architectures();

}  // namespace tern::models
