// Chat requests through a GLM template (tests/fixtures/templates): the prompt the server builds from an OpenAI
// conversation with assistant tool calls (arguments as JSON strings, as clients send them) and tool results is
// jinja2's render of the same conversation; the answer is split in the template's dialect; tool_choice starts a
// GLM call. The tokenizer is the small GLM-4 fixture (byte-level BPE: a prompt decodes to the text it encodes).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "runtime/generate.h"
#include "serve/api.h"

using namespace tern::serve;

namespace {

std::string read_fixture(const std::string& rel) {
  std::ifstream f(std::string(TERN_FIXTURES_DIR) + "/" + rel, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << rel;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const tern::text::Tokenizer& glm_tokenizer() {
  static const tern::text::Tokenizer tok(
      tern::text::load_hf_tokenizer(std::string(TERN_FIXTURES_DIR) + "/text/small_glm4/tokenizer.json"));
  return tok;
}

json fixture_case(const std::string& name) {
  for (const json& c : json::parse(read_fixture("templates/cases.json")))
    if (c["name"] == name) return c;
  ADD_FAILURE() << "no case " << name;
  return json::object();
}

std::string golden(const std::string& tname, const std::string& cname) {
  const json doc = json::parse(read_fixture("templates/goldens.json"));
  for (const json& g : doc["goldens"])
    if (g["template"] == tname && g["case"] == cname) return g.at("expected");
  ADD_FAILURE() << "no golden " << tname << " / " << cname;
  return "";
}

struct Glm {
  explicit Glm(const std::string& tname) : tpl(read_fixture("templates/" + tname)) {
    model.id = "glm";
    model.n_ctx = 1 << 20;
  }
  ParsedRequest parse(const json& body) {
    ApiContext ctx{glm_tokenizer(), &tpl, model, "auto", nullptr, tool_call_format_of(tpl.source())};
    return parse_chat_request(body, ctx);
  }
  std::string prompt_text(const ParsedRequest& p) {
    const tern::text::Tokenizer& tok = glm_tokenizer();
    std::vector<int32_t> ids = p.gen.prompt;
    if (tok.add_bos() && tok.bos_id() >= 0 && !ids.empty() && ids[0] == tok.bos_id()) ids.erase(ids.begin());
    return tok.decode(ids);
  }
  tern::text::ChatTemplate tpl;
  ModelInfo model;
};

// The fixture case as an OpenAI request body: tool-call arguments as JSON strings.
json request_of(const json& c) {
  json body{{"messages", c["messages"]}, {"tools", c["tools"]}};
  for (json& m : body["messages"])
    if (m.contains("tool_calls"))
      for (json& tc : m["tool_calls"]) tc["function"]["arguments"] = tc["function"]["arguments"].dump();
  if (c.contains("extra")) body["chat_template_kwargs"] = c["extra"];
  return body;
}

}  // namespace

TEST(ApiGlm, ToolCallsAndResultsGoThroughTheTemplate) {
  for (const std::string tname : {"glm-4.6.jinja", "glm-4.7.jinja", "glm-5.3.jinja"}) {
    for (const std::string cname : {"glm_tool_roundtrip", "glm_tool_roundtrip_thinking_off"}) {
      SCOPED_TRACE(tname + " / " + cname);
      Glm g(tname);
      const json c = fixture_case(cname);
      ParsedRequest p = g.parse(request_of(c));
      EXPECT_EQ(g.prompt_text(p), golden(tname, cname));
      EXPECT_EQ(p.tool_format, ToolCallFormat::kGlm);
      EXPECT_EQ(p.tools, c["tools"]);
      // GLM-4.7/5 leave the think block open unless thinking is off; GLM-4.6 lets the answer open it.
      const bool open = tname != "glm-4.6.jinja" && cname == "glm_tool_roundtrip";
      EXPECT_EQ(p.reasoning, open ? Reasoning::kOpen : Reasoning::kMaybe);
    }
  }
}

TEST(ApiGlm, ToolChoiceStartsAGlmCall) {
  Glm g("glm-4.7.jinja");
  json body = request_of(fixture_case("glm_tool_roundtrip"));
  body["tool_choice"] = "required";
  ParsedRequest req = g.parse(body);
  const std::string gold = golden("glm-4.7.jinja", "glm_tool_roundtrip");
  EXPECT_EQ(g.prompt_text(req), gold + "</think><tool_call>");
  EXPECT_EQ(req.forced_text, "</think><tool_call>");
  EXPECT_EQ(req.gen.choice, (std::vector<std::string>{"get_weather", "get_time"}));
  body["tool_choice"] = json{{"type", "function"}, {"function", {{"name", "get_time"}}}};
  ParsedRequest named = g.parse(body);
  EXPECT_EQ(g.prompt_text(named), gold + "</think><tool_call>get_time");
  EXPECT_TRUE(named.gen.choice.empty());
  // The server splits forced text + answer as one answer: the call comes out, nothing shows as reasoning.
  ChatOutputSplitter split(named.reasoning, named.tools, named.tool_format);
  ChatDelta d = split.push(named.forced_text);
  d.reasoning.clear();
  const ChatDelta rest = split.push("</tool_call>");
  std::vector<ToolCall> calls;
  const ChatDelta tail = split.finish(&calls);
  EXPECT_EQ(d.content + rest.content + tail.content, "");
  EXPECT_EQ(rest.reasoning + tail.reasoning, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_time");
  const json oa = tool_calls_json(calls, false);
  EXPECT_EQ(oa[0]["function"]["arguments"], "{}");  // OpenAI's arguments: a JSON string
}

TEST(ApiGlm, ToolCallArgumentsBecomeAJsonString) {
  std::vector<ToolCall> calls(1);
  calls[0].name = "get_weather";
  calls[0].arguments = json::parse(R"({"city": "Paris", "options": {"a": [1, 2.5, null]}, "zip": "75001"})");
  const json oa = tool_calls_json(calls, true);
  ASSERT_EQ(oa.size(), 1u);
  EXPECT_EQ(oa[0]["index"], 0);
  EXPECT_EQ(oa[0]["type"], "function");
  EXPECT_EQ(oa[0]["function"]["name"], "get_weather");
  ASSERT_TRUE(oa[0]["function"]["arguments"].is_string());
  EXPECT_EQ(json::parse(oa[0]["function"]["arguments"].get<std::string>()), calls[0].arguments);
}

// GLM ends a turn of tool calls with <|observation|>, its GGUF's eom token: generation stops there, so the answer
// is the calls and the tool results follow (the template's turn delta starts with <|observation|>).
TEST(ApiGlm, EndOfMessageEndsGeneration) {
  tern::text::TokenizerData d =
      tern::text::load_hf_tokenizer(std::string(TERN_FIXTURES_DIR) + "/text/small_glm4/tokenizer.json");
  const tern::text::Tokenizer plain(d);
  const int32_t think_end = *plain.find_token("</think>");  // any token stands in for <|observation|>
  const std::vector<int32_t> before = tern::runtime::end_of_generation_ids(plain);
  EXPECT_FALSE(std::binary_search(before.begin(), before.end(), think_end));
  d.eom_id = think_end;
  const tern::text::Tokenizer glm(d);
  EXPECT_EQ(glm.eom_id(), think_end);
  const std::vector<int32_t> eog = tern::runtime::end_of_generation_ids(glm);
  EXPECT_TRUE(std::binary_search(eog.begin(), eog.end(), think_end));
  d.eom_id = 1 << 30;
  EXPECT_THROW(tern::text::Tokenizer{d}, tern::Error);  // an id outside the vocabulary is refused
}

// A request body nested deeper than kMaxJsonDepth is a 400 before anything recurses over it: 200k nested brackets
// in a message field used to overflow the stack while the message was copied (fuzz/fuzz_api.cpp).
TEST(Api, DeeplyNestedBodyIsRefused) {
  auto nested = [](int n) { return std::string(size_t(n), '[') + std::string(size_t(n), ']'); };
  const std::string head = R"({"messages": [{"role": "user", "content": "hi", "x": )";
  // The top-level object is level 0, "messages" 1, the message 2: the outer bracket is level 3.
  EXPECT_NO_THROW(parse_json_body(head + nested(kMaxJsonDepth - 2) + "}]}"));
  for (int n : {kMaxJsonDepth - 1, 200000}) {
    try {
      parse_json_body(head + nested(n) + "}]}");
      ADD_FAILURE() << n << " levels accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(e.message.find("nests deeper"), std::string::npos) << e.message;
    }
  }
}

// A "type" field that is not a string (an object, a number) is a 400 naming the field, not an uncaught
// nlohmann type_error (fuzz/fuzz_api.cpp found a tool whose "type" was an object; fuzz/seeds/api keeps it).
TEST(Api, NonStringTypeFieldsAreA400) {
  Glm g("glm-4.7.jinja");
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  const json fn = {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}};
  struct Bad {
    json body;
    std::string param;
  };
  const std::vector<Bad> bad = {
      {{{"messages", msgs}, {"tools", json::array({{{"type", {{"name", "x"}}}, {"function", fn}}})}}, "tools[0]"},
      {{{"messages", msgs}, {"tools", json::array({{{"type", 7}, {"function", fn}}})}}, "tools[0]"},
      {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", json::array()}, {"text", "hi"}}})}}})}},
       "messages[0].content"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.body.dump());
    try {
      g.parse(b.body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, b.param);
    }
  }
  // The well-formed tool is accepted (the test above is about the field's type, not the tool).
  EXPECT_NO_THROW(g.parse({{"messages", msgs}, {"tools", json::array({{{"type", "function"}, {"function", fn}}})}}));
}
