// Anthropic Messages API pieces without HTTP: the translation of a request into the OpenAI chat request it means
// (written out by hand from Anthropic's documented semantics: tool_result blocks are tool messages ahead of the
// user's text, tool_use blocks assistant tool_calls with object arguments, thinking reasoning_content), errors that
// name Anthropic's fields, the answer's content blocks and the event sequence of a stream. The end-to-end check with
// the official client is tests/shell/serve_anthropic.sh.
#include <gtest/gtest.h>

#include "serve/anthropic.h"

using namespace tern::serve;

namespace {

std::string error_param(const json& body, bool count_only = false) {
  try {
    messages_to_chat(body, count_only);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.message;
    EXPECT_NE(e.message.find(e.param), std::string::npos) << "the message names the field: " << e.message;
    return e.param;
  }
  return "<no error>";
}

json base() {
  return json{{"model", "m"}, {"max_tokens", 8}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
}

TEST(Anthropic, ConversationWithToolsBecomesTheChatRequest) {
  const json req = json::parse(R"({
    "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
    "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3, "stream": true, "metadata": {"user_id": "u"},
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Use the tool.", "signature": "abc"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": [{"type": "text", "text": "down"}]},
        {"type": "text", "text": "Thanks", "cache_control": {"type": "ephemeral"}}]}],
    "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "get_weather"},
    "thinking": {"type": "disabled"}})");
  const json want = json::parse(R"({
    "model": "m", "max_tokens": 64,
    "messages": [
      {"role": "system", "content": "Be brief.\nBe kind."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Use the tool.", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
      {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: down"},
      {"role": "user", "content": "Thanks"}],
    "temperature": 0.5, "top_k": 3, "stream": true, "stop": ["END"],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "description": "Weather"}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "reasoning_format": "auto", "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_EQ(messages_to_chat(req), want) << messages_to_chat(req).dump(1);
}

TEST(Anthropic, ToolChoiceAndThinkingForms) {
  json b = base();
  b["tools"] = json::parse(R"([{"name": "t", "input_schema": {"type": "object"}}])");
  b["tool_choice"] = {{"type", "any"}};
  EXPECT_EQ(messages_to_chat(b)["tool_choice"], "required");
  b["tool_choice"] = {{"type", "auto"}};
  EXPECT_EQ(messages_to_chat(b)["tool_choice"], "auto");
  b["tool_choice"] = {{"type", "none"}};
  EXPECT_EQ(messages_to_chat(b)["tool_choice"], "none");
  for (const char* t : {"enabled", "adaptive", "between_tools"}) {
    b["thinking"] = {{"type", t}, {"budget_tokens", 2048}};
    EXPECT_EQ(messages_to_chat(b)["chat_template_kwargs"]["enable_thinking"], true) << t;
  }
  EXPECT_FALSE(messages_to_chat(base()).contains("chat_template_kwargs"));  // the template's default
  json c = base();  // a user turn of tool results only adds no empty user message
  c["messages"].push_back({{"role", "assistant"}, {"content", json::parse(R"([{"type":"tool_use","id":"a","name":"t"}])")}});
  c["messages"].push_back({{"role", "user"}, {"content", json::parse(R"([{"type":"tool_result","tool_use_id":"a"}])")}});
  const json m = messages_to_chat(c)["messages"];
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1]["content"], nullptr);  // an assistant turn of calls only has no text
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], json::object());
  EXPECT_EQ(m[2], json::parse(R"({"role":"tool","tool_call_id":"a","content":""})"));
}

