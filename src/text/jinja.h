// Jinja-subset interpreter for model chat templates, matching Python jinja2 as transformers configures it
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, HF tojson/raise_exception/
// strftime_now). Parse once, render many times. Anything outside the supported subset is a tern::Error naming
// the construct and its line/column, never a silently different prompt.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja_ast.h"

namespace tern::text::jinja {

class Template {
 public:
  // Lexes and parses; throws tern::Error on syntax errors and unsupported tags/filters/tests.
  explicit Template(const std::string& source);
  // Renders with the given top-level variables (a JSON object; keys become template variables).
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const Dict& context) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace tern::text::jinja
