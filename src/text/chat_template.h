// Chat prompt rendering with a model's own Jinja chat template (GGUF `tokenizer.chat_template`), byte-identical
// to transformers' apply_chat_template(tokenize=False). No built-in fallback: a model without a template is the
// caller's error to report.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja.h"

namespace tern::text {

// A parsed chat template, reusable across requests.
class ChatTemplate {
 public:
  // Throws tern::Error (with line/column) when the template is malformed or uses unsupported constructs.
  explicit ChatTemplate(const std::string& template_src);

  // messages: array of message objects; tools: array of tool schemas or null; extra_context: object of further
  // template variables (enable_thinking, bos_token, ...) or null. Variables are passed like transformers does:
  // messages, tools (None when null), documents (None), add_generation_prompt, then extra_context. Message
  // reasoning given as `thinking` / `reasoning` is aliased to `reasoning_content` (transformers >= 5).
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& extra_context) const;

 private:
  jinja::Template tpl_;
};

// One-shot convenience: parse + render.
std::string render_chat(const std::string& template_src, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra_context);

}  // namespace tern::text
