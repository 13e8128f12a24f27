#include "serve/json_constraint.h"

#include <algorithm>
#include <cmath>

namespace tern::serve {

namespace {
bool ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool hex(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
}  // namespace

static std::string check_schema(const nlohmann::ordered_json& s, const std::string& path) {
  static const char* kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
  static const char* kKeys[] = {"type", "properties", "required", "additionalProperties", "items", "enum", "const",
                                "title", "description", "default", "examples", "$schema"};
  if (!s.is_object()) return path + ": a schema must be an object";
  for (const auto& item : s.items()) {
    const std::string& k = item.key();  // a named copy: clang 14 cannot capture structured bindings
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* x) { return k == x; }) == std::end(kKeys))
      return path + ": the keyword '" + k + "' is not supported";
  }
  if (s.contains("type")) {
    const auto& t = s["type"];
    auto known = [&](const nlohmann::ordered_json& x) {
      return x.is_string() && std::find_if(std::begin(kTypes), std::end(kTypes), [&](const char* n) { return x == n; }) !=
                                  std::end(kTypes);
    };
    if (t.is_array() ? !std::all_of(t.begin(), t.end(), known) || t.empty() : !known(t))
      return path + ": 'type' must be one of object, array, string, number, integer, boolean, null (or a list)";
  }
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) return path + ": 'properties' must be an object";
    for (const auto& [k, v] : s["properties"].items()) {
      std::string e = check_schema(v, path + ".properties." + k);
      if (!e.empty()) return e;
    }
  }
  if (s.contains("required")) {
    if (!s["required"].is_array()) return path + ": 'required' must be an array of names";
    for (const auto& r : s["required"])
      if (!r.is_string() || !s.contains("properties") || !s["properties"].contains(r.get<std::string>()))
        return path + ": every 'required' name must be one of the 'properties'";
  }
  if (s.contains("additionalProperties") && !s["additionalProperties"].is_boolean())
    return path + ": 'additionalProperties' must be true or false (schemas for extra keys are not supported)";
  if (s.contains("items")) {
    std::string e = check_schema(s["items"], path + ".items");
    if (!e.empty()) return e;
  }
  if (s.contains("enum") && (!s["enum"].is_array() || s["enum"].empty())) return path + ": 'enum' must be a non-empty array";
  return "";
}

std::string check_schema(const nlohmann::ordered_json& schema) {
  std::string e = check_schema(schema, "schema");
  if (!e.empty()) return e;
  if (schema.contains("enum") || schema.contains("const") || !schema.contains("type") || schema["type"] != "object")
    return "schema: the top level must be {\"type\": \"object\", ...}";
  return "";
}

bool JsonPrefix::allows_type(const json* s, const char* type) {
  if (!s || !s->contains("type")) return true;
  const json& t = (*s)["type"];
  if (t.is_string()) return t == type;
  return std::any_of(t.begin(), t.end(), [&](const json& x) { return x == type; });
}

// Only the listed properties may appear: properties without additionalProperties: true, or additionalProperties:
// false alone (then no key at all).
bool JsonPrefix::closed(const Frame& f) const {
  if (!f.schema) return false;
  const bool ap = f.schema->contains("additionalProperties");
  if (f.schema->contains("properties")) return !(ap && (*f.schema)["additionalProperties"] == true);
  return ap && (*f.schema)["additionalProperties"] == false;
}

bool JsonPrefix::key_ok(const Frame& f, bool complete) const {
  if (std::find(f.seen.begin(), f.seen.end(), keybuf_) != f.seen.end() && complete) return false;  // no repeats
  if (!closed(f)) return true;
  if (!f.schema->contains("properties")) return false;
  for (const auto& [k, v] : (*f.schema)["properties"].items()) {
    if (std::find(f.seen.begin(), f.seen.end(), k) != f.seen.end()) continue;
    if (complete ? k == keybuf_ : k.compare(0, keybuf_.size(), keybuf_) == 0 && keybuf_.size() <= k.size()) return true;
  }
  return false;
}

