// Python object model pieces chat templates touch: attribute/item lookup, slicing, iteration, `in`, and the
// str/dict/list methods (read-only ones; the sandbox refuses mutating methods).
#include <algorithm>
#include <set>

#include "core/error.h"
#include "text/jinja_builtins.h"

namespace tern::text::jinja {

namespace {

[[noreturn]] void undefined_error(const Value& u) {
  const std::string& hint = u.undefined_hint();
  throw Error(hint.empty() ? "value is undefined" : hint);
}

std::string arg_str(const CallArgs& a, size_t i, const char* method) {
  if (i >= a.pos.size() || !a.pos[i].is_string())
    throw Error(strf("str.%s(): argument %zu must be str", method, i + 1));
  return a.pos[i].str_ref();
}

bool is_str_space_only(uint32_t cp) { return py_isspace(cp); }

// Python str.split(sep=None, maxsplit=-1).
List py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    auto cps = utf8_decode(s);
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && is_str_space_only(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = n;
        while (e > i && is_str_space_only(cps[e - 1])) --e;
        out.push_back(Value::string(utf8_encode(cps, i, e)));
        break;
      }
      size_t j = i;
      while (j < n && !is_str_space_only(cps[j])) ++j;
      out.push_back(Value::string(utf8_encode(cps, i, j)));
      i = j;
    }
    return out;
  }
  if (!sep.is_string()) throw Error("str.split(): separator must be str or None");
  const std::string& d = sep.str_ref();
  if (d.empty()) throw Error("str.split(): empty separator");
  size_t start = 0;
  while (true) {
    size_t p = s.find(d, start);
    if (p == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) break;
    out.push_back(Value::string(s.substr(start, p - start)));
    start = p + d.size();
  }
  out.push_back(Value::string(s.substr(start)));
  return out;
}

std::string ascii_map(std::string s, int (*f)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts rep between every code point
    auto cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) { out += rep; ++done; }
      if (i < cps.size()) utf8_append(&out, cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out += s.substr(start, p - start) + rep;
    start = p + old.size();
    ++done;
  }
  return out + s.substr(start);
}

bool prefix_match(const Value& arg, const std::string& s, bool suffix, const char* method) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw Error(strf("str.%s(): argument must be str or a tuple of str", method));
    const std::string& p = v.str_ref();
    if (p.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0;
  };
  if (arg.is_tuple()) {
    for (const Value& v : arg.list_ref())
      if (one(v)) return true;
    return false;
  }
  return one(arg);
}