TEST(Anthropic, ErrorsNameTheField) {
  json b = base();
  b.erase("max_tokens");
  EXPECT_EQ(error_param(b), "max_tokens");
  EXPECT_EQ(messages_to_chat(b, /*count_only=*/true)["messages"].size(), 1u);  // count_tokens needs none
  b = base();
  b["max_tokens"] = 0;
  EXPECT_EQ(error_param(b), "max_tokens");
  b = base();
  b.erase("model");
  EXPECT_EQ(error_param(b), "model");
  b = base();
  b["messages"] = json::array();
  EXPECT_EQ(error_param(b), "messages");
  b = base();
  b["messages"][0]["role"] = "system";
  EXPECT_EQ(error_param(b), "messages.0.role");
  b = base();
  b["messages"][0]["content"] = json::parse(R"([{"type":"text","text":"a"},{"type":"image","source":{}}])");
  EXPECT_EQ(error_param(b), "messages.0.content.1.type");
  b["messages"][0]["content"] = json::parse(R"([{"type":"tool_use","id":"a","name":"t","input":{}}])");
  EXPECT_EQ(error_param(b), "messages.0.content.0.type");  // tool_use from the user
  b["messages"][0]["content"] = json::parse(R"([{"type":"tool_result"}])");
  EXPECT_EQ(error_param(b), "messages.0.content.0.tool_use_id");
  b["messages"][0]["content"] = json::parse(R"([{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}])");
  EXPECT_EQ(error_param(b), "messages.0.content.0.content.0.type");
  b["messages"][0]["content"] = json::parse(R"([{"type":"text"}])");
  EXPECT_EQ(error_param(b), "messages.0.content.0.text");
  b = base();
  b["messages"].push_back({{"role", "assistant"}, {"content", json::parse(R"([{"type":"tool_use","id":"a","name":"t","input":[1]}])")}});
  EXPECT_EQ(error_param(b), "messages.1.content.0.input");
  b = base();
  b["stop_sequences"] = json::parse(R"(["a", ""])");
  EXPECT_EQ(error_param(b), "stop_sequences.1");
  b = base();
  b["tools"] = json::parse(R"([{"name": "t"}])");
  EXPECT_EQ(error_param(b), "tools.0.input_schema");
  b["tools"] = json::parse(R"([{"type": "web_search_20250305", "name": "web_search"}])");
  EXPECT_EQ(error_param(b), "tools.0.type");
  b = base();
  b["tool_choice"] = {{"type", "any"}};
  EXPECT_EQ(error_param(b), "tool_choice");  // no tools
  b["tools"] = json::parse(R"([{"name": "t", "input_schema": {}}])");
  b["tool_choice"] = {{"type", "some"}};
  EXPECT_EQ(error_param(b), "tool_choice.type");
  b = base();
  b["thinking"] = {{"type", "always"}};
  EXPECT_EQ(error_param(b), "thinking.type");
  b = base();
  b["system"] = 5;
  EXPECT_EQ(error_param(b), "system");
}

TEST(Anthropic, ErrorBodyAndTypes) {
  ApiError e;
  e.status = 413;
  e.message = "too big";
  EXPECT_EQ(anthropic_error_body(e), json::parse(R"({"type":"error","error":{"type":"request_too_large","message":"too big"}})"));
  EXPECT_STREQ(anthropic_error_type(401), "authentication_error");
  EXPECT_STREQ(anthropic_error_type(404), "not_found_error");
  EXPECT_STREQ(anthropic_error_type(503), "overloaded_error");
  EXPECT_STREQ(anthropic_error_type(500), "api_error");
}

TEST(Anthropic, StopReasonsAndUsage) {
  EXPECT_EQ(anthropic_stop_reason(Finish::kStop, false, ""), "end_turn");
  EXPECT_EQ(anthropic_stop_reason(Finish::kStop, false, "END"), "stop_sequence");
  EXPECT_EQ(anthropic_stop_reason(Finish::kStop, true, ""), "tool_use");
  EXPECT_EQ(anthropic_stop_reason(Finish::kLength, true, ""), "max_tokens");
  const json u = anthropic_usage(100, 7, 60);  // Anthropic counts cache reads apart from input_tokens
  EXPECT_EQ(u["input_tokens"], 40);
  EXPECT_EQ(u["cache_read_input_tokens"], 60);
  EXPECT_EQ(u["output_tokens"], 7);
}

