#include "models/registry.h"

#include "core/error.h"
#include "models/glm_dsa/model.h"
#include "models/qwen35moe/model.h"

namespace tern::models {

namespace {

struct Architecture {
  const char* name;  // general.architecture
  std::unique_ptr<ModelShape> (*describe)(const gguf::File& f);
  std::unique_ptr<Model> (*load)(std::unique_ptr<gguf::File> file, std::unique_ptr<backend::Backend> be);
};

template <typename ShapeT, typename ModelT>
constexpr Architecture family(const char* name) {
  return {name, [](const gguf::File& f) -> std::unique_ptr<ModelShape> { return std::make_unique<ShapeT>(f); },
          [](std::unique_ptr<gguf::File> f, std::unique_ptr<backend::Backend> be) -> std::unique_ptr<Model> {
            return std::make_unique<ModelT>(std::move(f), std::move(be));
          }};
}

// One line per architecture. The Qwen3.5 family lives in models/qwen35moe: Qwen3-Next is its computation with value
// heads in grouped order and beta/alpha fused (Config::deltanet()), dense Qwen3.5 its trunk with a dense FFN.
const Architecture kArchitectures[] = {
    family<qwen35moe::Shape, qwen35moe::LoadedModel>("qwen35moe"),
    family<qwen35moe::Shape, qwen35moe::LoadedModel>("qwen3next"),
    family<qwen35moe::Shape, qwen35moe::LoadedModel>("qwen35"),
    family<glm_dsa::Shape, glm_dsa::LoadedModel>("glm-dsa"),  // GLM-5 family: MLA + sparse-attention indexer
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

std::unique_ptr<Model> load_model(const std::string& path, std::unique_ptr<backend::Backend> be) {
  auto f = std::make_unique<gguf::File>(gguf::File::open(path));
  const Architecture& a = find(*f);
  return a.load(std::move(f), std::move(be));
}

}  // namespace tern::models

namespace tern::models {

const char* mla_form_name(MlaForm f) {
  switch (f) {
    case MlaForm::kAuto: return "auto";
    case MlaForm::kAbsorbed: return "absorbed";
    case MlaForm::kExpanded: return "expanded";
  }
  return "?";
}

bool parse_mla_form(const std::string& s, MlaForm* f) {
  for (MlaForm x : {MlaForm::kAuto, MlaForm::kAbsorbed, MlaForm::kExpanded})
    if (s == mla_form_name(x)) {
      *f = x;
      return true;
    }
  return false;
}

}  // namespace tern::models