Value str_method(const Value& recv, const std::string& name) {
  static const std::set<std::string> kSupported = {"startswith", "endswith", "split", "strip", "lstrip", "rstrip",
                                                   "upper", "lower", "replace", "find", "count", "join",
                                                   "capitalize", "title", "isdigit", "isspace", "isalpha"};
  static const std::set<std::string> kPython = {
      "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum", "isascii",
      "isdecimal", "isidentifier", "islower", "isnumeric", "isprintable", "istitle", "isupper", "ljust",
      "maketrans", "partition", "removeprefix", "removesuffix", "rfind", "rindex", "rjust", "rpartition",
      "rsplit", "splitlines", "swapcase", "translate", "zfill"};
  if (kPython.count(name)) throw Error("unsupported method str." + name + "()");
  if (!kSupported.count(name)) return Value::undefined("'str object' has no attribute '" + name + "'");
  std::string s = recv.str_ref();
  return Value::callable("str." + name, [s, name](CallArgs& a) -> Value {
    auto npos = a.pos.size();
    auto kw = [&](const char* k) -> const Value* {
      for (auto& [n, v] : a.kw)
        if (n == k) return &v;
      return nullptr;
    };
    if (name == "startswith" || name == "endswith") {
      if (npos != 1) throw Error("str." + name + "() takes exactly one argument in templates");
      return Value::boolean(prefix_match(a.pos[0], s, name == "endswith", name.c_str()));
    }
    if (name == "split") {
      Value sep = npos > 0 ? a.pos[0] : (kw("sep") ? *kw("sep") : Value::none());
      Value ms = npos > 1 ? a.pos[1] : (kw("maxsplit") ? *kw("maxsplit") : Value::integer(-1));
      if (!ms.is_integral()) throw Error("str.split(): maxsplit must be int");
      return Value::list(py_split(s, sep, ms.as_int()));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      bool l = name != "rstrip", r = name != "lstrip";
      if (npos == 0 || a.pos[0].is_none()) return Value::string(py_strip(s, nullptr, l, r));
      std::string chars = arg_str(a, 0, name.c_str());
      return Value::string(py_strip(s, &chars, l, r));
    }
    if (name == "upper") return Value::string(ascii_map(s, [](int c) { return std::toupper(c); }));
    if (name == "lower") return Value::string(ascii_map(s, [](int c) { return std::tolower(c); }));
    if (name == "replace") {
      int64_t count = npos > 2 && a.pos[2].is_integral() ? a.pos[2].as_int() : -1;
      return Value::string(py_replace(s, arg_str(a, 0, "replace"), arg_str(a, 1, "replace"), count));
    }
    if (name == "find") {
      size_t p = s.find(arg_str(a, 0, "find"));
      if (p == std::string::npos) return Value::integer(-1);
      return Value::integer(static_cast<int64_t>(utf8_decode(s.substr(0, p)).size()));
    }
    if (name == "count") {
      std::string sub = arg_str(a, 0, "count");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_decode(s).size()) + 1);
      int64_t c = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++c;
      return Value::integer(c);
    }
    if (name == "join") {
      if (npos != 1) throw Error("str.join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(a.pos[0])) {
        if (!v.is_string()) throw Error("str.join(): sequence item must be str, not " + v.type_name());
        if (!first) out += s;
        first = false;
        out += v.str_ref();
      }
      return Value::string(out);
    }
    if (name == "capitalize" || name == "title") {
      std::string out = s;
      bool start = true;
      for (char& c : out) {
        unsigned char u = static_cast<unsigned char>(c);
        bool alpha = std::isalpha(u) && u < 0x80;
        if (alpha) c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = name == "title" ? !alpha : false;
      }
      return Value::string(out);
    }
    auto cps = utf8_decode(s);
    bool all = !cps.empty();
    for (uint32_t cp : cps) {
      if (name == "isdigit") all = all && cp >= '0' && cp <= '9';
      if (name == "isspace") all = all && py_isspace(cp);
      if (name == "isalpha") all = all && cp < 0x80 && std::isalpha(static_cast<int>(cp));
    }
    return Value::boolean(all);
  });
}

Value dict_method(const Value& recv, const std::string& name) {
  static const std::set<std::string> kMutating = {"clear", "pop", "popitem", "setdefault", "update", "copy",
                                                  "fromkeys"};
  if (kMutating.count(name)) throw Error("unsupported method dict." + name + "()");
  if (name != "items" && name != "keys" && name != "values" && name != "get") return Value();
  return Value::callable("dict." + name, [recv, name](CallArgs& a) -> Value {
    List out;
    if (name == "get") {
      if (a.pos.empty() || !a.pos[0].is_string()) throw Error("dict.get(): key must be str");
      const Value* v = recv.find(a.pos[0].str_ref());
      return v ? *v : (a.pos.size() > 1 ? a.pos[1] : Value::none());
    }
    for (const auto& [k, v] : recv.dict_ref()) {
      if (name == "items") out.push_back(Value::list({Value::string(k), v}, true));
      else if (name == "keys") out.push_back(Value::string(k));
      else out.push_back(v);
    }
    return Value::list(std::move(out));
  });
}

Value list_method(const Value& recv, const std::string& name) {
  static const std::set<std::string> kMutating = {"append", "clear", "copy", "extend", "insert",
                                                  "pop", "remove", "reverse", "sort"};
  if (kMutating.count(name)) throw Error("unsupported method list." + name + "()");
  if (name != "index" && name != "count") return Value();
  return Value::callable("list." + name, [recv, name](CallArgs& a) -> Value {
    if (a.pos.size() != 1) throw Error("list." + name + "() takes exactly one argument");
    const List& l = recv.list_ref();
    int64_t c = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      if (!py_equal(l[i], a.pos[0])) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++c;
    }
    if (name == "index") throw Error("list.index(x): x not in list");
    return Value::integer(c);
  });
}

