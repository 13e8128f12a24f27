// Chat answer splitting: reasoning before </think>, content, tool calls in the Qwen3.5 and GLM forms; the same
// result however the text is cut into streamed pieces; malformed markup is content. The GLM round trip parses the
// answers the real GLM templates render (tests/fixtures/templates) back into the calls they were rendered from.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "serve/chat_output.h"
#include "text/chat_template.h"

using namespace tern::serve;
using json = nlohmann::ordered_json;

namespace {

struct Split {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  bool operator==(const Split& o) const {
    if (reasoning != o.reasoning || content != o.content || calls.size() != o.calls.size()) return false;
    for (size_t i = 0; i < calls.size(); ++i)
      if (calls[i].name != o.calls[i].name || calls[i].arguments != o.calls[i].arguments) return false;
    return true;
  }
};

std::ostream& operator<<(std::ostream& os, const Split& s) {
  os << "{reasoning " << json(s.reasoning).dump() << ", content " << json(s.content).dump() << ", calls [";
  for (const ToolCall& c : s.calls) os << c.name << c.arguments.dump() << " ";
  return os << "]}";
}

// The text cut at the given positions (ascending), streamed piece by piece.
Split run_cuts(const std::string& text, Reasoning reasoning, const json& tools, ToolCallFormat format,
               const std::vector<size_t>& cuts) {
  ChatOutputSplitter s(reasoning, tools, format);
  Split out;
  size_t from = 0;
  auto add = [&](const ChatDelta& d) {
    out.reasoning += d.reasoning;
    out.content += d.content;
  };
  for (size_t c : cuts) {
    add(s.push(text.substr(from, c - from)));
    from = c;
  }
  add(s.push(text.substr(from)));
  add(s.finish(&out.calls));
  return out;
}

Split run(const std::string& text, Reasoning reasoning, const json& tools, size_t piece,
          ToolCallFormat format = ToolCallFormat::kQwen) {
  std::vector<size_t> cuts;
  for (size_t i = piece; i < text.size(); i += piece) cuts.push_back(i);
  return run_cuts(text, reasoning, tools, format, cuts);
}

Split run(const std::string& text, bool reasoning, const json& tools, size_t piece) {
  return run(text, reasoning ? Reasoning::kOpen : Reasoning::kOff, tools, piece);
}

// Every way of cutting the text in two, and one-byte pieces, give the whole text's result.
void expect_same_streamed(const std::string& text, Reasoning reasoning, const json& tools, ToolCallFormat format) {
  const Split whole = run_cuts(text, reasoning, tools, format, {});
  for (size_t i = 0; i <= text.size(); ++i)
    ASSERT_EQ(run_cuts(text, reasoning, tools, format, {i}), whole) << "cut at byte " << i << " of " << json(text).dump();
  EXPECT_EQ(run(text, reasoning, tools, 1, format), whole) << json(text).dump();
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}}}}}])");

}  // namespace

TEST(ChatOutput, ReasoningThenContent) {
  const std::string text = "Let me think.\nMore thought.\n</think>\n\nThe answer is 4.";
  for (size_t piece : {1, 2, 3, 7, 100}) {
    Split s = run(text, true, nullptr, piece);
    EXPECT_EQ(s.reasoning, "Let me think.\nMore thought.\n") << piece;
    EXPECT_EQ(s.content, "The answer is 4.") << piece;
  }
  Split open = run("still thinking when it stopped", true, nullptr, 4);  // no </think>: all reasoning
  EXPECT_EQ(open.reasoning, "still thinking when it stopped");
  EXPECT_EQ(open.content, "");
  Split off = run(text, false, nullptr, 5);  // reasoning not split: the answer as generated
  EXPECT_EQ(off.content, text);
  EXPECT_EQ(off.reasoning, "");
}

TEST(ChatOutput, ToolCalls) {
  const std::string text =
      "thinking</think>\n\nI will look it up.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
      "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n"
      "</tool_call>\n<tool_call>\n<function=other>\n<parameter=flag>\ntrue\n</parameter>\n<parameter=note>\nhi "
      "there\n</parameter>\n</function>\n</tool_call>";
  for (size_t piece : {1, 3, 11, 1000}) {
    Split s = run(text, true, kTools, piece);
    EXPECT_EQ(s.reasoning, "thinking") << piece;
    EXPECT_EQ(s.content, "I will look it up.") << piece;
    ASSERT_EQ(s.calls.size(), 2u) << piece;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments, json::parse(R"({"city": "Paris", "days": 3, "zip": "75001"})"));
    EXPECT_EQ(s.calls[1].name, "other");
    EXPECT_EQ(s.calls[1].arguments, json::parse(R"({"flag": true, "note": "hi there"})"));  // no schema: JSON if it parses
  }
}

