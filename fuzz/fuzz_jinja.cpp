// libFuzzer target: the Jinja-subset interpreter (text/jinja.h) on arbitrary template text, rendered with a fixed
// chat-like context (messages with reasoning and tool calls, tools, generation prompt). Any outcome but a render or
// a tern::Error is a bug. The interpreter bounds macro call depth (200), statement/expression nesting (200) and
// range() (100000 items, as jinja2's sandbox); it has no bound on the total work of nested loops, so inputs are
// capped at kMaxLen and libFuzzer's -timeout reports a template that still runs away.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "text/jinja.h"

namespace {
constexpr size_t kMaxLen = 16384;  // bytes of template text tried (the largest seed, glm-5.3, is 10.7 KB)
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "What is 2+2? <b>&amp;</b>"},
      {"role": "assistant", "content": "4", "reasoning_content": "add them",
       "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"a": 2, "b": [2, null]}}}]},
      {"role": "tool", "content": "{\"result\": 4}"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "calc", "description": "adds",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
    "documents": null, "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>",
    "eos_token": "</s>", "n": 3, "x": 1.5, "flag": true})");
  if (size > kMaxLen) return 0;
  const std::string src(reinterpret_cast<const char*>(data), size);
  try {
    const tern::text::jinja::Template t(src);
    const std::string out = t.render(context);
    [[maybe_unused]] static volatile size_t sink;
    sink = out.size();  // keep the render observable
  } catch (const tern::Error&) {
  }
  return 0;
}