// Python slice.indices(n) followed by the index walk.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto opt = [](const Value& v, const char* what) -> const Value* {
    if (v.is_none() || v.is_undefined()) return nullptr;
    if (!v.is_integral()) throw Error(std::string("slice ") + what + " must be an integer or None");
    return &v;
  };
  const Value* st = opt(step, "step");
  int64_t k = st ? st->as_int() : 1;
  if (k == 0) throw Error("slice step cannot be zero");
  auto clamp = [&](const Value* v, int64_t def) {
    if (!v) return def;
    int64_t x = v->as_int();
    if (x < 0) x += n;
    if (k > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = clamp(opt(start, "start"), k > 0 ? 0 : n - 1);
  int64_t e = clamp(opt(stop, "stop"), k > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; k > 0 ? i < e : i > e; i += k) idx.push_back(i);
  return idx;
}

// "'<type> object' has no " + what..., built by appending: GCC 12 reports a false -Wrestrict in
// operator+(const char*, std::string&&) (its insert path), which the one-expression form instantiates.
template <typename... Parts>
std::string no_such(const Value& obj, const Parts&... what) {
  std::string m = "'";
  m += obj.type_name();
  m += " object' has no ";
  (m += ... += what);
  return m;
}

}  // namespace

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<uint32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_me = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : py_isspace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_me(cps[b])) ++b;
  if (right)
    while (e > b && strip_me(cps[e - 1])) --e;
  return utf8_encode(cps, b, e);
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: undefined_error(obj);
    case Value::Kind::kString: return str_method(obj, name);
    case Value::Kind::kDict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.find(name);
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::kNamespace: {
      const Value* v = obj.find(name);
      return v ? *v : Value::undefined("'Namespace' object has no attribute '" + name + "'");
    }
    case Value::Kind::kList: {
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      return Value::undefined(no_such(obj, "attribute '", name, "'"));
    }
    default: return Value::undefined(no_such(obj, "attribute '", name, "'"));
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list_ref().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list_ref()[i];
    } else {
      auto cps = utf8_decode(obj.str_ref());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(utf8_encode(cps, i, i + 1));
    }
    return Value::undefined(obj.type_name() + " index " + std::to_string(key.as_int()) + " out of range");
  }
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    const Value* v = obj.find(key.str_ref());
    if (v) return *v;
  }
  if (key.is_string()) return get_attr(obj, key.str_ref());
  return Value::undefined(no_such(obj, "item ", key.repr()));
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_list()) {
    const List& l = obj.list_ref();
    List out;
    for (int64_t i : slice_indices(static_cast<int64_t>(l.size()), start, stop, step)) out.push_back(l[i]);
    return Value::list(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    auto cps = utf8_decode(obj.str_ref());
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step)) utf8_append(&out, cps[i]);
    return Value::string(out);
  }
  throw Error("cannot slice a value of type " + obj.type_name());
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list_ref();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& kv : v.dict_ref()) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (uint32_t cp : utf8_decode(v.str_ref())) {
        std::string c;
        utf8_append(&c, cp);
        chars.push_back(Value::string(c));
      }
      return chars;
    }
    default: throw Error("'" + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& hay, const Value& needle) {
  if (hay.is_string()) {
    if (!needle.is_string()) throw Error("'in <string>' requires string as left operand, not " + needle.type_name());
    return hay.str_ref().find(needle.str_ref()) != std::string::npos;
  }
  if (hay.is_dict()) return needle.is_string() && hay.find(needle.str_ref()) != nullptr;
  if (hay.is_list()) {
    for (const Value& v : hay.list_ref())
      if (py_equal(v, needle)) return true;
    return false;
  }
  if (hay.is_undefined()) return false;  // Undefined iterates as empty
  throw Error("argument of type '" + hay.type_name() + "' is not iterable");
}

}  // namespace tern::text::jinja
