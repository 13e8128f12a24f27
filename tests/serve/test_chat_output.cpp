// Chat answer splitting: reasoning before </think>, content, Qwen3.5-form tool calls; the same result however the
// text is cut into streamed pieces.
#include <gtest/gtest.h>

#include "serve/chat_output.h"

using namespace tern::serve;
using json = nlohmann::ordered_json;

namespace {

struct Split {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

Split run(const std::string& text, bool reasoning, const json& tools, size_t piece) {
  ChatOutputSplitter s(reasoning, tools);
  Split out;
  for (size_t i = 0; i < text.size(); i += piece) {
    ChatDelta d = s.push(text.substr(i, piece));
    out.reasoning += d.reasoning;
    out.content += d.content;
  }
  ChatDelta d = s.finish(&out.calls);
  out.reasoning += d.reasoning;
  out.content += d.content;
  return out;
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
