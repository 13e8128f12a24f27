// Python semantics for jinja values: constructors, truthiness, str/repr, ==/<, json.dumps, UTF-8.
#include "text/jinja_value.h"

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace tern::text::jinja {

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::list(List items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = is_tuple;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::dict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::name_space(Dict items) {
  Value v = dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_name_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}
Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using J = nlohmann::ordered_json;
  switch (j.type()) {
    case J::value_t::null: return none();
    case J::value_t::boolean: return boolean(j.get<bool>());
    case J::value_t::number_integer: return integer(j.get<int64_t>());
    case J::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) fail("chat template input: integer %llu exceeds int64", (unsigned long long)u);
      return integer(static_cast<int64_t>(u));
    }
    case J::value_t::number_float: return number(j.get<double>());
    case J::value_t::string: return string(j.get<std::string>());
    case J::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case J::value_t::object: {
      Dict items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json(e));
      return dict(std::move(items));
    }
    default: fail("chat template input: unsupported JSON value type '%s'", j.type_name());
  }
}

const Value* Value::find(const std::string& key) const {
  if (!dict_) return nullptr;
  for (const auto& [k, v] : *dict_)
    if (k == key) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return tuple_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

bool parse_python_float(const std::string& s, double* out) {
  if (s.empty()) return false;
  // Hex floats are C's, not Python's.
  for (char c : s)
    if (c == 'x' || c == 'X' || c == 'p' || c == 'P') return false;
  // strtod reports overflow/underflow through errno but still returns +-HUGE_VAL / the rounded value, which is
  // Python's result; tern never changes the C locale, so '.' is the decimal point.
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return false;
  *out = d;
  return true;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+06", shortest round trip digits
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  // CPython 'r' format: exponent form when the decimal point position is <= -4 or > 16.
  int decpt = exp10 + 1;
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) out.append(1, '.').append(digits, 1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + eb;
  }
  if (decpt <= 0) return out + "0." + std::string(-decpt, '0') + digits;
  if (static_cast<size_t>(decpt) >= digits.size())
    return out + digits + std::string(decpt - digits.size(), '0') + ".0";
  return out + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

static void repr_string(const std::string& s, std::string* out) {
  bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  *out += q;
  for (uint32_t cp : utf8_decode(s)) {
    char eb[16];
    if (cp == '\\') *out += "\\\\";
    else if (cp == static_cast<uint32_t>(q)) { *out += '\\'; *out += q; }
    else if (cp == '\n') *out += "\\n";
    else if (cp == '\r') *out += "\\r";
    else if (cp == '\t') *out += "\\t";
    else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
      std::snprintf(eb, sizeof(eb), "\\x%02x", cp);
      *out += eb;
    } else if ((cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) || (cp >= 0x205f && cp <= 0x206f) ||
               cp == 0x3000 || cp == 0xfeff || cp == 0x1680 || (cp >= 0xd800 && cp <= 0xdfff)) {
      std::snprintf(eb, sizeof(eb), "\\u%04x", cp);
      *out += eb;
    } else {
      utf8_append(out, cp);
    }
  }
  *out += q;
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kString: {
      std::string out;
      repr_string(*s_, &out);
      return out;
    }
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : *dict_) {
        if (!first) out += ", ";
        first = false;
        repr_string(k, &out);
        out += ": " + v.repr();
      }
      return out + (kind_ == Kind::kNamespace ? "}>" : "}");
    }
    default: return to_str();
  }
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return float_repr(f_);
    case Kind::kString: return *s_;
    case Kind::kCallable: return "<function " + fn_name_ + ">";
    default: return repr();
  }
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str_ref() == b.str_ref();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list_ref().size() != b.list_ref().size()) return false;
      for (size_t i = 0; i < a.list_ref().size(); ++i)
        if (!py_equal(a.list_ref()[i], b.list_ref()[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict_ref().size() != b.dict_ref().size()) return false;
      for (const auto& [k, v] : a.dict_ref()) {
        const Value* o = b.find(k);
        if (!o || !py_equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return &a.dict_ref() == &b.dict_ref();
    case Value::Kind::kCallable: return &a.function() == &b.function();
    default: return false;
  }
}

bool py_less(const Value& a, const Value& b, bool* ok) {
  *ok = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_float() < b.as_float();
  }
  if (a.is_string() && b.is_string()) return a.str_ref() < b.str_ref();  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const List &x = a.list_ref(), &y = b.list_ref();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_less(x[i], y[i], ok);
    }
    return x.size() < y.size();
  }
  *ok = false;
  return false;
}