TEST(ChatOutput, ToolCallEdgeCases) {
  // Without tools in the request, tool-call text is plain content.
  const std::string call = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>";
  EXPECT_EQ(run(call, false, nullptr, 4).content, call);
  EXPECT_TRUE(run(call, false, nullptr, 4).calls.empty());
  // A block without a function name stays content; an unclosed block still yields its call.
  Split bad = run("<tool_call>\nnonsense\n</tool_call>", false, kTools, 3);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<tool_call>\nnonsense\n</tool_call>");
  Split cut = run("<tool_call>\n<function=get_weather>\n<parameter=city>\nRo", false, kTools, 5);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, json::parse(R"({"city": "Ro"})"));
  // A tag prefix at the end of the text that never completes is content.
  EXPECT_EQ(run("answer <tool_c", false, kTools, 2).content, "answer <tool_c");
  EXPECT_EQ(run("why </thi", true, nullptr, 2).reasoning, "why </thi");
}

// --- GLM (GLM-4.5 ... GLM-5): <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call> ---

namespace {

const json kGlmTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}, "options": {"type": "object"},
    "tags": {"type": "array"}, "code": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}])");

constexpr ToolCallFormat kGlm = ToolCallFormat::kGlm;

Split glm(const std::string& text, Reasoning reasoning = Reasoning::kOff, size_t piece = 1000000) {
  return run(text, reasoning, kGlmTools, piece, kGlm);
}

}  // namespace

TEST(ChatOutputGlm, FormatFromTemplate) {
  std::string why;
  EXPECT_EQ(tool_call_format_of("{{ '<tool_call>' + tc.name }}<arg_key>{{ k }}</arg_key>", &why), kGlm);
  EXPECT_NE(why.find("<arg_key>"), std::string::npos) << why;
  EXPECT_EQ(tool_call_format_of("<tool_call>\n<function={{ name }}>", &why), ToolCallFormat::kQwen);
  EXPECT_EQ(tool_call_format_of("{{ messages }}", &why), ToolCallFormat::kQwen);
  EXPECT_NE(why.find("default"), std::string::npos) << why;
  EXPECT_TRUE(prompt_opens_think("<|assistant|><think>"));
  EXPECT_TRUE(prompt_opens_think("<think>a</think><|user|>q<|assistant|><think>\n"));
  EXPECT_FALSE(prompt_opens_think("<|assistant|></think>"));
  EXPECT_FALSE(prompt_opens_think("<|assistant|><think></think>"));
  EXPECT_FALSE(prompt_opens_think("<|assistant|>"));
}

TEST(ChatOutputGlm, SingleCallTypedBySchema) {
  const std::string text =
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
      "<arg_value>3</arg_value><arg_key>zip</arg_key><arg_value>75001</arg_value></tool_call>";
  for (size_t piece : {1, 2, 5, 13, 1000}) {
    Split s = glm(text, Reasoning::kOff, piece);
    EXPECT_EQ(s.content, "") << piece;
    ASSERT_EQ(s.calls.size(), 1u) << piece;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    // zip is a string parameter: its digits stay a string; days is an integer.
    EXPECT_EQ(s.calls[0].arguments, json::parse(R"({"city": "Paris", "days": 3, "zip": "75001"})"));
  }
}

TEST(ChatOutputGlm, MultipleCallsAfterReasoningAndContent) {
  const std::string text =
      "Two tools.</think>Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>"
      "</tool_call><tool_call>get_time</tool_call>";
  Split s = glm(text, Reasoning::kOpen, 3);
  EXPECT_EQ(s.reasoning, "Two tools.");
  EXPECT_EQ(s.content, "Let me check.");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, json::parse(R"({"city": "Rome"})"));
  EXPECT_EQ(s.calls[1].name, "get_time");  // a call without arguments
  EXPECT_EQ(s.calls[1].arguments, json::object());
  // GLM-4.5/4.6 write newlines between the parts, and open the think block in the answer.
  const std::string nl =
      "\n<think>Plan.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n"
      "</tool_call>\n<tool_call>get_time\n</tool_call>";
  Split n = glm(nl, Reasoning::kMaybe, 2);
  EXPECT_EQ(n.reasoning, "Plan.");
  EXPECT_EQ(n.content, "");
  ASSERT_EQ(n.calls.size(), 2u);
  EXPECT_EQ(n.calls[0].arguments, json::parse(R"({"city": "Rome"})"));
  EXPECT_EQ(n.calls[1].name, "get_time");
}

