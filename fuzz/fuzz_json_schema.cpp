// libFuzzer target: the json_schema constraint (serve/json_constraint.h). The input is a schema, a NUL byte and a
// document. The schema goes through check_schema; when it passes (or when there is none: json_object), the
// document is fed byte by byte to the automaton, and then as a constrained decoder would, one token at a time over
// a small vocabulary. Checks: no crash; a document the automaton accepts as complete is a JSON object that
// conforms to the schema (checked by conforms() below, the slow obvious reading of the supported subset); feeding
// it in tokens accepts the same prefix as feeding it in bytes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "serve/json_constraint.h"
#include "text/tokenizer.h"

namespace {

using json = nlohmann::ordered_json;

// JSON Schema: a number with no fractional part (a digits-only literal past uint64 parses as a double, or inf).
bool is_integer(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double x = v.get<double>();
  return std::isinf(x) || std::floor(x) == x;
}

// text with every number literal outside strings replaced by 0: JSON allows numbers of any size, nlohmann refuses
// a float that overflows a double (1e400), so an accepted document with one is checked for its syntax this way.
std::string zero_numbers(const std::string& text) {
  std::string out;
  bool in_str = false, esc = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_str) {
      out += ch;
      if (esc) esc = false;
      else if (ch == '\\') esc = true;
      else if (ch == '"') in_str = false;
      continue;
    }
    if (ch == '"') in_str = true;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
      while (i + 1 < text.size() && std::strchr("0123456789.eE+-", text[i + 1]) != nullptr) ++i;
      out += '0';
      continue;
    }
    out += ch;
  }
  return out;
}

bool has_type(const json& s, const json& v) {
  if (!s.contains("type")) return true;
  auto one = [&](const json& t) {
    return (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
           (t == "number" && v.is_number()) || (t == "integer" && is_integer(v)) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
  };
  const json& t = s["type"];
  if (t.is_string()) return one(t);
  for (const json& x : t)
    if (one(x)) return true;
  return false;
}

// v conforms to schema s (a schema that passed check_schema): every keyword holds.
bool conforms(const json& v, const json* s) {
  if (!s) return true;
  if (s->contains("const") && v != (*s)["const"]) return false;
  if (s->contains("enum")) {
    bool any = false;
    for (const json& e : (*s)["enum"]) any = any || v == e;
    if (!any) return false;
  }
  if (!has_type(*s, v)) return false;
  if (v.is_object()) {
    const bool props = s->contains("properties");
    const bool ap = s->contains("additionalProperties");
    const bool open = props ? ap && (*s)["additionalProperties"] == true : !(ap && (*s)["additionalProperties"] == false);
    for (const auto& [k, x] : v.items()) {
      const json* ps = props && (*s)["properties"].contains(k) ? &(*s)["properties"][k] : nullptr;
      if (!ps && !open) return false;
      if (ps && !conforms(x, ps)) return false;
    }
    if (s->contains("required"))
      for (const json& r : (*s)["required"])
        if (!v.contains(r.get<std::string>())) return false;
  }
  if (v.is_array() && s->contains("items"))
    for (const json& x : v)
      if (!conforms(x, &(*s)["items"])) return false;
  return true;
}

// A small vocabulary of JSON-ish pieces, as a model's would be: every single byte plus multi-byte tokens.
std::vector<std::string> vocab() {
  std::vector<std::string> v;
  for (int c = 0; c < 256; ++c) v.push_back(std::string(1, char(c)));
  for (const char* t : {"{\"", "\":", "\": ", "\",", "\", \"", "\"}", "}}", "]}", "[\"", "\"]", "true", "false", "null",
                        "name", "age", "12", "0.5", "e+", "\\u00", "  ", "\n  ", "{}", "[]", "\"\"", ", "})
    v.push_back(t);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tern::serve::JsonPrefix;
  static const std::vector<std::string> tokens = vocab();
  static const std::vector<bool> special(tokens.size(), false);
  const char* p = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(p, 0, size);
  const size_t cut = nul ? static_cast<const char*>(nul) - p : size;
  const std::string schema_text(p, cut);
  const std::string doc = nul ? std::string(p + cut + 1, size - cut - 1) : std::string();

  json schema = nullptr;
  if (!schema_text.empty()) {
    schema = json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return 0;
    if (!tern::serve::check_schema(schema).empty()) return 0;
  }
  const json* sp = schema.is_null() ? nullptr : &schema;

  // Bytes: the longest accepted prefix, and whether it completes an object.
  JsonPrefix bytes(sp);
  size_t accepted = 0;
  bool done_at = false;
  size_t done_len = 0;
  for (; accepted < doc.size(); ++accepted) {
    if (!bytes.feed(doc[accepted])) break;
    if (bytes.done() && !done_at) {
      done_at = true;
      done_len = accepted + 1;
    }
  }
  if (done_at) {
    const std::string text = doc.substr(0, done_len);
    if (tern::text::utf8_valid(text)) {  // the automaton passes bytes >= 0x80 through; the decoder checks UTF-8
      const json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded()) {  // a number past a double's range (valid JSON): the syntax must still hold
        const json z = json::parse(zero_numbers(text), nullptr, /*allow_exceptions=*/false);
        if (z.is_discarded() || !z.is_object()) __builtin_trap();
      } else if (!v.is_object() || !conforms(v, sp)) {
        __builtin_trap();
      }
    }
  }

  // Tokens: greedy longest token that matches the document, through JsonConstraint's mask; stops where the
  // document stops being accepted or the constraint is done.
  tern::serve::JsonConstraint c(tokens, special, schema);
  std::vector<float> logits(tokens.size());
  size_t at = 0;
  while (at < doc.size() && !c.done()) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    if (!c.mask(logits.data(), int64_t(tokens.size()))) break;
    int32_t best = -1;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (logits[i] == 0.0f && doc.compare(at, tokens[i].size(), tokens[i]) == 0 &&
          (best < 0 || tokens[i].size() > tokens[size_t(best)].size()))
        best = int32_t(i);
    if (best < 0) break;
    c.accept(best);
    at += tokens[size_t(best)].size();
  }
  // The mask lets a token through only if all its bytes are accepted, so the tokens never get past the bytes'
  // accepted prefix (and, since every byte is a token, they reach it unless the constraint finished first).
  if (at > accepted) __builtin_trap();
  if (!c.done() && at < accepted) __builtin_trap();
  return 0;
}
