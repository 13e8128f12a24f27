// Chat template rendering: builds the variables transformers' render_jinja_template passes, then renders.
#include "text/chat_template.h"

#include "core/error.h"

namespace tern::text {

namespace {

using json = nlohmann::ordered_json;

// transformers _alias_reasoning_fields: the first non-null of reasoning_content / thinking / reasoning becomes
// {"thinking": r, **message, "reasoning_content": r} (so `thinking` keeps first place unless the message had it).
json alias_reasoning(const json& m) {
  static const char* kFields[] = {"reasoning_content", "thinking", "reasoning"};
  const json* r = nullptr;
  for (const char* k : kFields) {
    auto it = m.find(k);
    if (it != m.end() && !it->is_null()) {
      r = &*it;
      break;
    }
  }
  if (!r) return m;
  json out = json::object();
  out["thinking"] = *r;
  for (const auto& [k, v] : m.items()) out[k] = v;
  out["thinking"] = m.contains("thinking") ? m["thinking"] : *r;
  out["reasoning_content"] = *r;
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& template_src) : tpl_(template_src) {}

std::string ChatTemplate::render(const json& messages, const json& tools, bool add_generation_prompt,
                                 const json& extra_context) const {
  if (!messages.is_array()) fail("chat template: messages must be a JSON array, got %s", messages.type_name());
  if (!tools.is_null() && !tools.is_array()) fail("chat template: tools must be a JSON array or null, got %s", tools.type_name());
  if (!extra_context.is_null() && !extra_context.is_object())
    fail("chat template: extra context must be a JSON object or null, got %s", extra_context.type_name());
  json msgs = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) fail("chat template: messages[%zu] must be an object, got %s", i, messages[i].type_name());
    msgs.push_back(alias_reasoning(messages[i]));
  }
  json ctx = json::object();
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  if (extra_context.is_object())
    for (const auto& [k, v] : extra_context.items()) ctx[k] = v;
  return tpl_.render(ctx);
}

std::string render_chat(const std::string& template_src, const json& messages, const json& tools,
                        bool add_generation_prompt, const json& extra_context) {
  return ChatTemplate(template_src).render(messages, tools, add_generation_prompt, extra_context);
}

}  // namespace tern::text
