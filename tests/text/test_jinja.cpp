// Jinja interpreter and chat-template tests. Expected renders come from Python jinja2 in transformers' chat
// template environment (tools/gen_template_goldens.py): goldens.json (real model templates x chat cases) and
// features.json (one Jinja feature per template). Every comparison is byte-exact: a prompt that differs by one
// byte tokenises differently.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"
#include "text/chat_template.h"
#include "text/jinja.h"

namespace {

using json = nlohmann::ordered_json;
using tern::Error;
using tern::text::jinja::Template;

const std::string kDir = std::string(TERN_FIXTURES_DIR) + "/templates/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json read_json(const std::string& name) { return json::parse(read_file(kDir + name)); }

// Shows where two renders first differ, so a failure names the byte.
std::string first_diff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n want: ..." + json(want.substr(from, 80)).dump() +
         "\n got:  ..." + json(got.substr(from, 80)).dump();
}

std::string render_or_error(const std::function<std::string()>& fn, bool* threw, std::string* err) {
  try {
    *threw = false;
    return fn();
  } catch (const Error& e) {
    *threw = true;
    *err = e.what();
    return "";
  }
}

TEST(ChatTemplateGolden, RealTemplatesMatchTransformers) {
  json cases = read_json("cases.json");
  json goldens = read_json("goldens.json")["goldens"];
  ASSERT_GE(goldens.size(), 80u);
  std::map<std::string, json> by_name;
  for (const auto& c : cases) by_name[c["name"].get<std::string>()] = c;
  int n_ok = 0;
  for (const auto& g : goldens) {
    const std::string tname = g["template"], cname = g["case"];
    SCOPED_TRACE(tname + " / " + cname);
    const json& c = by_name.at(cname);
    std::string src = read_file(kDir + tname);
    bool threw;
    std::string err;
    std::string got = render_or_error(
        [&] {
          return tern::text::render_chat(src, c["messages"], c.value("tools", json()),
                                         c.value("add_generation_prompt", false), c.value("extra", json::object()));
        },
        &threw, &err);
    if (g.contains("error")) {
      EXPECT_TRUE(threw) << "transformers raised " << g["error"] << " but we rendered:\n" << got;
      continue;
    }
    ASSERT_FALSE(threw) << err;
    const std::string want = g["expected"];
    EXPECT_EQ(got, want) << first_diff(want, got);
    n_ok += got == want;
  }
  EXPECT_GT(n_ok, 60);
}

TEST(JinjaFeatures, MatchPythonJinja2) {
  json feats = read_json("features.json")["features"];
  ASSERT_GE(feats.size(), 60u);
  for (const auto& f : feats) {
    SCOPED_TRACE(f["name"].get<std::string>());
    bool threw;
    std::string err;
    std::string got = render_or_error([&] { return Template(f["template"].get<std::string>()).render(f["context"]); },
                                      &threw, &err);
    if (f.contains("error")) {
      EXPECT_TRUE(threw) << "jinja2 raised " << f["error"] << " but we rendered: " << json(got).dump();
      continue;
    }
    ASSERT_FALSE(threw) << err;
    const std::string want = f["expected"];
    EXPECT_EQ(got, want) << first_diff(want, got);
  }
}