TEST(ChatOutputGlm, NestedJsonAndStringValues) {
  const std::string text =
      "<tool_call>get_weather<arg_key>options</arg_key><arg_value>{\"metric\": true, \"extra\": [1, 2.5, null], "
      "\"deep\": {\"a\": {\"b\": [\"c\"]}}}</arg_value><arg_key>tags</arg_key><arg_value>[\"x\", \"y\"]</arg_value>"
      "<arg_key>city</arg_key><arg_value>  {\"not\": \"json\"} \n</arg_value>"
      "<arg_key>code</arg_key><arg_value>x < 1 && y > 2</arg_value>"
      "<arg_key>extra_num</arg_key><arg_value> 42 </arg_value><arg_key>extra_word</arg_key><arg_value>hello</arg_value>"
      "<arg_key>extra_quoted</arg_key><arg_value>\"quoted\"</arg_value><arg_key>extra_bad</arg_key><arg_value>{oops"
      "</arg_value></tool_call>";
  Split s = glm(text);
  ASSERT_EQ(s.calls.size(), 1u) << s;
  const json want = json::parse(R"({
    "options": {"metric": true, "extra": [1, 2.5, null], "deep": {"a": {"b": ["c"]}}},
    "tags": ["x", "y"],
    "city": "  {\"not\": \"json\"} \n",
    "code": "x < 1 && y > 2",
    "extra_num": 42, "extra_word": "hello", "extra_quoted": "quoted", "extra_bad": "{oops"})");
  EXPECT_EQ(s.calls[0].arguments, want) << s.calls[0].arguments.dump();
  EXPECT_EQ(s.content, "");
}

TEST(ChatOutputGlm, MalformedMarkupIsContent) {
  const std::vector<std::string> bad = {
      "<tool_call>get_weather<arg_key>city</arg_key>Paris</tool_call>",                       // no <arg_value>
      "<tool_call><arg_key>city</arg_key><arg_value>x</arg_value></tool_call>",               // no name
      "<tool_call>  \n</tool_call>",                                                          // no name
      "<tool_call>get weather<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",       // a space in the name
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</tool_call>",            // value not closed
      "<tool_call>get_weather<arg_key>city<arg_value>Paris</arg_value></tool_call>",          // key not closed
      "<tool_call>get_weather<arg_key></arg_key><arg_value>Paris</arg_value></tool_call>",    // empty key
      "<tool_call>get_weather<arg_key>a</arg_key><arg_value>1<arg_key>b</arg_key><arg_value>2</arg_value></tool_call>",
      "<tool_call>get_weather<arg_key>a</arg_key><arg_value>1</arg_value>junk</tool_call>",   // text between parts
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>",            // cut off: no </tool_call>
      "<tool_call>get_weather<arg_key>ci",                                                     // cut off in a tag
      "<tool_call>",
      "<tool_cal",
  };
  for (const std::string& b : bad) {
    SCOPED_TRACE(b);
    for (size_t piece : {1, 4, 1000}) {
      Split s = glm(b, Reasoning::kOff, piece);
      EXPECT_TRUE(s.calls.empty()) << s;
      EXPECT_EQ(s.content, b);
    }
    expect_same_streamed(b, Reasoning::kOff, kGlmTools, kGlm);
  }
  // A good call keeps its place; the bad block after it is content, and so is text around the calls.
  Split mixed = glm("Sure.\n<tool_call>get_time</tool_call><tool_call>get_weather<arg_key>x</arg_key></tool_call> ok");
  ASSERT_EQ(mixed.calls.size(), 1u);
  EXPECT_EQ(mixed.calls[0].name, "get_time");
  EXPECT_EQ(mixed.content, "Sure.<tool_call>get_weather<arg_key>x</arg_key></tool_call> ok");
  // Without tools in the request, GLM tool-call text is plain content.
  const std::string call = "<tool_call>get_time</tool_call>";
  Split none = run(call, Reasoning::kOff, nullptr, 3, kGlm);
  EXPECT_TRUE(none.calls.empty());
  EXPECT_EQ(none.content, call);
  // The Qwen form is not parsed as GLM (no name before its first tag), and GLM's is not parsed as Qwen.
  EXPECT_TRUE(glm("<tool_call>\n<function=get_time>\n</function>\n</tool_call>").calls.empty());
  EXPECT_TRUE(run(call, Reasoning::kOff, kGlmTools, 1000, ToolCallFormat::kQwen).calls.empty());
}

