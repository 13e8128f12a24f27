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

}  // namespace
