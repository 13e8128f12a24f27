// OpenAI-compatible request parsing and response bodies (chat completions, completions, errors). Requests are
// checked field by field; anything malformed or unsupported is an ApiError naming the field (OpenAI's error body),
// never a crash. Unknown fields are ignored, as OpenAI does. Non-goals here: HTTP, scheduling.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/chat_output.h"
#include "serve/scheduler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tern::serve {

using json = nlohmann::ordered_json;

// An HTTP error with OpenAI's body: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // empty: null
  std::string code;   // empty: null
  std::string type = "invalid_request_error";
  int retry_after = 0;  // > 0: a Retry-After header (seconds) goes with the answer
  json body() const;
};
[[noreturn]] void api_fail(int status, const std::string& param, const std::string& code, const std::string& message);

struct ModelInfo {
  std::string id;          // served model name: the file name without .gguf
  std::vector<std::string> aliases;  // more names the 'model' field accepts (--alias, repeatable)
  bool any_model = false;  // --any-model: accept any name in the 'model' field
  int64_t created = 0;     // unix seconds (the server's start)
  int64_t n_ctx = 0;       // per-sequence context
  int64_t n_ctx_train = 0;
  int64_t n_vocab = 0;
};

// The id, then the aliases (duplicates dropped): what /v1/models lists.
std::vector<std::string> model_names(const ModelInfo& m);
// Whether a request's 'model' field names this model: the id, an alias, or anything with any_model.
bool accepts_model(const ModelInfo& m, const std::string& name);

// Everything the server needs to turn a request body into token ids.
struct ApiContext {
  const text::Tokenizer& tok;
  const text::ChatTemplate* chat_template;  // null: the model has none (chat requests are refused)
  const ModelInfo& model;
  std::string reasoning_format = "none";    // default of the request field: "none" | "auto"
  text::TurnCache* turns = nullptr;         // recent chat prompts, so a follow-up renders only its newest turn
  ToolCallFormat tool_format = ToolCallFormat::kQwen;  // the chat template's tool-call dialect
};

struct ParsedRequest {
  GenRequest gen;
  std::string model;  // the name answers carry: the request's 'model' when it is the id or an alias, else the id
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  Reasoning reasoning = Reasoning::kOff;  // chat: where the answer's reasoning_content is
  json tools = nullptr;          // chat: tool definitions whose calls are parsed from the answer (null: none)
  ToolCallFormat tool_format = ToolCallFormat::kQwen;  // chat: how those calls are written
  std::string forced_text;       // chat: appended to the prompt to start a tool call; belongs in front of the answer
};

// Deepest nesting of arrays and objects a request body may have (a request needs a handful of levels; tool
// schemas and arguments a few more). Deeper bodies are refused before anything recurses over them.
inline constexpr int kMaxJsonDepth = 128;
json parse_json_body(const std::string& body);  // 400 on malformed JSON, a non-object or nesting over kMaxJsonDepth
// Serializes; invalid UTF-8 (a token that is part of a character) becomes U+FFFD instead of throwing.
std::string to_text(const json& j);
ParsedRequest parse_chat_request(const json& body, const ApiContext& ctx);
ParsedRequest parse_completion_request(const json& body, const ApiContext& ctx);

// n_cached: prompt tokens resumed from the prefix cache (usage.prompt_tokens_details.cached_tokens).
// OpenAI's tool_calls array ({"index"} added for streaming deltas).
json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index);
json usage_json(int64_t n_prompt, int64_t n_completion, int64_t n_cached = 0);
// The "logprobs" object of a choice: chat's {"content": [{token, logprob, bytes, top_logprobs}]}, or the legacy
// completions form {tokens, token_logprobs, top_logprobs, text_offset} (offsets counted from text_offset0).
json chat_logprobs(const std::vector<TokenLogprob>& lps, const text::Tokenizer& tok);
json completion_logprobs(const std::vector<TokenLogprob>& lps, const text::Tokenizer& tok, size_t text_offset0);

// Non-streaming bodies (logprobs: null or one of the objects above).
// message: {"role": "assistant", "content", ["reasoning_content"], ["tool_calls"]}.
json chat_response(const std::string& id, int64_t created, const std::string& model, const json& message,
                   Finish finish, const json& usage, const json& logprobs = nullptr);
json completion_response(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                         Finish finish, const json& usage, const json& logprobs = nullptr);
// Streaming chunks: delta text (or, for chat, the role announcement when role is set), or the final chunk with a
// finish reason; usage chunks have empty choices.
json chat_chunk(const std::string& id, int64_t created, const std::string& model, const json& delta, Finish finish,
                const json& logprobs = nullptr);
json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                      Finish finish, const json& logprobs = nullptr);
json usage_chunk(const std::string& object, const std::string& id, int64_t created, const std::string& model,
                 const json& usage);

}  // namespace tern::serve
