// Filters, tests and globals of transformers' chat-template environment (jinja2 3.1 defaults + HF overrides:
// tojson = json.dumps(ensure_ascii=False, indent=None, separators=None, sort_keys=False), raise_exception,
// strftime_now, namespace, dict).
#include "text/jinja_builtins.h"

#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include "core/error.h"

namespace tern::text::jinja {

namespace {

// Positional-or-keyword argument access with Python's "unexpected argument" checks.
class Args {
 public:
  Args(CallArgs& a, std::string fn, std::vector<std::string> names) : a_(a), fn_(std::move(fn)), names_(std::move(names)) {
    if (a_.pos.size() > names_.size()) throw Error(fn_ + "() got too many positional arguments");
    for (const auto& [k, v] : a_.kw)
      if (std::find(names_.begin(), names_.end(), k) == names_.end())
        throw Error(fn_ + "() got an unexpected keyword argument '" + k + "'");
  }
  Value get(size_t i, Value def = Value()) const {
    if (i < a_.pos.size()) return a_.pos[i];
    for (const auto& [k, v] : a_.kw)
      if (k == names_[i]) return v;
    return def;
  }
  bool has(size_t i) const { return !get(i).is_undefined(); }

 private:
  CallArgs& a_;
  std::string fn_;
  std::vector<std::string> names_;
};

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_decode(v.str_ref()).size());
    case Value::Kind::kList: return static_cast<int64_t>(v.list_ref().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict_ref().size());
    default: throw Error("object of type '" + v.type_name() + "' has no len()");
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

Value f_tojson(const Value& v, CallArgs& a) {
  Args args(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = args.get(0, Value::boolean(false)).truthy();
  Value indent = args.get(1, Value::none());
  if (indent.is_integral()) {
    o.indent = static_cast<int>(std::max<int64_t>(0, indent.as_int()));
    o.item_sep = ",";
  } else if (!indent.is_none()) {
    throw Error("tojson(): indent must be an int or None");
  }
  Value seps = args.get(2, Value::none());
  if (seps.is_list() && seps.list_ref().size() == 2 && seps.list_ref()[0].is_string() && seps.list_ref()[1].is_string()) {
    o.item_sep = seps.list_ref()[0].str_ref();
    o.key_sep = seps.list_ref()[1].str_ref();
  } else if (!seps.is_none()) {
    throw Error("tojson(): separators must be a pair of strings");
  }
  o.sort_keys = args.get(3, Value::boolean(false)).truthy();
  std::string out, err;
  if (!to_json(v, o, &out, &err)) throw Error("tojson: " + err);
  return Value::string(out);
}

Value f_default(const Value& v, CallArgs& a) {
  Args args(a, "default", {"default_value", "boolean"});
  bool boolean = args.get(1, Value::boolean(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return args.get(0, Value::string(""));
  return v;
}

Value f_items(const Value& v, CallArgs& a) {
  Args args(a, "items", {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw Error("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict_ref()) out.push_back(Value::list({Value::string(k), x}, true));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  Args args(a, "join", {"d", "attribute"});
  std::string sep = args.get(0, Value::string("")).to_str(), out;
  Value attr = args.get(1, Value::none());
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attr.is_none() ? x : get_item(x, attr)).to_str();
  }
  return Value::string(out);
}

Value f_int(const Value& v, CallArgs& a) {
  Args args(a, "int", {"default", "base"});
  Value def = args.get(0, Value::integer(0));
  if (v.is_integral()) return Value::integer(v.as_int());
  // A finite float beyond int64 would be a big int in Python; tern has none, so that is an error as integer
  // overflow is elsewhere. inf and nan give the default (Python's int() raises, jinja2 catches).
  auto from_float = [&](double d) {
    if (!std::isfinite(d)) return def;
    if (std::fabs(d) >= 9223372036854775808.0) throw Error("int(): " + float_repr(d) + " does not fit in 64 bits");
    return Value::integer(static_cast<int64_t>(d));
  };
  if (v.is_float()) return from_float(v.as_float());
  if (v.is_string()) {
    std::string s = py_strip(v.str_ref(), nullptr, true, true);
    try {
      size_t used = 0;
      int64_t i = std::stoll(s, &used, 10);
      if (used == s.size()) return Value::integer(i);
    } catch (const std::exception&) {
    }
    double d = 0;  // jinja2 falls back to int(float(value))
    if (parse_python_float(s, &d)) return from_float(d);
  }
  return def;
}

Value f_float(const Value& v, CallArgs& a) {
  Args args(a, "float", {"default"});
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string()) {
    std::string s = py_strip(v.str_ref(), nullptr, true, true);
    double d = 0;
    if (parse_python_float(s, &d)) return Value::number(d);
  }
  return args.get(0, Value::number(0.0));
}

// select/reject/selectattr/rejectattr: keep items whose test result equals `keep`.
Value f_select(const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t k = by_attr ? 1 : 0;
  if (a.pos.size() < k) throw Error(std::string(by_attr ? "selectattr" : "select") + "() needs an attribute name");
  std::string test = a.pos.size() > k ? a.pos[k].to_str() : "";
  if (!test.empty() && !has_test(test)) throw Error("unsupported test '" + test + "'");
  List out;
  for (const Value& x : iterate(v)) {
    Value subj = by_attr ? get_attr(x, a.pos[0].to_str()) : x;
    bool r;
    if (test.empty()) {
      r = subj.truthy();
    } else {
      CallArgs ta;
      ta.pos.assign(a.pos.begin() + static_cast<long>(k) + 1, a.pos.end());
      r = apply_test(test, subj, ta);
    }
    if (r == keep) out.push_back(x);
  }
  return Value::list(std::move(out));
}

Value f_map(const Value& v, CallArgs& a) {
  List out;
  for (const auto& [k, x] : a.kw) {
    if (k != "attribute" && k != "default") throw Error("map() got an unexpected keyword argument '" + k + "'");
  }
  const Value* attr = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, x] : a.kw) (k == "attribute" ? attr : def) = &x;
  for (const Value& x : iterate(v)) {
    if (attr) {
      Value r = get_attr(x, attr->to_str());
      out.push_back(r.is_undefined() && def ? *def : r);
    } else {
      if (a.pos.empty()) throw Error("map() needs a filter name or attribute=");
      CallArgs fa;
      fa.pos.assign(a.pos.begin() + 1, a.pos.end());
      std::string f = a.pos[0].to_str();
      if (!has_filter(f)) throw Error("unsupported filter '" + f + "'");
      out.push_back(apply_filter(f, x, fa));
    }
  }
  return Value::list(std::move(out));
}

using FilterFn = Value (*)(const Value&, CallArgs&);

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> kFilters = {
      {"tojson", f_tojson},
      {"default", f_default},
      {"d", f_default},
      {"items", f_items},
      {"join", f_join},
      {"int", f_int},
      {"float", f_float},
      {"map", f_map},
      {"trim", [](const Value& v, CallArgs& a) {
         Args args(a, "trim", {"chars"});
         Value chars = args.get(0, Value::none());
         std::string s = v.to_str();
         if (chars.is_none()) return Value::string(py_strip(s, nullptr, true, true));
         std::string c = chars.to_str();
         return Value::string(py_strip(s, &c, true, true));
       }},
      {"length", [](const Value& v, CallArgs& a) { Args(a, "length", {}); return Value::integer(py_len(v)); }},
      {"count", [](const Value& v, CallArgs& a) { Args(a, "count", {}); return Value::integer(py_len(v)); }},
      {"string", [](const Value& v, CallArgs& a) { Args(a, "string", {}); return Value::string(v.to_str()); }},
      {"safe", [](const Value& v, CallArgs& a) { Args(a, "safe", {}); return Value::string(v.to_str()); }},
      {"escape", [](const Value& v, CallArgs& a) { Args(a, "escape", {}); return Value::string(html_escape(v.to_str())); }},
      {"e", [](const Value& v, CallArgs& a) { Args(a, "e", {}); return Value::string(html_escape(v.to_str())); }},
      {"capitalize", [](const Value& v, CallArgs& a) {
         Args(a, "capitalize", {});
         CallArgs none;
         return get_attr(Value::string(v.to_str()), "capitalize").function()(none);
       }},
      {"upper", [](const Value& v, CallArgs& a) {
         Args(a, "upper", {});
         CallArgs none;
         return get_attr(Value::string(v.to_str()), "upper").function()(none);
       }},
      {"lower", [](const Value& v, CallArgs& a) {
         Args(a, "lower", {});
         CallArgs none;
         return get_attr(Value::string(v.to_str()), "lower").function()(none);
       }},
      {"replace", [](const Value& v, CallArgs& a) {
         Args args(a, "replace", {"old", "new", "count"});
         CallArgs r;
         r.pos = {Value::string(args.get(0).to_str()), Value::string(args.get(1).to_str())};
         if (args.has(2)) r.pos.push_back(args.get(2));
         return get_attr(Value::string(v.to_str()), "replace").function()(r);
       }},
      {"first", [](const Value& v, CallArgs& a) {
         Args(a, "first", {});
         List l = iterate(v);
         return l.empty() ? Value::undefined("first: sequence is empty") : l.front();
       }},
      {"last", [](const Value& v, CallArgs& a) {
         Args(a, "last", {});
         List l = iterate(v);
         return l.empty() ? Value::undefined("last: sequence is empty") : l.back();
       }},
      {"list", [](const Value& v, CallArgs& a) { Args(a, "list", {}); return Value::list(iterate(v)); }},
      {"reverse", [](const Value& v, CallArgs& a) {
         Args(a, "reverse", {});
         if (v.is_string()) return slice_value(v, Value::none(), Value::none(), Value::integer(-1));
         List l = iterate(v);
         return Value::list(List(l.rbegin(), l.rend()));
       }},
      {"abs", [](const Value& v, CallArgs& a) {
         Args(a, "abs", {});
         if (v.is_integral()) return Value::integer(std::llabs(v.as_int()));
         if (v.is_float()) return Value::number(std::fabs(v.as_float()));
         throw Error("bad operand type for abs(): '" + v.type_name() + "'");
       }},
      {"select", [](const Value& v, CallArgs& a) { return f_select(v, a, false, true); }},
      {"reject", [](const Value& v, CallArgs& a) { return f_select(v, a, false, false); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return f_select(v, a, true, true); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return f_select(v, a, true, false); }},
  };
  return kFilters;
}

bool compare_test(const std::string& op, const Value& v, const Value& o) {
  if (op == "eq") return py_equal(v, o);
  if (op == "ne") return !py_equal(v, o);
  bool ok = true;
  bool r;
  if (op == "lt") r = py_less(v, o, &ok);
  else if (op == "gt") r = py_less(o, v, &ok);
  else if (op == "le") r = !py_less(o, v, &ok);
  else r = !py_less(v, o, &ok);
  if (!ok) throw Error("'" + op + "' not supported between instances of '" + v.type_name() + "' and '" + o.type_name() + "'");
  return r;
}

const std::map<std::string, std::string>& test_aliases() {
  static const std::map<std::string, std::string> kAliases = {
      {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"lessthan", "lt"}, {"<=", "le"},
      {">", "gt"}, {"greaterthan", "gt"}, {">=", "ge"}};
  return kAliases;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> kTests = {
      "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
      "boolean", "true", "false", "callable", "even", "odd", "divisibleby", "eq", "ne", "lt", "le", "gt", "ge",
      "in", "lower", "upper", "sameas", "escaped"};
  return kTests;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw Error("unsupported filter '" + name + "'");
  return it->second(v, args);
}

bool has_test(const std::string& name) { return test_names().count(name) || test_aliases().count(name); }

bool apply_test(const std::string& raw_name, const Value& v, CallArgs& a) {
  auto alias = test_aliases().find(raw_name);
  const std::string& name = alias == test_aliases().end() ? raw_name : alias->second;
  auto arg = [&]() -> const Value& {
    if (a.pos.size() != 1) throw Error("test '" + raw_name + "' takes exactly one argument");
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "even" || name == "odd") {
    if (!v.is_integral()) throw Error("test '" + name + "' needs an integer");
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const Value& n = arg();
    if (!v.is_integral() || !n.is_integral() || n.as_int() == 0) throw Error("divisibleby needs non-zero integers");
    return v.as_int() % n.as_int() == 0;
  }
  if (name == "in") return contains(arg(), v);
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    bool cased = false;
    for (char c : v.str_ref()) {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        cased = true;
        if (name == "lower" ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c)))
          return false;
      }
    }
    return cased;
  }
  if (name == "sameas") {
    const Value& o = arg();
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == o.as_bool();
    if (v.is_list()) return &v.list_ref() == &o.list_ref();
    if (v.is_dict() || v.is_namespace()) return &v.dict_ref() == &o.dict_ref();
    return py_equal(v, o);
  }
  return compare_test(name, v, arg());
}

