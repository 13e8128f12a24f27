#include "serve/anthropic.h"

#include <random>

#include "core/error.h"

namespace tern::serve {

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& why) {
  api_fail(400, where, "invalid_value", where + ": " + why);
}

bool present(const json& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

std::string at(const std::string& where, size_t i) { return where + "." + std::to_string(i); }

// The text of a system prompt or a tool_result's content: a string or an array of text blocks.
std::string text_of(const json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(where, "expected a string or an array of text blocks");
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& b = v[i];
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) bad(at(where, i), "expected a content block");
    const std::string type = b["type"].get<std::string>();
    if (type != "text")
      api_fail(400, at(where, i) + ".type", "unsupported_content",
               at(where, i) + ".type: '" + type + "' blocks are not supported here (only text)");
    if (!b.contains("text") || !b["text"].is_string()) bad(at(where, i) + ".text", "expected a string");
    if (!out.empty()) out += "\n";  // separate blocks as Anthropic joins them for the model
    out += b["text"].get<std::string>();
  }
  return out;
}

// One Anthropic message -> the OpenAI messages it stands for (a user turn with tool_result blocks becomes the tool
// messages, then the user's own text).
void convert_message(const json& m, const std::string& where, json* out) {
  if (!m.is_object()) bad(where, "expected a message object");
  if (!m.contains("role") || !m["role"].is_string()) bad(where + ".role", "expected \"user\" or \"assistant\"");
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant")
    bad(where + ".role", "'" + role + "' is not one of user, assistant (the system prompt is the top-level 'system')");
  if (!m.contains("content")) bad(where + ".content", "Field required");
  const json& content = m["content"];
  if (content.is_string()) {
    out->push_back({{"role", role}, {"content", content.get<std::string>()}});
    return;
  }
  if (!content.is_array()) bad(where + ".content", "expected a string or an array of content blocks");
  std::string text, thinking;
  json tool_calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string w = at(where + ".content", i);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) bad(w, "expected a content block with a 'type'");
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string()) bad(w + ".text", "expected a string");
      text += b["text"].get<std::string>();
    } else if (type == "tool_use") {
      if (role != "assistant") bad(w + ".type", "tool_use blocks belong in assistant messages");
      for (const char* k : {"id", "name"})
        if (!b.contains(k) || !b[k].is_string() || b[k].get<std::string>().empty())
          bad(w + "." + k, "expected a non-empty string");
      if (b.contains("input") && !b["input"].is_object()) bad(w + ".input", "expected an object");
      tool_calls.push_back({{"id", b["id"]},
                            {"type", "function"},
                            {"function", {{"name", b["name"]}, {"arguments", b.value("input", json::object())}}}});
    } else if (type == "tool_result") {
      if (role != "user") bad(w + ".type", "tool_result blocks belong in user messages");
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) bad(w + ".tool_use_id", "expected a string");
      if (b.contains("is_error") && !b["is_error"].is_boolean()) bad(w + ".is_error", "expected true or false");
      std::string result = present(b, "content") ? text_of(b["content"], w + ".content") : "";
      // The template has no field for a failed call: the model is told in the text.
      if (b.value("is_error", false)) result = "Error: " + result;
      out->push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if (type == "thinking") {
      if (role != "assistant") bad(w + ".type", "thinking blocks belong in assistant messages");
      if (!b.contains("thinking") || !b["thinking"].is_string()) bad(w + ".thinking", "expected a string");
      thinking += b["thinking"].get<std::string>();
    } else if (type == "redacted_thinking") {
      // Opaque to any model but the one that wrote it: dropped.
    } else {
      api_fail(400, w + ".type", "unsupported_content",
               w + ".type: '" + type + "' blocks are not supported (text, tool_use, tool_result, thinking)");
    }
  }
  if (role == "assistant") {
    json a{{"role", "assistant"}, {"content", text.empty() && !tool_calls.empty() ? json(nullptr) : json(text)}};
    if (!thinking.empty()) a["reasoning_content"] = thinking;
    if (!tool_calls.empty()) a["tool_calls"] = tool_calls;
    out->push_back(std::move(a));
  } else if (!text.empty() || out->empty() || out->back()["role"] != "tool") {
    out->push_back({{"role", "user"}, {"content", text}});  // after the tool results it answers with
  }
}

}  // namespace