bool JsonPrefix::required_met(const Frame& f) const {
  if (!f.schema || !f.schema->contains("required")) return true;
  for (const json& r : (*f.schema)["required"])
    if (std::find(f.seen.begin(), f.seen.end(), r.get<std::string>()) == f.seen.end()) return false;
  return true;
}

bool JsonPrefix::more_keys(const Frame& f) const {
  if (!closed(f)) return true;
  return f.schema->contains("properties") && f.seen.size() < (*f.schema)["properties"].size();
}

bool JsonPrefix::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(c)) return false;
  return true;
}

const nlohmann::ordered_json* JsonPrefix::items_of(const json* s) {
  return s && s->contains("items") ? &(*s)["items"] : nullptr;
}

bool JsonPrefix::close_container() {
  const Frame& f = stack_.back();
  if (f.kind == '{' && !required_met(f)) return false;
  stack_.pop_back();
  return after_value();
}

bool JsonPrefix::after_value() {
  if (stack_.empty()) mode_ = Mode::kDone;
  else mode_ = stack_.back().kind == '{' ? Mode::kObjNext : Mode::kArrNext;
  return true;
}

bool JsonPrefix::end_number(char c) {
  after_value();
  return feed(c);  // the delimiter belongs to the container
}

bool JsonPrefix::value_start(char ch) {
  const unsigned char c = static_cast<unsigned char>(ch);
  const json* s = vschema_;
  if (s && (s->contains("enum") || s->contains("const"))) {
    // Every keyword holds: the const (if any) must be one of the enum (if any), and of the schema's type.
    enum_opts_.clear();
    auto has_type = [&](const json& v) {
      return allows_type(s, v.is_object()            ? "object"
                            : v.is_array()           ? "array"
                            : v.is_string()          ? "string"
                            : v.is_boolean()         ? "boolean"
                            : v.is_null()            ? "null"
                            : v.is_number_integer()  ? "integer"
                                                     : "number") ||
             (v.is_number_integer() && allows_type(s, "number")) ||
             (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && allows_type(s, "integer"));
    };
    auto in_enum = [&](const json& v) {
      return !s->contains("enum") || std::find((*s)["enum"].begin(), (*s)["enum"].end(), v) != (*s)["enum"].end();
    };
    if (s->contains("const")) {
      if (in_enum((*s)["const"]) && has_type((*s)["const"])) enum_opts_.push_back((*s)["const"].dump());
    } else {
      for (const json& v : (*s)["enum"])
        if (has_type(v)) enum_opts_.push_back(v.dump());
    }
    if (enum_opts_.empty()) return false;  // no value satisfies the schema
    enum_so_far_.clear();
    mode_ = Mode::kEnum;
    return feed(ch);
  }
  switch (c) {
    case '{':
      if (!allows_type(s, "object")) return false;
      stack_.push_back({'{', s, {}});
      mode_ = Mode::kKeyOrEnd;
      return true;
    case '[':
      if (!allows_type(s, "array")) return false;
      stack_.push_back({'[', s, {}});
      vschema_ = items_of(s);
      mode_ = Mode::kArrValueOrEnd;
      return true;
    case '"':
      if (!allows_type(s, "string")) return false;
      key_ = false;
      mode_ = Mode::kString;
      return true;
    case 't':
    case 'f':
      if (!allows_type(s, "boolean")) return false;
      lit_ = c == 't' ? "rue" : "alse";
      mode_ = Mode::kLiteral;
      return true;
    case 'n':
      if (!allows_type(s, "null")) return false;
      lit_ = "ull";
      mode_ = Mode::kLiteral;
      return true;
    default:
      if (c != '-' && !digit(c)) return false;
      if (!allows_type(s, "number") && !allows_type(s, "integer")) return false;
      integer_ = !allows_type(s, "number");
      num_ = c == '-' ? Num::kMinus : c == '0' ? Num::kZero : Num::kInt;
      mode_ = Mode::kNumber;
      return true;
  }
}

