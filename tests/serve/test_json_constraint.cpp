// response_format json_object: the prefix automaton accepts exactly prefixes of JSON object texts, and the
// scheduler's constrained answers are always such prefixes (complete objects when they end by themselves).
#include <gtest/gtest.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "serve/json_constraint.h"
#include "serve/scheduler.h"
#include "text/gguf_vocab.h"

using namespace tern;
using namespace tern::serve;

namespace {

using ojson = nlohmann::ordered_json;

// Whether the automaton (with `schema`, or any object when null) accepts `s` as a prefix, and *done: whether `s`
// completes the object.
bool accepts(const std::string& s, const ojson* schema = nullptr, bool* done = nullptr) {
  JsonPrefix p(schema);
  const bool ok = p.feed(s);
  if (done) *done = ok && p.done();
  return ok;
}

// The bundled model, for constrained answers from the scheduler.
struct TinyModel {
  TinyModel() {
    runtime::EngineOptions o;
    o.model_path = TERN_FIXTURES_DIR "/../../models/tern-tiny-q35moe.gguf";
    o.n_ctx = 256;
    o.threads = 1;
    engine = std::make_unique<runtime::Engine>(o);
    tok = std::make_unique<text::Tokenizer>(text::tokenizer_data_from_gguf(engine->model().file()));
  }
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<text::Tokenizer> tok;
};

enum class Want { kComplete, kRejected };

// One table of texts, one verdict. kComplete: accepted and done, valid JSON for nlohmann's parser (the reference),
// and every proper prefix accepted but not done. kRejected: refused (at some byte).
void expect_all(Want want, std::initializer_list<const char*> texts, const ojson* schema = nullptr) {
  for (const char* t : texts) {
    const std::string s = t;
    bool done = false;
    if (want == Want::kRejected) {
      EXPECT_FALSE(accepts(s, schema)) << s;
      continue;
    }
    EXPECT_TRUE(accepts(s, schema, &done)) << s;
    EXPECT_TRUE(done) << s;
    EXPECT_TRUE(nlohmann::json::accept(s)) << s;
    for (size_t n = 0; n < s.size(); ++n) {
      if (s.find_first_not_of(" \n", n) == std::string::npos) break;  // only trailing whitespace left: done already
      EXPECT_TRUE(accepts(s.substr(0, n), schema, &done)) << s.substr(0, n);
      EXPECT_FALSE(done) << s.substr(0, n);
    }
  }
}

}  // namespace

TEST(JsonPrefix, CompleteObjects) {
  expect_all(Want::kComplete, {"{}", " { } ", "{\"a\":1}", "{\"a\": [1, -2.5e+3, 0, true, false, null, \"x\"]}",
                               "{\"k\": {\"n\": {\"m\": []}}, \"e\": \"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"}",
                               "{\"utf8\": \"caf\xc3\xa9\"}", "{\"a\":0.5E-2}\n",
                               "{\"a\": [1, -2.5e+3, {\"b\": null}], \"c\": \"d\\u00e9\"}"});
}

TEST(JsonPrefix, Rejects) {
  expect_all(Want::kRejected, {"[1]", "\"x\"", "1", "{1:2}", "{\"a\" 1}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":1.e3}",
                               "{\"a\":-}", "{\"a\":tru}", "{\"a\":nul }", "{\"a\":1,}", "{\"a\":[1,]}",
                               "{\"a\":\"\\x\"}", "{\"a\":\"\\u12g4\"}", "{\"a\":\"line\nbreak\"}", "{}}", "{} x", "{,}",
                               "{\"a\":1]"});
}

// \u escapes of surrogates only as a high-low pair, refused at the first digit that rules a pair out: a lone one is
// not JSON to nlohmann or serde_json (fuzz/fuzz_json_schema.cpp found "\ud41d\ude00" accepted).
TEST(JsonPrefix, SurrogatePairs) {
  expect_all(Want::kComplete, {"{\"a\": \"\\ud83d\\ude00\\uD83D\\uDE00 \\ud7ff\\ue000\"}"});
  expect_all(Want::kRejected, {"{\"a\": \"\\udc", "{\"a\": \"\\ud41d\\ude", "{\"a\": \"\\ud83dx", "{\"a\": \"\\ud83d\"",
                               "{\"a\": \"\\ud83d\\n", "{\"a\": \"\\ud83d\\u0", "{\"a\": \"\\ud83d\\ud8"});
  EXPECT_TRUE(accepts("{\"a\": \"\\ud83d\\ud"));  // \udc00-\udfff can still follow
}

TEST(JsonConstraint, ScheduledAnswersAreJsonObjects) {
  TinyModel m;
  const text::Tokenizer& tok = *m.tok;
  Scheduler s(*m.engine, tok, SchedulerOptions{});
  int complete = 0;
  for (int seed = 0; seed < 6; ++seed) {
    GenRequest r;
    r.prompt = tok.encode("<|im_start|>user\nGive me a JSON object.<|im_end|>\n<|im_start|>assistant\n", true);
    r.max_tokens = 96;
    r.json_object = true;
    r.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
    r.sampling.seed = seed;
    auto c = s.submit(r);
    std::string text;
    while (!c->wait(&text, std::chrono::milliseconds(200))) {}
    bool done = false;
    EXPECT_TRUE(accepts(text, nullptr, &done)) << "seed " << seed << ": " << text;
    if (c->finish() == Finish::kStop) {
      EXPECT_TRUE(done) << text;
      EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
      ++complete;
    } else {
      EXPECT_EQ(c->finish(), Finish::kLength);
    }
  }
  std::printf("json_object: %d of 6 answers closed their object within 96 tokens\n", complete);
}