json messages_to_chat(const json& b, bool count_only) {
  json chat = json::object();
  if (!present(b, "model") || !b["model"].is_string()) bad("model", "Field required (a string)");
  chat["model"] = b["model"];
  if (!count_only) {
    if (!present(b, "max_tokens")) bad("max_tokens", "Field required");
    if (!b["max_tokens"].is_number_integer() || b["max_tokens"].get<int64_t>() < 1)
      bad("max_tokens", "expected an integer >= 1, got " + b["max_tokens"].dump());
    chat["max_tokens"] = b["max_tokens"];
  }
  json messages = json::array();
  if (present(b, "system")) messages.push_back({{"role", "system"}, {"content", text_of(b["system"], "system")}});
  if (!present(b, "messages") || !b["messages"].is_array() || b["messages"].empty())
    bad("messages", "expected a non-empty array of messages");
  for (size_t i = 0; i < b["messages"].size(); ++i) convert_message(b["messages"][i], at("messages", i), &messages);
  chat["messages"] = messages;
  for (const char* k : {"temperature", "top_p", "top_k", "stream"})
    if (b.contains(k)) chat[k] = b[k];
  if (present(b, "stop_sequences")) {
    const json& s = b["stop_sequences"];
    if (!s.is_array()) bad("stop_sequences", "expected an array of strings");
    for (size_t i = 0; i < s.size(); ++i)
      if (!s[i].is_string() || s[i].get<std::string>().empty()) bad(at("stop_sequences", i), "expected a non-empty string");
    if (s.size() > 16) bad("stop_sequences", "at most 16 stop sequences (got " + std::to_string(s.size()) + ")");
    if (!s.empty()) chat["stop"] = s;
  }
  if (present(b, "tools")) {
    const json& ts = b["tools"];
    if (!ts.is_array()) bad("tools", "expected an array of tools");
    json tools = json::array();
    for (size_t i = 0; i < ts.size(); ++i) {
      const json& t = ts[i];
      const std::string w = at("tools", i);
      if (!t.is_object()) bad(w, "expected a tool object");
      if (present(t, "type") && t["type"] != "custom")
        api_fail(400, w + ".type", "unsupported_parameter",
                 w + ".type: server tools (" + t["type"].dump() + ") are not supported; give {name, input_schema}");
      if (!t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
        bad(w + ".name", "expected a non-empty string");
      if (!t.contains("input_schema") || !t["input_schema"].is_object()) bad(w + ".input_schema", "expected a JSON schema object");
      json f{{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (present(t, "description")) {
        if (!t["description"].is_string()) bad(w + ".description", "expected a string");
        f["description"] = t["description"];
      }
      tools.push_back({{"type", "function"}, {"function", f}});
    }
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (present(b, "tool_choice")) {
    const json& tc = b["tool_choice"];
    if (!tc.is_object() || !tc.contains("type") || !tc["type"].is_string())
      bad("tool_choice", "expected {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    const std::string type = tc["type"].get<std::string>();
    if (type == "auto") chat["tool_choice"] = "auto";
    else if (type == "any") chat["tool_choice"] = "required";
    else if (type == "none") chat["tool_choice"] = "none";
    else if (type == "tool") {
      if (!tc.contains("name") || !tc["name"].is_string()) bad("tool_choice.name", "expected the tool's name");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    } else {
      bad("tool_choice.type", "'" + type + "' is not one of auto, any, tool, none");
    }
    if (type != "none" && !chat.contains("tools")) bad("tool_choice", "needs 'tools'");
  }
  // Reasoning always goes to thinking blocks (never into the text); `thinking` turns the template's thinking on or
  // off where the template has the switch: disabled is off, the other types on (budget_tokens and display are
  // accepted; max_tokens bounds the whole answer and the thinking is always shown).
  chat["reasoning_format"] = "auto";
  if (present(b, "thinking")) {
    const json& th = b["thinking"];
    if (!th.is_object() || !th.contains("type") || !th["type"].is_string())
      bad("thinking", "expected {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
    const std::string type = th["type"].get<std::string>();
    if (type != "enabled" && type != "disabled" && type != "adaptive" && type != "between_tools")
      bad("thinking.type", "'" + type + "' is not one of enabled, disabled, adaptive, between_tools");
    if (present(th, "budget_tokens") && !th["budget_tokens"].is_number_integer())
      bad("thinking.budget_tokens", "expected an integer");
    chat["chat_template_kwargs"] = {{"enable_thinking", type != "disabled"}};
  }
  if (present(b, "metadata") && !b["metadata"].is_object()) bad("metadata", "expected an object");
  return chat;
}

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

json anthropic_error_body(const ApiError& e) {
  return json{{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.message}}}};
}

std::string anthropic_stop_reason(Finish f, bool tool_calls, const std::string& stop_string) {
  if (f == Finish::kLength) return "max_tokens";
  if (tool_calls) return "tool_use";
  if (!stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

json anthropic_usage(int64_t n_prompt, int64_t n_completion, int64_t n_cached) {
  return json{{"input_tokens", n_prompt - n_cached},
              {"output_tokens", n_completion},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", n_cached}};
}

std::string tool_use_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return strf("toolu_%016llx%08llx", static_cast<unsigned long long>(rng()),
              static_cast<unsigned long long>(rng() & 0xffffffffu));
}

json anthropic_content(const ChatDelta& answer, const std::vector<ToolCall>& calls) {
  json content = json::array();
  if (!answer.reasoning.empty())
    content.push_back({{"type", "thinking"}, {"thinking", answer.reasoning}, {"signature", ""}});
  std::string text = answer.content;
  if (!calls.empty())  // the newline(s) before a call are the template's, not the answer's
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (!text.empty() || (calls.empty() && answer.reasoning.empty()))
    content.push_back({{"type", "text"}, {"text", text}});
  for (const ToolCall& c : calls)
    content.push_back({{"type", "tool_use"}, {"id", tool_use_id()}, {"name", c.name}, {"input", c.arguments}});
  return content;
}

json anthropic_message(const std::string& id, const std::string& model, const json& content,
                       const std::string& stop_reason, const std::string& stop_sequence, const json& usage) {
  return json{{"id", id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model},
              {"content", content},
              {"stop_reason", stop_reason},
              {"stop_sequence", stop_sequence.empty() ? json(nullptr) : json(stop_sequence)},
              {"usage", usage}};
}

namespace {

std::string event(const char* name, const json& data) {
  return std::string("event: ") + name + "\ndata: " + to_text(data) + "\n\n";
}

}  // namespace

std::string MessageEvents::start(int64_t n_prompt) {
  json m = anthropic_message(id_, model_, json::array(), "", "", anthropic_usage(n_prompt, 0, 0));
  m["stop_reason"] = nullptr;
  return event("message_start", {{"type", "message_start"}, {"message", m}});
}

std::string MessageEvents::close() {
  if (open_ == Block::kNone) return "";
  std::string out;
  if (open_ == Block::kThinking)  // the client's thinking block carries a signature; tern's are empty
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  open_ = Block::kNone;
  return out;
}

std::string MessageEvents::open(Block b) {
  if (open_ == b) return "";
  std::string out = close();
  ++index_;
  open_ = b;
  const json block = b == Block::kThinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                           : json{{"type", "text"}, {"text", ""}};
  return out + event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
}

std::string MessageEvents::push(const ChatDelta& d) {
  std::string out;
  if (!d.reasoning.empty()) {
    out += open(Block::kThinking);
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", "thinking_delta"}, {"thinking", d.reasoning}}}});
  }
  if (!d.content.empty()) {
    out += open(Block::kText);
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", "text_delta"}, {"text", d.content}}}});
  }
  return out;
}

std::string MessageEvents::tool_uses(const std::vector<ToolCall>& calls) {
  std::string out = close();
  for (const ToolCall& c : calls) {
    ++index_;
    out += event("content_block_start",
                 {{"type", "content_block_start"},
                  {"index", index_},
                  {"content_block", {{"type", "tool_use"}, {"id", tool_use_id()}, {"name", c.name}, {"input", json::object()}}}});
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", "input_json_delta"}, {"partial_json", to_text(c.arguments)}}}});
    out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }
  return out;
}

std::string MessageEvents::finish(const std::string& stop_reason, const std::string& stop_sequence, const json& usage) {
  std::string out = close();
  if (index_ < 0) {  // an empty answer still has its (empty) text block, as a non-streamed one does
    out += open(Block::kText);
    out += close();
  }
  out += event("message_delta", {{"type", "message_delta"},
                                 {"delta", {{"stop_reason", stop_reason},
                                            {"stop_sequence", stop_sequence.empty() ? json(nullptr) : json(stop_sequence)}}},
                                 {"usage", usage}});
  out += event("message_stop", {{"type", "message_stop"}});
  return out;
}

std::string MessageEvents::ping() { return event("ping", {{"type", "ping"}}); }

std::string MessageEvents::error(const ApiError& e) { return event("error", anthropic_error_body(e)); }

}  // namespace tern::serve