TEST(Anthropic, ContentBlocks) {
  ToolCall call{"get_weather", json{{"city", "Paris"}}};
  json c = anthropic_content({"hmm", "Checking.\n\n"}, {call});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], json::parse(R"({"type":"thinking","thinking":"hmm","signature":""})"));
  EXPECT_EQ(c[1], json::parse(R"({"type":"text","text":"Checking."})"));  // the newlines before the call dropped
  EXPECT_EQ(c[2]["type"], "tool_use");
  EXPECT_EQ(c[2]["name"], "get_weather");
  EXPECT_EQ(c[2]["input"], call.arguments);
  EXPECT_EQ(c[2]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(anthropic_content({"", ""}, {}), json::parse(R"([{"type":"text","text":""}])"));  // never no block
  EXPECT_EQ(anthropic_content({"", "\n"}, {call}).size(), 1u);
}

// Parses "event: X\ndata: {...}\n\n" runs into (name, data) pairs, checking that each data's type is its name.
std::vector<std::pair<std::string, json>> parse_events(const std::string& s) {
  std::vector<std::pair<std::string, json>> out;
  size_t p = 0;
  while (p < s.size()) {
    const size_t end = s.find("\n\n", p);
    EXPECT_NE(end, std::string::npos);
    const std::string ev = s.substr(p, end - p);
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u);
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0);
    const std::string name = ev.substr(7, nl - 7);
    json data = json::parse(ev.substr(nl + 7));
    EXPECT_EQ(data["type"], name);
    out.emplace_back(name, data);
    p = end + 2;
  }
  return out;
}

TEST(Anthropic, StreamEventSequence) {
  MessageEvents ev("msg_1", "m");
  std::string s = ev.start(12);
  s += ev.push({"th", ""});
  s += ev.push({"ink", "Hel"});  // reasoning then content in one delta: the thinking block closes first
  s += ev.push({"", "lo"});
  s += ev.tool_uses({ToolCall{"t", json{{"a", 1}}}});
  s += ev.finish("tool_use", "", anthropic_usage(12, 5, 0));
  const auto e = parse_events(s);
  std::vector<std::string> names;
  for (const auto& [n, d] : e) names.push_back(n);
  const std::vector<std::string> want = {
      "message_start",       "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_delta", "content_block_stop",  "content_block_start", "content_block_delta",
      "content_block_delta", "content_block_stop",  "content_block_start", "content_block_delta",
      "content_block_stop",  "message_delta",       "message_stop"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(e[0].second["message"]["usage"]["input_tokens"], 12);
  EXPECT_EQ(e[0].second["message"]["content"], json::array());
  EXPECT_EQ(e[1].second["content_block"]["type"], "thinking");
  EXPECT_EQ(e[3].second["delta"], json::parse(R"({"type":"thinking_delta","thinking":"ink"})"));
  EXPECT_EQ(e[4].second["delta"]["type"], "signature_delta");
  EXPECT_EQ(e[6].second["index"], 1);
  EXPECT_EQ(e[6].second["content_block"], json::parse(R"({"type":"text","text":""})"));
  EXPECT_EQ(e[8].second["delta"], json::parse(R"({"type":"text_delta","text":"lo"})"));
  EXPECT_EQ(e[10].second["index"], 2);
  EXPECT_EQ(e[10].second["content_block"]["input"], json::object());
  EXPECT_EQ(e[11].second["delta"], json::parse(R"({"type":"input_json_delta","partial_json":"{\"a\":1}"})"));
  EXPECT_EQ(e[13].second["delta"], json::parse(R"({"stop_reason":"tool_use","stop_sequence":null})"));
  EXPECT_EQ(e[13].second["usage"]["output_tokens"], 5);

  MessageEvents empty("msg_2", "m");  // an empty answer still has its (empty) text block
  const auto e2 = parse_events(empty.start(3) + empty.finish("end_turn", "", anthropic_usage(3, 1, 0)));
  ASSERT_EQ(e2.size(), 5u);
  EXPECT_EQ(e2[1].first, "content_block_start");
  EXPECT_EQ(e2[2].first, "content_block_stop");
  ApiError err;
  err.status = 500;
  err.message = "boom";
  const auto e3 = parse_events(MessageEvents::error(err));
  EXPECT_EQ(e3[0].second["error"]["type"], "api_error");
}

}  // namespace
