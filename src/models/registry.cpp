#include "models/registry.h"

#include "core/error.h"
#include "models/qwen35moe/model.h"

namespace tern::models {

namespace {

struct Architecture {
  const char* name;  // general.architecture
  std::unique_ptr<ModelShape> (*describe)(const gguf::File& f);
  std::unique_ptr<Model> (*load)(std::unique_ptr<gguf::File> file);
};

// One line per architecture.
const Architecture kArchitectures[] = {
    {"qwen35moe", [](const gguf::File& f) -> std::unique_ptr<ModelShape> { return std::make_unique<qwen35moe::Shape>(f); },
     [](std::unique_ptr<gguf::File> f) -> std::unique_ptr<Model> { return std::make_unique<qwen35moe::LoadedModel>(std::move(f)); }},
    // Qwen3-Next: the qwen35moe computation, value heads in grouped order, beta/alpha fused (Config::deltanet()).
    {"qwen3next", [](const gguf::File& f) -> std::unique_ptr<ModelShape> { return std::make_unique<qwen35moe::Shape>(f); },
     [](std::unique_ptr<gguf::File> f) -> std::unique_ptr<Model> { return std::make_unique<qwen35moe::LoadedModel>(std::move(f)); }},
    // Dense Qwen3.5: the same trunk with a dense SwiGLU FFN (models/qwen35moe, Config::dense()).
    {"qwen35", [](const gguf::File& f) -> std::unique_ptr<ModelShape> { return std::make_unique<qwen35moe::Shape>(f); },
     [](std::unique_ptr<gguf::File> f) -> std::unique_ptr<Model> { return std::make_unique<qwen35moe::LoadedModel>(std::move(f)); }},
};

const Architecture& find(const gguf::File& f) {
  const std::string arch(f.get_str("general.architecture"));
  for (const Architecture& a : kArchitectures)
    if (arch == a.name) return a;
  std::string list;
  for (const std::string& n : supported_architectures()) list += (list.empty() ? "" : ", ") + n;
  fail("%s: architecture '%s' is not supported (supported: %s)", f.name().c_str(), arch.c_str(), list.c_str());
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const Architecture& a : kArchitectures) out.emplace_back(a.name);
  return out;
}

std::unique_ptr<ModelShape> describe_model(const gguf::File& f) { return find(f).describe(f); }

std::unique_ptr<Model> load_model(const std::string& path) {
  auto f = std::make_unique<gguf::File>(gguf::File::open(path));
  const Architecture& a = find(*f);
  return a.load(std::move(f));
}

}  // namespace tern::models
