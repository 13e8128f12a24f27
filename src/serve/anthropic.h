// Anthropic Messages API (POST /v1/messages and /v1/messages/count_tokens). A request is translated into the
// OpenAI chat request it means and checked by parse_chat_request, so both APIs share one parser, one template
// path and one set of limits; what only Anthropic has (content blocks, tool_use / tool_result, thinking, the
// required max_tokens, stop_sequences) is checked here and errors name its fields the way Anthropic does
// ("messages.1.content.0.tool_use_id"). Answers are built from the same splitter output (reasoning, content, tool
// calls) as chat completions. Non-goals: images and documents (refused), server tools, prompt-caching controls
// (cache_control is accepted and ignored: tern's prefix cache needs no hints), thinking signatures (empty).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "serve/api.h"
#include "serve/chat_output.h"
#include "serve/scheduler.h"

namespace tern::serve {

// The OpenAI chat body an Anthropic Messages body asks for. count_only: /v1/messages/count_tokens (max_tokens is
// not required there). Throws ApiError for anything malformed or unsupported.
json messages_to_chat(const json& body, bool count_only = false);

// Anthropic's error body {"type": "error", "error": {"type", "message"}} with its type for the status
// (400 invalid_request_error, 401 authentication_error, 404 not_found_error, 413 request_too_large,
// 503 overloaded_error, 500 api_error, ...).
json anthropic_error_body(const ApiError& e);
const char* anthropic_error_type(int status);

// stop_reason: "end_turn", "max_tokens", "stop_sequence" (when stop_string is set) or "tool_use".
std::string anthropic_stop_reason(Finish f, bool tool_calls, const std::string& stop_string);
// usage: input_tokens are the prompt tokens that were processed (Anthropic counts cache reads apart).
json anthropic_usage(int64_t n_prompt, int64_t n_completion, int64_t n_cached);
// The content blocks of a whole answer: thinking, text, then one tool_use per call (ids "toolu_...").
json anthropic_content(const ChatDelta& answer, const std::vector<ToolCall>& calls);
json anthropic_message(const std::string& id, const std::string& model, const json& content,
                       const std::string& stop_reason, const std::string& stop_sequence, const json& usage);
std::string tool_use_id();

// The server-sent events of a streamed answer, in the order the official client expects: message_start, then per
// block content_block_start / *_delta / content_block_stop (thinking, text, tool_use), message_delta with the
// stop reason and usage, message_stop. Each call returns the events to write ("event: NAME\ndata: JSON\n\n").
class MessageEvents {
 public:
  MessageEvents(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}
  std::string start(int64_t n_prompt);
  std::string push(const ChatDelta& d);  // opens, continues or switches the thinking / text block
  std::string tool_uses(const std::vector<ToolCall>& calls);
  std::string finish(const std::string& stop_reason, const std::string& stop_sequence, const json& usage);
  static std::string ping();
  static std::string error(const ApiError& e);

 private:
  enum class Block { kNone, kThinking, kText };
  std::string open(Block b);
  std::string close();

  std::string id_, model_;
  Block open_ = Block::kNone;
  int index_ = -1;  // the index of the newest block
};

}  // namespace tern::serve