std::string error_of(const std::string& src, const json& ctx = json::object()) {
  try {
    Template(src).render(ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(JinjaErrors, UnsupportedConstructsNameThemselvesAndTheirPosition) {
  EXPECT_NE(error_of("ab\n  {% include 'x' %}").find("line 2, column 6: unsupported tag 'include'"), std::string::npos)
      << error_of("ab\n  {% include 'x' %}");
  EXPECT_NE(error_of("{% call m() %}x{% endcall %}").find("unsupported tag 'call'"), std::string::npos);
  EXPECT_NE(error_of("{% import 'a' as b %}").find("unsupported tag 'import'"), std::string::npos);
  EXPECT_NE(error_of("{% extends 'a' %}").find("unsupported tag 'extends'"), std::string::npos);
  EXPECT_NE(error_of("x\n{{ 1|nosuch }}").find("line 2, column 6: unsupported filter 'nosuch'"), std::string::npos)
      << error_of("x\n{{ 1|nosuch }}");
  EXPECT_NE(error_of("{{ 1 is nosuch }}").find("unsupported test 'nosuch'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a{}'.format(1) }}").find("str.format"), std::string::npos);
  EXPECT_NE(error_of("{{ [1].append(2) }}").find("list.append"), std::string::npos);
  EXPECT_NE(error_of("{% for x in xs recursive %}{% endfor %}").find("recursive"), std::string::npos);
}

TEST(JinjaErrors, RaiseExceptionCarriesTheMessage) {
  std::string e = error_of("{%- if true %}\n  {{- raise_exception('No user query found in messages.') }}{% endif %}");
  EXPECT_NE(e.find("No user query found in messages."), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
}

TEST(JinjaErrors, UnterminatedTagsReportPosition) {
  EXPECT_NE(error_of("hello\n  {{ name ").find("line 2, column 3"), std::string::npos) << error_of("hello\n  {{ name ");
  EXPECT_NE(error_of("{% if x %}a").find("unexpected end of template"), std::string::npos);
  EXPECT_NE(error_of("a {# comment").find("line 1, column 3: missing end of comment"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("{% endfor %}").find("unexpected 'endfor'"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside of a loop"), std::string::npos);
}

TEST(JinjaErrors, UndefinedMisuseIsAnError) {
  EXPECT_NE(error_of("{{ missing.attr }}").find("'missing' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ d.a.b }}", {{"d", json::object()}}).find("has no attribute 'a'"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 + 'a' }}").find("can only concatenate str"), std::string::npos);
}

TEST(JinjaErrors, RunawayRecursionAndNestingAreErrorsNotCrashes) {
  EXPECT_NE(error_of("{% macro a() %}{{ a() }}{% endmacro %}{{ a() }}").find("call depth"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply"),
            std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplate, RejectsBadInputShapes) {
  EXPECT_THROW(tern::text::render_chat("{{ 1 }}", json::object(), json(), true, json()), Error);
  EXPECT_THROW(tern::text::render_chat("{{ 1 }}", json::array({1}), json(), true, json()), Error);
  EXPECT_THROW(tern::text::render_chat("{{ 1 }}", json::array(), json::object(), true, json()), Error);
  EXPECT_EQ(tern::text::render_chat("{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}",
                                    json::array(), json(), true, json()),
            "TrueTrueTrue");
}

TEST(ChatTemplate, ReusableAcrossRenders) {
  tern::text::ChatTemplate t("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  json a = json::array({{{"role", "user"}, {"content", "x"}}});
  json b = json::array({{{"role", "user"}, {"content", "y"}}, {{"role", "assistant"}, {"content", "z"}}});
  EXPECT_EQ(t.render(a, json(), false, json()), "user:x;");
  EXPECT_EQ(t.render(b, json(), false, json()), "user:y;assistant:z;");
}

// Continued conversations with the real Qwen3.5 template. Expected texts are written from the template's rules:
// the generation prompt is "<|im_start|>assistant\n<think>\n" with enable_thinking, the newest answer renders as
// "<think>\n" + reasoning + "\n</think>\n\n" + content, earlier answers (before the last user message) as the
// content only.
TEST(ChatTemplate, ContinuedConversationQwen35) {
  tern::text::ChatTemplate t(read_file(kDir + "qwen3.5-0.8b.jinja"));
  const json think = {{"enable_thinking", true}};
  const std::string gen = "<|im_start|>assistant\n<think>\n";
  json msgs = json::array({{{"role", "user"}, {"content", "Hi"}},
                           {{"role", "assistant"}, {"content", "Greet back.\n</think>\n\nHello!"}},
                           {{"role", "user"}, {"content", "Bye"}}});
  EXPECT_EQ(t.answer_text(msgs, 1, json(), think), "Greet back.\n</think>\n\nHello!");
  const std::string delta1 = "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n" + gen;
  EXPECT_EQ(t.turn_delta(msgs, 1, json(), think), delta1);
  const std::string first = "<|im_start|>user\nHi<|im_end|>\n" + gen;
  EXPECT_EQ(t.render_turns(msgs, json(), think),
            (std::vector<std::string>{first, "Greet back.\n</think>\n\nHello!", delta1}));
  // The plain render drops the earlier think block; the continued one keeps what the model saw.
  EXPECT_EQ(t.render(msgs, json(), true, think),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n" +
                gen);

  // A third turn extends the second one's pieces.
  json more = msgs;
  more.push_back({{"role", "assistant"}, {"content", "Part.\n</think>\n\nFarewell."}});
  more.push_back({{"role", "user"}, {"content", "Again"}});
  const std::vector<std::string> p3 = t.render_turns(more, json(), think);
  ASSERT_EQ(p3.size(), 5u);
  EXPECT_EQ(p3[3], "Part.\n</think>\n\nFarewell.");
  EXPECT_EQ(p3[4], "<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n" + gen);
  // The second turn's prompt is a prefix of the third's: pieces 0..2 are the second turn's delta included.
  EXPECT_EQ(p3[2], delta1);
  // With a TurnCache each turn starts from the previous turn's pieces, and gets the same result.
  tern::text::TurnCache cache;
  EXPECT_EQ(t.render_turns(json::array({msgs[0]}), json(), think, &cache), (std::vector<std::string>{first}));
  EXPECT_EQ(t.render_turns(msgs, json(), think, &cache),
            (std::vector<std::string>{first, "Greet back.\n</think>\n\nHello!", delta1}));
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(t.render_turns(more, json(), think, &cache), p3);
  EXPECT_EQ(cache.hits(), 2);
  // Other extra context, other conversation: no hit.
  EXPECT_EQ(t.render_turns(more, json(), json(), &cache), t.render_turns(more, json(), json()));
  EXPECT_EQ(cache.hits(), 2);

  // An answer without a think block (written by the client) shows the empty block the template gives it.
  msgs[1]["content"] = "Hello!";
  EXPECT_EQ(t.answer_text(msgs, 1, json(), think), "\n</think>\n\nHello!");
  // Reasoning given as a field is put back in front of the content.
  msgs[1]["reasoning_content"] = "Greet back.";
  EXPECT_EQ(t.answer_text(msgs, 1, json(), think), "Greet back.\n</think>\n\nHello!");

  // Without thinking the generation prompt closes an empty think block; the answer is the content alone.
  json plain = msgs;
  plain[1] = {{"role", "assistant"}, {"content", "Hello!"}};
  EXPECT_EQ(t.answer_text(plain, 1, json(), json()), "Hello!");
  EXPECT_EQ(t.turn_delta(plain, 1, json(), json()),
            "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");

  // Not an assistant message, or out of range: nothing.
  EXPECT_FALSE(t.answer_text(msgs, 0, json(), think));
  EXPECT_FALSE(t.turn_delta(msgs, 7, json(), think));
}

TEST(ChatTemplate, ContinuedConversationFallsBack) {
  json msgs = json::array({{{"role", "user"}, {"content", "x"}},
                           {{"role", "assistant"}, {"content", "y"}},
                           {{"role", "user"}, {"content", "z"}}});
  // A template that does not rewrite answers: the pieces concatenate to the plain render.
  tern::text::ChatTemplate same(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  EXPECT_EQ(same.render_turns(msgs, json(), json()),
            (std::vector<std::string>{"<user>x</user><assistant>", "y", "</assistant><user>z</user><assistant>"}));
  // A template that does not show the answer verbatim: one piece, the plain render.
  tern::text::ChatTemplate upper(
      "{% for m in messages %}{{ m.role }}:{{ m.content | upper }};{% endfor %}{% if add_generation_prompt %}A:{% endif %}");
  EXPECT_FALSE(upper.turn_delta(msgs, 1, json(), json()));
  EXPECT_EQ(upper.render_turns(msgs, json(), json()), (std::vector<std::string>{"user:X;assistant:Y;user:Z;A:"}));
  // A generation prompt that is not where the answer starts (the answer gets a different opening): no answer text.
  tern::text::ChatTemplate other(
      "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[bot]{% endif %}");
  EXPECT_FALSE(other.answer_text(msgs, 1, json(), json()));
  EXPECT_EQ(other.render_turns(msgs, json(), json()), (std::vector<std::string>{"[user]x[assistant]y[user]z[bot]"}));
  // The marker text inside a message is not mistaken for the answer's place.
  json sneaky = msgs;
  sneaky[2]["content"] = "\x01tern-answer-end\x01";
  EXPECT_FALSE(same.turn_delta(sneaky, 1, json(), json()));
  // Errors of the whole conversation still reach the caller.
  tern::text::ChatTemplate strict("{% if messages[-1].role != 'user' %}{{ raise_exception('last must be user') }}{% endif %}ok");
  json bad = msgs;
  bad.push_back({{"role", "assistant"}, {"content", "w"}});
  EXPECT_THROW(strict.render_turns(bad, json(), json()), Error);
}

// Integers are int64 where Python's are unbounded: overflow is an error, never a wrapped value or a trap
// (INT64_MIN // -1), and `*` / `**` cannot run away on one expression (inputs of fuzz/fuzz_jinja.cpp).
TEST(Jinja, IntegerLimits) {
  auto render = [](const std::string& src) { return Template(src).render(json::object()); };
  EXPECT_EQ(render("{{ 9223372036854775806 + 1 }}"), "9223372036854775807");
  EXPECT_THROW(render("{{ 9223372036854775807 + 1 }}"), Error);
  EXPECT_THROW(render("{{ -9223372036854775807 - 2 }}"), Error);
  EXPECT_THROW(render("{{ 4611686018427387904 * 2 }}"), Error);
  EXPECT_THROW(render("{{ -(-9223372036854775807 - 1) }}"), Error);
  EXPECT_THROW(render("{{ (-9223372036854775807 - 1) // -1 }}"), Error);
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }}|{{ 7 // -1 }}|{{ -7 % -1 }}|{{ 7 // -2 }}"), "0|-7|0|-4");
  EXPECT_EQ(render("{{ 2 ** 62 }}|{{ (-2) ** 63 }}|{{ 3 ** 0 }}|{{ 1 ** 1000000000000000000 }}|{{ (-1) ** 999999999999 }}"),
            "4611686018427387904|-9223372036854775808|1|1|-1");
  EXPECT_THROW(render("{{ 2 ** 63 }}"), Error);
  EXPECT_THROW(render("{{ 'ab' * 100000000000 }}"), Error);
  EXPECT_THROW(render("{{ ([1] * 100001) | length }}"), Error);
  EXPECT_EQ(render("{{ ([1, 2] * 3) | length }}|{{ 'ab' * 2 }}|{{ 'x' * -1 }}"), "6|abab|");
  // An empty sequence times a huge count is empty at once (fuzz/fuzz_jinja.cpp: a 2e11-step loop of no output).
  EXPECT_EQ(render("{{ '' * 199999999999 }}|{{ ([] * 199999999999) | length }}|{{ 199999999999 * '' }}"), "|0|");
}

// Float literals and float()/int() follow Python: beyond the double range is +-inf, below it 0.0, never an error
// or a non-tern exception (fuzz/fuzz_jinja.cpp found `{{ 1e1589.123 }}` escaping as std::out_of_range). Expected
// strings from jinja2 3.1. int() of a finite float beyond int64 is an error: Python would give a big int tern lacks.
TEST(Jinja, FloatLimits) {
  auto render = [](const std::string& src) { return Template(src).render(json::object()); };
  EXPECT_EQ(render("{{ 1e1589 }}|{{ -1e999 }}|{{ 1e-999 }}|{{ 1.5e3 }}"), "inf|-inf|0.0|1500.0");
  EXPECT_EQ(render("{{ '1e999' | float }}|{{ '1e999' | int }}|{{ 'x' | float }}|{{ '2.5' | int }}"), "inf|0|0.0|2");
  EXPECT_EQ(render("{{ '0x10' | float }}|{{ 9.2e18 | int }}"), "0.0|9200000000000000000");
  EXPECT_THROW(render("{{ 1e20 | int(7) }}"), Error);
  EXPECT_THROW(render("{{ '-1e19' | int }}"), Error);
  // The fuzzer's input: whatever it parses to, it must be a tern::Error or a render, nothing else.
  EXPECT_EQ(render("{{ 1e1589.123 }}"), "");  // jinja2: attribute 123 of inf, undefined
  EXPECT_THROW(render("{% set x = [1] %}{{ x.99999999999999999999 }}"), Error);
}

}  // namespace
