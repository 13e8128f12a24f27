// Option parsing shared by commands (declared in cli/model_options.h).
#include <string>

#include "cli/model_options.h"
#include "core/error.h"

namespace tern::cli {

int parse_parallel(const std::string& text) {
  if (text == "auto") return 0;
  size_t used = 0;
  int k = 0;
  try {
    k = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || k < 1) fail("--parallel must be an integer >= 1 or auto (got '%s')", text.c_str());
  return k;
}

}  // namespace tern::cli