TEST(ChatOutputGlm, ThinkStartOnlyAtTheStart) {
  Split s = glm("  \n<think>why</think>\n\nAnswer.", Reasoning::kMaybe, 1);
  EXPECT_EQ(s.reasoning, "why");
  EXPECT_EQ(s.content, "Answer.");
  Split plain = glm("Answer with <think> inside.", Reasoning::kMaybe, 1);
  EXPECT_EQ(plain.reasoning, "");
  EXPECT_EQ(plain.content, "Answer with <think> inside.");
  EXPECT_EQ(glm("<thi", Reasoning::kMaybe, 1).content, "<thi");  // a prefix that never completes is content
  EXPECT_EQ(glm("\n", Reasoning::kMaybe, 1).content, "\n");
}

TEST(ChatOutputGlm, EveryStreamingCutGivesTheSameResult) {
  const std::vector<std::pair<std::string, Reasoning>> texts = {
      {"Think: \xc3\xa9t\xc3\xa9.</think>Checking.\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris "
       "\xe2\x98\x80</arg_value><arg_key>options</arg_key><arg_value>{\"a\": [1, {\"b\": null}]}</arg_value></tool_call>"
       "<tool_call>get_time</tool_call>",
       Reasoning::kOpen},
      {"\n<think>Plan.</think>\n<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
       "</tool_call>",
       Reasoning::kMaybe},
      {"No tools here, just < and </ and <tool and </think", Reasoning::kOff},
      {"</think></think><tool_call>get_time</tool_call></tool_call>", Reasoning::kOpen},
  };
  for (const auto& [text, reasoning] : texts) expect_same_streamed(text, reasoning, kGlmTools, kGlm);
}

// Random markup soup: never a crash, every answer's bytes land in reasoning, content or a call, and the split does
// not depend on where the stream is cut. (fuzz/fuzz_chat_output.cpp runs the same checks on fuzzed input.)
TEST(ChatOutputGlm, RandomMarkupSoup) {
  const std::vector<std::string> atoms = {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                                          "</arg_value>", "<think>", "</think>", "get_time", "get_weather", "city",
                                          "{\"a\": 1}", "[1,", "42", " ", "\n", "<", ">", "/", "x", "\xc3\xa9"};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    const Reasoning r = static_cast<Reasoning>(rng() % 3);
    const Split whole = run_cuts(text, r, kGlmTools, kGlm, {});
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    ASSERT_EQ(run_cuts(text, r, kGlmTools, kGlm, cuts), whole) << json(text).dump();
  }
}

// The GLM templates' own renders of an assistant turn with tool calls (tests/fixtures/templates, goldens from
// jinja2), parsed back: the calls come out as they went in; then the conversation with the tool results renders
// as jinja2 renders it, also as the continued-conversation pieces the server sends (render_turns).
TEST(ChatOutputGlm, RoundTripThroughTheRealTemplates) {
  const std::string dir = std::string(TERN_FIXTURES_DIR) + "/templates/";
  auto read = [&](const std::string& name) {
    std::ifstream f(dir + name, std::ios::binary);
    EXPECT_TRUE(f.good()) << name;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  const json cases = json::parse(read("cases.json"));
  const json goldens = json::parse(read("goldens.json"))["goldens"];
  int n_checked = 0;
  for (const std::string tname : {"glm-4.6.jinja", "glm-4.7.jinja", "glm-5.3.jinja"}) {
    const std::string src = read(tname);
    ASSERT_EQ(tool_call_format_of(src), kGlm) << tname;
    const tern::text::ChatTemplate tpl(src);
    for (const std::string cname : {"glm_tool_roundtrip", "glm_tool_roundtrip_thinking_off"}) {
      SCOPED_TRACE(tname + " / " + cname);
      json c;
      for (const json& x : cases)
        if (x["name"] == cname) c = x;
      std::string golden;
      for (const json& g : goldens)
        if (g["template"] == tname && g["case"] == cname) golden = g.at("expected").get<std::string>();
      ASSERT_FALSE(c.is_null());
      ASSERT_FALSE(golden.empty());
      const json& msgs = c["messages"];
      const json extra = c.value("extra", json::object());
      // The whole conversation, tool results included, as jinja2 renders it; and as continued-turn pieces.
      EXPECT_EQ(tpl.render(msgs, c["tools"], true, extra), golden);
      std::string joined;
      for (const std::string& p : tpl.render_turns(msgs, c["tools"], extra)) joined += p;
      EXPECT_EQ(joined, golden);
      // The assistant turn as the model writes it after its generation prompt, parsed back.
      for (size_t k = 0; k < msgs.size(); ++k) {
        if (msgs[k]["role"] != "assistant" || !msgs[k].contains("tool_calls")) continue;
        json before = json::array();
        for (size_t i = 0; i < k; ++i) before.push_back(msgs[i]);
        const std::string prompt = tpl.render(before, c["tools"], true, extra);
        const std::optional<std::string> answer = tpl.answer_text(msgs, k, c["tools"], extra);
        ASSERT_TRUE(answer.has_value());
        const Reasoning r = prompt_opens_think(prompt) ? Reasoning::kOpen : Reasoning::kMaybe;
        const Split s = run_cuts(*answer, r, c["tools"], kGlm, {});
        expect_same_streamed(*answer, r, c["tools"], kGlm);
        EXPECT_EQ(s.reasoning, msgs[k].value("reasoning_content", "")) << json(*answer).dump();
        EXPECT_EQ(s.content, msgs[k]["content"]) << json(*answer).dump();
        const json& want = msgs[k]["tool_calls"];
        ASSERT_EQ(s.calls.size(), want.size()) << json(*answer).dump();
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(s.calls[i].name, want[i]["function"]["name"]);
          EXPECT_EQ(s.calls[i].arguments, want[i]["function"]["arguments"]) << s.calls[i].arguments.dump();
        }
        ++n_checked;
      }
    }
  }
  EXPECT_EQ(n_checked, 6);
}

