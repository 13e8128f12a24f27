// Splits a chat answer, as it streams, into reasoning (the text before `</think>` when the prompt left a think
// block open), content, and tool calls in the Qwen3.5 / Qwen3-Coder form
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// which become OpenAI `tool_calls` (arguments typed by the tool's JSON schema: string parameters stay strings,
// others are parsed as JSON when they parse). Tags split across pieces are held back until they are complete.
// Non-goals: other tool-call dialects (Hermes JSON, ...), partial tool-call streaming.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tern::serve {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object
};

struct ChatDelta {
  std::string reasoning, content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ChatOutputSplitter {
 public:
  // reasoning: the prompt left a think block open and reasoning is to be split out; tools: the request's tools
  // (null or an empty array: tool calls are not parsed).
  ChatOutputSplitter(bool reasoning, nlohmann::ordered_json tools);
  ChatDelta push(const std::string& piece);
  // End of the answer: what was held back, and the tool calls found. Text of a tool call that does not parse is
  // returned as content.
  ChatDelta finish(std::vector<ToolCall>* calls);

 private:
  enum class State { kReasoning, kContentStart, kContent, kToolCalls };
  std::string take_safe(const std::string& tag);  // buf_ minus a suffix that could start `tag`

  State state_;
  bool tools_;
  nlohmann::ordered_json tool_defs_;
  std::string buf_;        // text not yet classified
  std::string tool_text_;  // from the first <tool_call> on
};

// Parses every <tool_call> block of `text`; text outside blocks (and blocks without a function name) is appended to
// *rest. tools: the request's tool definitions, for parameter types.
std::vector<ToolCall> parse_tool_calls(const std::string& text, const nlohmann::ordered_json& tools, std::string* rest);

}  // namespace tern::serve