// ---- json.dumps --------------------------------------------------------------------------------------------

static void json_string(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  char eb[16];
  for (uint32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"': *out += "\\\""; continue;
      case '\\': *out += "\\\\"; continue;
      case '\n': *out += "\\n"; continue;
      case '\r': *out += "\\r"; continue;
      case '\t': *out += "\\t"; continue;
      case '\b': *out += "\\b"; continue;
      case '\f': *out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20 || (ensure_ascii && cp > 0x7e)) {
      if (cp >= 0x10000) {  // UTF-16 surrogate pair, as Python's encoder writes it
        uint32_t v = cp - 0x10000;
        std::snprintf(eb, sizeof(eb), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      } else {
        std::snprintf(eb, sizeof(eb), "\\u%04x", cp);
      }
      *out += eb;
    } else {
      utf8_append(out, cp);
    }
  }
  *out += '"';
}

static bool json_rec(const Value& v, const JsonOptions& opt, int level, std::string* out, std::string* err) {
  auto newline = [&](int lvl) {
    if (opt.indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(opt.indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return true;
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return true;
    case Value::Kind::kInt: *out += std::to_string(v.as_int()); return true;
    case Value::Kind::kFloat: {
      double f = v.as_float();
      if (std::isnan(f)) *out += "NaN";
      else if (std::isinf(f)) *out += f < 0 ? "-Infinity" : "Infinity";
      else *out += float_repr(f);
      return true;
    }
    case Value::Kind::kString: json_string(v.str_ref(), opt.ensure_ascii, out); return true;
    case Value::Kind::kList: {
      const List& l = v.list_ref();
      if (l.empty()) { *out += "[]"; return true; }
      *out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) *out += opt.item_sep;
        newline(level + 1);
        if (!json_rec(l[i], opt, level + 1, out, err)) return false;
      }
      newline(level);
      *out += ']';
      return true;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict_ref()) items.push_back(&kv);
      if (opt.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      if (items.empty()) { *out += "{}"; return true; }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += opt.item_sep;
        newline(level + 1);
        json_string(items[i]->first, opt.ensure_ascii, out);
        *out += opt.key_sep;
        if (!json_rec(items[i]->second, opt, level + 1, out, err)) return false;
      }
      newline(level);
      *out += '}';
      return true;
    }
    default:
      *err = "Object of type " + v.type_name() + " is not JSON serializable";
      return false;
  }
}

bool to_json(const Value& v, const JsonOptions& opt, std::string* out, std::string* err) {
  return json_rec(v, opt, 0, out, err);
}

// ---- UTF-8 -------------------------------------------------------------------------------------------------

// Invalid bytes decode to U+DC80..U+DCFF (Python's surrogateescape) so that encode restores them.
std::vector<uint32_t> utf8_decode(const std::string& s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  size_t i = 0, n = s.size();
  auto cont = [&](size_t k) { return k < n && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80; };
  while (i < n) {
    uint8_t c = static_cast<uint8_t>(s[i]);
    uint32_t cp;
    size_t len;
    if (c < 0x80) { cp = c; len = 1; }
    else if ((c & 0xE0) == 0xC0 && c >= 0xC2 && cont(i + 1)) { cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F); len = 2; }
    else if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
      len = 3;
      if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) { cp = 0xDC00 + c; len = 1; }
    } else if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
      len = 4;
      if (cp < 0x10000 || cp > 0x10FFFF) { cp = 0xDC00 + c; len = 1; }
    } else { cp = 0xDC00 + c; len = 1; }
    cps.push_back(cp);
    i += len;
  }
  return cps;
}

void utf8_append(std::string* out, uint32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) { out->push_back(static_cast<char>(cp - 0xDC00)); return; }
  if (cp < 0x80) out->push_back(static_cast<char>(cp));
  else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) utf8_append(&out, cps[i]);
  return out;
}

bool py_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

}  // namespace tern::text::jinja