TEST(ChatOutputGlm, ForcedCall) {
  ForcedCall any = forced_tool_call(kGlm, true, "", kGlmTools);
  EXPECT_EQ(any.text, "</think><tool_call>");
  EXPECT_EQ(any.choice, (std::vector<std::string>{"get_weather", "get_time"}));
  ForcedCall named = forced_tool_call(kGlm, false, "get_time", kGlmTools);
  EXPECT_EQ(named.text, "<tool_call>get_time");
  EXPECT_TRUE(named.choice.empty());
  // The answer after the forced text: the splitter sees the forced text first, as the server feeds it.
  Split s = run_cuts(any.text + "get_time</tool_call>", Reasoning::kOpen, kGlmTools, kGlm, {any.text.size()});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "get_time");
  ForcedCall qwen = forced_tool_call(ToolCallFormat::kQwen, true, "", kTools);
  EXPECT_EQ(qwen.text, "\n</think>\n\n<tool_call>\n<function=");
  EXPECT_EQ(qwen.choice, (std::vector<std::string>{"get_weather>\n"}));
}

// The one check of an OpenAI tool definition (server and `tern chat --tools`): any JSON value, never a throw.
TEST(ToolDefinition, EveryMalformedShapeNamesItsField) {
  const json fn = {{"name", "f"}, {"parameters", {{"type", "object"}}}};
  EXPECT_FALSE(check_tool_definition({{"type", "function"}, {"function", fn}}));
  EXPECT_FALSE(check_tool_definition({{"type", "function"}, {"function", {{"name", "f"}, {"parameters", nullptr}}}}));
  const std::vector<std::pair<json, std::string>> bad = {
      {json::array(), ""}, {7, ""}, {nullptr, ""},
      {{{"function", fn}}, ""},                                  // no type
      {{{"type", {{"name", "x"}}}, {"function", fn}}, ""},       // type an object
      {{{"type", 7}, {"function", fn}}, ""},                     // type a number
      {{{"type", "retrieval"}, {"function", fn}}, ""},           // another type
      {{{"type", "function"}}, ""},                              // no function
      {{{"type", "function"}, {"function", "f"}}, ""},           // function not an object
      {{{"type", "function"}, {"function", json::object()}}, ".function.name"},
      {{{"type", "function"}, {"function", {{"name", ""}}}}, ".function.name"},
      {{{"type", "function"}, {"function", {{"name", 3}}}}, ".function.name"},
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::array({1})}}}}, ".function.parameters"},
  };
  for (const auto& [tool, field] : bad) {
    const auto e = check_tool_definition(tool);
    ASSERT_TRUE(e) << tool.dump();
    EXPECT_EQ(e->field, field) << tool.dump();
    EXPECT_FALSE(e->expected.empty());
  }
}