Dict make_globals() {
  Dict g;
  g.emplace_back("range", Value::callable("range", [](CallArgs& a) -> Value {
    if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3) throw Error("range() expects 1 to 3 integer arguments");
    for (const Value& v : a.pos)
      if (!v.is_integral()) throw Error("range(): '" + v.type_name() + "' object cannot be interpreted as an integer");
    int64_t start = a.pos.size() > 1 ? a.pos[0].as_int() : 0;
    int64_t stop = a.pos.size() > 1 ? a.pos[1].as_int() : a.pos[0].as_int();
    int64_t step = a.pos.size() > 2 ? a.pos[2].as_int() : 1;
    if (step == 0) throw Error("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) throw Error("range() too big (the sandbox allows at most 100000 items)");
      out.push_back(Value::integer(i));
    }
    return Value::list(std::move(out));
  }));
  g.emplace_back("namespace", Value::callable("namespace", [](CallArgs& a) -> Value {
    Dict attrs;
    auto put = [&](const std::string& k, const Value& v) {
      if (!k.empty() && k[0] == '_')
        throw Error("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k + "'");
      for (auto& kv : attrs)
        if (kv.first == k) { kv.second = v; return; }
      attrs.emplace_back(k, v);
    };
    for (const Value& p : a.pos) {
      if (!p.is_dict()) throw Error("namespace(): positional argument must be a mapping");
      for (const auto& [k, v] : p.dict_ref()) put(k, v);
    }
    for (const auto& [k, v] : a.kw) put(k, v);
    return Value::name_space(std::move(attrs));
  }));
  g.emplace_back("dict", Value::callable("dict", [](CallArgs& a) -> Value {
    Dict d;
    for (const Value& p : a.pos) {
      if (!p.is_dict()) throw Error("dict(): positional argument must be a mapping");
      d = p.dict_ref();
    }
    for (const auto& [k, v] : a.kw) {
      bool found = false;
      for (auto& kv : d)
        if (kv.first == k) { kv.second = v; found = true; }
      if (!found) d.emplace_back(k, v);
    }
    return Value::dict(std::move(d));
  }));
  g.emplace_back("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
    throw Error("raise_exception: " + (a.pos.empty() ? std::string() : a.pos[0].to_str()));
  }));
  g.emplace_back("strftime_now", Value::callable("strftime_now", [](CallArgs& a) -> Value {
    if (a.pos.size() != 1 || !a.pos[0].is_string()) throw Error("strftime_now(format) needs one string argument");
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[512];
    size_t n = std::strftime(buf, sizeof(buf), a.pos[0].str_ref().c_str(), &tm);
    return Value::string(std::string(buf, n));
  }));
  return g;
}

}  // namespace tern::text::jinja