bool JsonPrefix::feed(char ch) {
  const unsigned char c = static_cast<unsigned char>(ch);
  const bool in_value = mode_ == Mode::kString || mode_ == Mode::kEscape || mode_ == Mode::kUnicode ||
                        mode_ == Mode::kEnum || mode_ == Mode::kNumber || mode_ == Mode::kLiteral;
  if (!in_value) {
    if (ws(c)) {
      if (++ws_run_ > kMaxWhitespace) return false;
    } else {
      ws_run_ = 0;
    }
  }
  switch (mode_) {
    case Mode::kStart:
      if (ws(c)) return true;
      if (c != '{') return false;
      stack_.push_back({'{', root_, {}});
      mode_ = Mode::kKeyOrEnd;
      return true;
    case Mode::kDone: return ws(c);
    case Mode::kValue: return ws(c) || value_start(ch);
    case Mode::kKeyOrEnd:
      if (ws(c)) return true;
      if (c == '}') return close_container();
      [[fallthrough]];
    case Mode::kKey:
      if (ws(c)) return true;
      if (c != '"') return false;
      key_ = true;
      keybuf_.clear();
      if (!key_ok(stack_.back(), false)) return false;
      mode_ = Mode::kString;
      return true;
    case Mode::kColon: {
      if (ws(c)) return true;
      if (c != ':') return false;
      const Frame& f = stack_.back();
      vschema_ = nullptr;
      if (f.schema && f.schema->contains("properties") && (*f.schema)["properties"].contains(f.seen.back()))
        vschema_ = &(*f.schema)["properties"][f.seen.back()];
      mode_ = Mode::kValue;
      return true;
    }
    case Mode::kObjNext:
    case Mode::kArrNext: {
      if (ws(c)) return true;
      const bool obj = mode_ == Mode::kObjNext;
      const Frame& f = stack_.back();
      if (c == ',') {
        if (obj && !more_keys(f)) return false;
        mode_ = obj ? Mode::kKey : Mode::kValue;
        if (!obj) vschema_ = items_of(f.schema);
        return true;
      }
      return c == (obj ? '}' : ']') && close_container();
    }
    case Mode::kArrValueOrEnd:
      if (ws(c)) return true;
      if (c == ']') return close_container();
      return value_start(ch);
    case Mode::kString:
      if (want_low_ && c != '\\') return false;  // a high surrogate escape must be followed by a low one
      if (c == '"') {
        if (key_) {
          if (!key_ok(stack_.back(), true)) return false;
          stack_.back().seen.push_back(keybuf_);
          key_ = false;
          mode_ = Mode::kColon;
          return true;
        }
        return after_value();
      }
      if (c < 0x20) return false;
      if (key_) {
        if (c == '\\' && closed(stack_.back())) return false;  // property names are matched literally
        keybuf_ += ch;
        if (!key_ok(stack_.back(), false)) return false;
      }
      if (c == '\\') mode_ = Mode::kEscape;
      return true;
    case Mode::kEscape:
      if (want_low_ && c != 'u') return false;
      if (key_) keybuf_ += ch;
      if (c == 'u') {
        hex_left_ = 4;
        mode_ = Mode::kUnicode;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        mode_ = Mode::kString;
        return true;
      }
      return false;
    case Mode::kUnicode: {
      // Surrogates only in pairs (\uD800-\uDBFF then \uDC00-\uDFFF), as strict parsers (nlohmann, serde_json) demand;
      // decided at the second digit, so no accepted prefix is a dead end.
      if (!hex(c)) return false;
      const int v = digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      if (hex_left_ == 4) {
        if (want_low_ && v != 0xd) return false;
        hex_hi_ = uint8_t(v << 4);
      } else if (hex_left_ == 3) {
        hex_hi_ = uint8_t(hex_hi_ | v);
        const bool high = hex_hi_ >= 0xd8 && hex_hi_ <= 0xdb, low = hex_hi_ >= 0xdc && hex_hi_ <= 0xdf;
        if (want_low_ != low) return false;
        high_ = high;
      }
      if (key_) keybuf_ += ch;
      if (--hex_left_ == 0) {
        want_low_ = high_;
        high_ = false;
        mode_ = Mode::kString;
      }
      return true;
    }
    case Mode::kLiteral:
      if (lit_.empty() || c != static_cast<unsigned char>(lit_[0])) return false;
      lit_.remove_prefix(1);
      return lit_.empty() ? after_value() : true;
    case Mode::kEnum: {
      const std::string next = enum_so_far_ + ch;
      for (const std::string& o : enum_opts_)
        if (o.compare(0, next.size(), next) == 0) {
          enum_so_far_ = next;
          return true;
        }
      if (std::find(enum_opts_.begin(), enum_opts_.end(), enum_so_far_) == enum_opts_.end()) return false;
      after_value();  // the option is complete; ch belongs to the container
      return feed(ch);
    }
    case Mode::kNumber:
      switch (num_) {
        case Num::kMinus:
          if (c == '0') num_ = Num::kZero;
          else if (digit(c)) num_ = Num::kInt;
          else return false;
          return true;
        case Num::kZero:
        case Num::kInt:
          if (digit(c) && num_ == Num::kInt) return true;
          if ((c == '.' || c == 'e' || c == 'E') && integer_) return false;
          if (c == '.') num_ = Num::kDot;
          else if (c == 'e' || c == 'E') num_ = Num::kE;
          else return end_number(ch);
          return true;
        case Num::kDot:
          if (!digit(c)) return false;
          num_ = Num::kFrac;
          return true;
        case Num::kFrac:
          if (digit(c)) return true;
          if (c == 'e' || c == 'E') {
            num_ = Num::kE;
            return true;
          }
          return end_number(ch);
        case Num::kE:
          if (c == '+' || c == '-') num_ = Num::kESign;
          else if (digit(c)) num_ = Num::kExp;
          else return false;
          return true;
        case Num::kESign:
          if (!digit(c)) return false;
          num_ = Num::kExp;
          return true;
        case Num::kExp:
          if (digit(c)) return true;
          return end_number(ch);
      }
      return false;
  }
  return false;
}

