// --chat-template-kwargs, shared by the commands that render the model's chat template (as llama.cpp's).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "core/error.h"

namespace tern::cli {

inline void add_template_kwargs_option(CLI::App& app, std::string& raw) {
  app.add_option("--chat-template-kwargs", raw,
                 "Extra template variables as a JSON object, e.g. '{\"enable_thinking\": false}'");
}

// The parsed object, or null when the option was not given. A value that is not a JSON object is an error.
inline nlohmann::ordered_json parse_template_kwargs(const std::string& raw) {
  if (raw.empty()) return nullptr;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("--chat-template-kwargs: not valid JSON: %s", raw.c_str());
  if (!j.is_object()) fail("--chat-template-kwargs: expected a JSON object, got %s", raw.c_str());
  return j;
}

}  // namespace tern::cli
