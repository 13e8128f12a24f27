// libFuzzer target: a model's answer, split into reasoning, content and tool calls (serve/chat_output.h) in both
// dialects and every reasoning mode. Checks: no crash, the split does not depend on where the stream is cut, and
// the calls' arguments are JSON objects that serialise. Byte 0 picks mode and dialect, byte 1 the cut spacing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "serve/chat_output.h"

namespace {

using namespace tern::serve;
using json = nlohmann::ordered_json;

struct Split {
  std::string reasoning, content, calls;
};

Split run(const std::string& text, Reasoning r, ToolCallFormat f, const json& tools, size_t step) {
  ChatOutputSplitter s(r, tools, f);
  Split out;
  auto add = [&](const ChatDelta& d) {
    out.reasoning += d.reasoning;
    out.content += d.content;
  };
  for (size_t i = 0; i < text.size(); i += step) add(s.push(text.substr(i, step)));
  std::vector<ToolCall> calls;
  add(s.finish(&calls));
  for (const ToolCall& c : calls) {
    if (!c.arguments.is_object()) __builtin_trap();
    out.calls += c.name + '\0' + c.arguments.dump(-1, ' ', false, json::error_handler_t::replace) + '\0';
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"}}}}}])");
  const Reasoning r = static_cast<Reasoning>(data[0] % 3);
  const ToolCallFormat f = data[0] & 4 ? ToolCallFormat::kGlm : ToolCallFormat::kQwen;
  const json& t = data[0] & 8 ? json(nullptr) : tools;
  const size_t step = 1 + data[1] % 16;
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  const Split whole = run(text, r, f, t, text.size() + 1);
  const Split streamed = run(text, r, f, t, step);
  if (whole.reasoning != streamed.reasoning || whole.content != streamed.content || whole.calls != streamed.calls)
    __builtin_trap();
  return 0;
}
