// Jinja builtins as transformers' ImmutableSandboxedEnvironment provides them: filters, tests, Python methods on
// str/dict/list, attribute and item lookup (jinja2 Environment.getattr/getitem), slicing, iteration, globals
// (range, namespace, raise_exception, strftime_now, dict). Functions throw tern::Error without a position; the
// evaluator adds the template line/column.
#pragma once
#include <string>

#include "text/jinja_value.h"

namespace tern::text::jinja {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

// `obj.name`: Python attribute first (bound methods of str/dict/list), then item.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: item first, then attribute for string keys.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` with Python semantics (code points for str); undefined parts are None.
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
// What `for x in v` iterates: list items, dict keys, str code points; Undefined iterates nothing.
List iterate(const Value& v);
// Python `needle in hay`.
bool contains(const Value& hay, const Value& needle);
// Globals every render sees.
Dict make_globals();

// Python str.strip/lstrip/rstrip (chars = nullptr: Unicode whitespace).
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);

}  // namespace tern::text::jinja