TEST(ChoiceConstraint, OneOfTheOptionsThenFree) {
  const std::vector<std::string> bytes = {"get", "_weather", "_time", ">\n", ">\nx", "x", "", "<|im_end|>"};
  const std::vector<bool> special = {false, false, false, false, false, false, false, true};
  ChoiceConstraint c(bytes, special, {"get_weather>\n", "get_time>\n"});
  auto allowed = [&] {
    std::vector<float> l(bytes.size(), 0.0f);
    EXPECT_TRUE(c.mask(l.data(), static_cast<int64_t>(l.size())));
    std::vector<int> ok;
    for (size_t i = 0; i < l.size(); ++i)
      if (l[i] == 0.0f) ok.push_back(static_cast<int>(i));
    return ok;
  };
  EXPECT_EQ(allowed(), (std::vector<int>{0}));
  c.accept(0);
  EXPECT_EQ(allowed(), (std::vector<int>{1, 2}));
  c.accept(2);
  EXPECT_FALSE(c.done());
  EXPECT_EQ(allowed(), (std::vector<int>{3}));  // ">\nx" would run past the option
  c.accept(3);
  EXPECT_TRUE(c.done());
  EXPECT_FALSE(c.ends_answer());
}

namespace {
const ojson kPerson = ojson::parse(R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
  "color": {"enum": ["red", "green", 7]}, "ratio": {"type": ["number", "null"]}}, "required": ["name", "age"]})");
}  // namespace

TEST(JsonSchema, Conforming) {
  expect_all(Want::kComplete,
             {R"({"name": "x", "age": 3})", R"({"age": -3, "name": "\u00e9", "color": "red", "tags": ["a", "b"]})",
              R"({"name":"","age":0,"color":7,"ratio":null})", R"({"name":"a","age":1,"ratio":2.5e3,"tags":[]})"},
             &kPerson);
}

TEST(JsonSchema, Violations) {
  expect_all(Want::kRejected,
             {R"({"name": "x"})", R"({})", R"({"nam")", R"({"x")", R"({"age": 3.5)", R"({"age": 1e3)", R"({"name": 1)",
              R"({"color": "blue")", R"({"color": 8)", R"({"age": 1, "age")", R"({"tags": [1)", R"({"tags": {)",
              R"({"ratio": "a")", R"({"name": "a", "age": 1, "tags": ["x"], )" R"("color": "red", "ratio": 1,)"},
             &kPerson);
}

// enum, const and type all hold (JSON Schema): a value of the enum outside the type, or a const outside the enum,
// is refused; no value satisfying the schema means the value cannot start (found writing fuzz/fuzz_json_schema.cpp).
TEST(JsonSchema, EnumConstAndTypeTogether) {
  const ojson s = ojson::parse(R"({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", 1]},
    "b": {"const": 2, "enum": [1, 2.0]}, "c": {"const": 3, "enum": [1]}, "d": {"type": "integer", "enum": [1.0, 1.5]}}})");
  ASSERT_EQ(check_schema(s), "");
  expect_all(Want::kComplete, {R"({"a": "x"})", R"({"b": 2})", R"({"d": 1.0})"}, &s);
  expect_all(Want::kRejected, {R"({"a": 1)", R"({"b": 1)", R"({"c": 3)", R"({"c": 1)", R"({"d": 1.5)"}, &s);
  // additionalProperties: false without properties: no key at all.
  const ojson none = ojson::parse(R"({"type": "object", "additionalProperties": false})");
  expect_all(Want::kComplete, {"{}", " { } "}, &none);
  expect_all(Want::kRejected, {R"({")", R"({"a": 1})"}, &none);
}

TEST(JsonSchema, CheckSchema) {
  EXPECT_EQ(check_schema(kPerson), "");
  EXPECT_NE(check_schema(nlohmann::ordered_json::parse(R"({"type": "object", "anyOf": []})")).find("anyOf"), std::string::npos);
  EXPECT_NE(check_schema(nlohmann::ordered_json::parse(R"({"type": "array"})")), "");
  EXPECT_NE(check_schema(nlohmann::ordered_json::parse(R"({"type": "object", "required": ["a"]})")), "");
  EXPECT_NE(check_schema(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"a": {"type": "date"}}})")), "");
  EXPECT_NE(check_schema(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"a": {"pattern": "x"}}})")), "");
}

// With a small schema even the tiny model's answers complete, and conform.
TEST(JsonSchema, ScheduledAnswersConform) {
  TinyModel m;
  const text::Tokenizer& tok = *m.tok;
  Scheduler s(*m.engine, tok, SchedulerOptions{});
  const auto schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}}, "required": ["ok", "n"]})");
  for (int seed = 0; seed < 4; ++seed) {
    GenRequest r;
    r.prompt = tok.encode("<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n", true);
    r.max_tokens = 200;  // this model likes whitespace: up to kMaxWhitespace tokens between JSON tokens
    r.json_object = true;
    r.json_schema = schema;
    r.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
    r.sampling.seed = seed;
    auto c = s.submit(r);
    std::string text;
    while (!c->wait(&text, std::chrono::milliseconds(200))) {}
    ASSERT_EQ(c->finish(), Finish::kStop) << text;
    const auto j = nlohmann::json::parse(text);
    EXPECT_TRUE(j["ok"].is_boolean()) << text;
    EXPECT_TRUE(j["n"] == 1 || j["n"] == 2 || j["n"] == 3) << text;
    EXPECT_EQ(j.size(), 2u) << text;
  }
}