bool TokenConstraint::mask(float* logits, int64_t n_vocab) {
  banned_.clear();  // reused: no allocation per generated token
  bool any = false;
  for (int64_t id = 0; id < n_vocab; ++id) {
    const bool ok = id < static_cast<int64_t>(bytes_.size()) && !special_[id] && !bytes_[id].empty() &&
                    allows(bytes_[id]);
    if (ok) any = true;
    else banned_.push_back(static_cast<int32_t>(id));
  }
  if (!any) return false;
  for (int32_t id : banned_) logits[id] = -INFINITY;
  return true;
}

// Copy-assigning into the same scratch automaton reuses its buffers (stack, keys), so trying every vocabulary
// entry does not allocate once the scratch has grown to the state's size.
bool JsonConstraint::allows(const std::string& bytes) {
  trial_ = state_;
  return trial_.feed(bytes);
}

void JsonConstraint::accept(int32_t token) {
  if (token >= 0 && token < static_cast<int32_t>(bytes_.size())) state_.feed(bytes_[token]);
}

// A token fits when what has been generated plus its bytes is still a prefix of (or exactly) some option.
bool ChoiceConstraint::allows(const std::string& bytes) {
  return std::any_of(options_.begin(), options_.end(), [&](const std::string& o) {
    return o.size() >= so_far_.size() + bytes.size() && o.compare(0, so_far_.size(), so_far_) == 0 &&
           o.compare(so_far_.size(), bytes.size(), bytes) == 0;
  });
}

void ChoiceConstraint::accept(int32_t token) {
  if (token >= 0 && token < static_cast<int32_t>(bytes_.size())) so_far_ += bytes_[token];
}

bool ChoiceConstraint::done() const {
  return std::any_of(options_.begin(), options_.end(), [&](const std::string& o) { return o == so_far_; });
}

}  // namespace tern::serve
