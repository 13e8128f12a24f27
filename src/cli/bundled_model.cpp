// Locating the small model bundled with tern, used by `tern run` and `tern chat` when -m is not given.
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "cli/model_options.h"
#include "core/error.h"
#include "core/log.h"

namespace tern::cli {

namespace fs = std::filesystem;

namespace {
constexpr const char* kBundledName = "tern-tiny-q35moe.gguf";

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}
}  // namespace

std::string bundled_model_path() {
  std::vector<fs::path> candidates;
  const fs::path bin = executable_dir();
  if (!bin.empty()) {
    candidates.push_back(bin / ".." / "models" / kBundledName);
    candidates.push_back(bin / "models" / kBundledName);
    candidates.push_back(bin / ".." / "share" / "tern" / kBundledName);
  }
  candidates.push_back(fs::path(TERN_SOURCE_MODELS_DIR) / kBundledName);
  for (const auto& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  }
  std::string tried;
  for (const auto& p : candidates) tried += "\n  " + p.string();
  fail("no -m MODEL given and the bundled model %s was not found; looked in:%s", kBundledName, tried.c_str());
}

void use_bundled_model_if_unset(runtime::EngineOptions& o) {
  if (!o.model_path.empty()) return;
  o.model_path = bundled_model_path();
  log::info("no -m given: using the bundled model %s", o.model_path.c_str());
}

}  // namespace tern::cli
