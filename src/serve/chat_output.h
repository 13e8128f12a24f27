// Splits a chat answer, as it streams, into reasoning (a <think> block: the text before `</think>` when the prompt
// left the block open, or a block the answer opens itself), content, and tool calls, which become OpenAI
// `tool_calls`. Two tool-call dialects, chosen from the model's chat template:
//   Qwen3.5 / Qwen3-Coder: <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//   GLM-4.5 ... GLM-5:     <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
// (GLM-4.5/4.6 put newlines between the parts.) Arguments are typed by the tool's JSON schema: string parameters
// stay strings, others are parsed as JSON when they parse (the inverse of the templates, which write strings as
// they are and everything else with tojson). Tags split across pieces are held back until they are complete.
// Non-goals: other dialects (Hermes JSON, ...), streaming a call's arguments before the call is complete.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tern::serve {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object
};

enum class ToolCallFormat { kQwen, kGlm };

// The dialect of a chat template's tool calls: kGlm when it writes <arg_key> (GLM-4.5 and later), else kQwen.
// *why (optional): the reason, for the one log line that announces the choice.
ToolCallFormat tool_call_format_of(const std::string& template_src, std::string* why = nullptr);
const char* tool_call_format_name(ToolCallFormat f);

// tool_choice "required" / a named function: the text appended to the prompt so that the answer starts a call
// (closing first the think block the prompt left open), and, when no name is given, the options the answer must
// start with (one per tool).
struct ForcedCall {
  std::string text;
  std::vector<std::string> choice;
};
ForcedCall forced_tool_call(ToolCallFormat f, bool think_open, const std::string& name,
                            const nlohmann::ordered_json& tools);

// Where an answer's reasoning is: not split out (kOff: all content), in the think block the prompt left open
// (kOpen: up to `</think>`), or in a block the answer may open itself with `<think>` before any other text
// (kMaybe: GLM-4.5/4.6 templates, Qwen prompts with thinking off).
enum class Reasoning { kOff, kOpen, kMaybe };

// Whether a rendered prompt ends inside a think block (its last <think> is not closed): GLM-4.7/5 and Qwen3.5 with
// thinking on end the generation prompt with <think>.
bool prompt_opens_think(const std::string& prompt);

struct ChatDelta {
  std::string reasoning, content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ChatOutputSplitter {
 public:
  // tools: the request's tools (null or an empty array: tool calls are not parsed).
  ChatOutputSplitter(Reasoning reasoning, nlohmann::ordered_json tools, ToolCallFormat format = ToolCallFormat::kQwen);
  ChatDelta push(const std::string& piece);
  // End of the answer: what was held back, and the tool calls found. Text of a tool call that does not parse is
  // returned as content.
  ChatDelta finish(std::vector<ToolCall>* calls);

 private:
  enum class State { kThinkStart, kReasoning, kContentStart, kContent, kToolCalls };
  std::string take_safe(const std::string& tag);  // buf_ minus a suffix that could start `tag`

  State state_;
  bool tools_;
  nlohmann::ordered_json tool_defs_;
  ToolCallFormat format_;
  std::string buf_;        // text not yet classified
  std::string tool_text_;  // from the first <tool_call> on
};

// What is wrong with one OpenAI tool definition ({"type": "function", "function": {"name": NON-EMPTY, "parameters":
// SCHEMA-OBJECT?}}), the server's and `tern chat --tools`' one check: empty when nothing; else the field below the
// tool ("", ".function.name", ".function.parameters") and what was expected. Any JSON value may be passed.
struct ToolDefinitionError {
  std::string field, expected;
};
std::optional<ToolDefinitionError> check_tool_definition(const nlohmann::ordered_json& tool);

// Parses every <tool_call> block of `text`; text outside blocks (and blocks that do not parse) is appended to
// *rest. tools: the request's tool definitions, for parameter types. Qwen blocks need a function name (an
// unclosed block still gives its call); GLM blocks must be complete and well formed, else they are text.
std::vector<ToolCall> parse_tool_calls(const std::string& text, const nlohmann::ordered_json& tools, std::string* rest,
                                       ToolCallFormat format = ToolCallFormat::kQwen);

}  // namespace tern::serve
