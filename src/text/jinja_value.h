// Jinja values with Python semantics, as jinja2 sees them when transformers renders a chat template:
// Undefined (jinja2's default Undefined), None, bool, int, float, str (UTF-8; indexed by code point),
// list/tuple, dict (insertion ordered, string keys), namespace (mutable, shared) and callables (macros,
// globals, bound methods). Strings, truthiness, equality, ordering, str()/repr() and json.dumps follow CPython.
// Non-goals: big integers (int64 only), non-string dict keys, Unicode case mapping beyond ASCII.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tern::text::jinja {

class Value;
using List = std::vector<Value>;
// Python dict in insertion order; linear lookup is fine for the small dicts chat templates see.
using Dict = std::vector<std::pair<std::string, Value>>;

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // Undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(List items, bool is_tuple = false);
  static Value dict(Dict items);
  static Value name_space(Dict items);
  static Value callable(std::string name, Function fn);
  // Undefined that remembers what was looked up, for error messages ("'x' is undefined").
  static Value undefined(std::string hint);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python int includes bool.
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integral() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& str_ref() const { return *s_; }
  const List& list_ref() const { return *list_; }
  const Dict& dict_ref() const { return *dict_; }  // dict or namespace
  Dict& dict_mut() const { return *dict_; }        // namespace attribute assignment
  const std::string& callable_name() const { return fn_name_; }
  const Function& function() const { return *fn_; }
  const std::string& undefined_hint() const { return *s_; }

  // Python bool(x).
  bool truthy() const;
  // Python str(x) (jinja2 output of {{ x }}; Undefined -> "").
  std::string to_str() const;
  // Python repr(x).
  std::string repr() const;
  // Python type name for messages ("str", "dict", ...).
  std::string type_name() const;
  // Dict/namespace key lookup; nullptr when missing.
  const Value* find(const std::string& key) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;  // string payload, or the undefined hint
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
  std::string fn_name_;
};

// Python ==.
bool py_equal(const Value& a, const Value& b);
// Python <; returns false with *ok=false when the types are not orderable.
bool py_less(const Value& a, const Value& b, bool* ok);
// CPython float repr (shortest round trip; exponent form below 1e-4 or from 1e16).
std::string float_repr(double f);
// Python's float(s) for a decimal spelling: a value beyond the double range is +-inf, one below it rounds to 0 or
// a subnormal (never an error, as in Python). Returns false when s is not wholly a number; *out is then unchanged.
bool parse_python_float(const std::string& s, double* out);

struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;  // -1: None
  bool sort_keys = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
};
// json.dumps(x, ...) exactly; returns false (and names the offending type in *err) for values JSON cannot hold.
bool to_json(const Value& v, const JsonOptions& opt, std::string* out, std::string* err);

// UTF-8 helpers: strings are indexed, sliced and measured in code points like Python str.
std::vector<uint32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
void utf8_append(std::string* out, uint32_t cp);
// Python str.isspace() for one code point.
bool py_isspace(uint32_t cp);

}  // namespace tern::text::jinja
