// Jinja evaluator. Scoping follows jinja2's compiled code: `if` opens no scope; each for-loop iteration, macro
// call, `with` and generation block gets a fresh child scope (so `set` inside a loop never leaks out and does not
// carry over to the next iteration); macros resolve free names in the scope they were defined in, at call time.
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "text/jinja.h"
#include "text/jinja_builtins.h"
#include "text/jinja_lexer.h"
#include "text/jinja_parser.h"

namespace tern::text::jinja {

namespace {

struct Frame {
  Dict vars;
  std::shared_ptr<Frame> parent;

  const Value* lookup(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get())
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& kv : vars)
      if (kv.first == name) { kv.second = std::move(v); return; }
    vars.emplace_back(name, std::move(v));
  }
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

bool positioned(const Error& e) { return std::string(e.what()).rfind("chat template: line ", 0) == 0; }

[[noreturn]] void undefined_error(const Value& u) {
  throw Error(u.undefined_hint().empty() ? std::string("value is undefined") : u.undefined_hint());
}

std::string operand_error(const char* op, const Value& a, const Value& b) {
  return std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'";
}

// Integers are int64 (Python's are unbounded): a result that does not fit is an error, never a wrapped value.
[[noreturn]] void int_overflow(const char* op) {
  throw Error(std::string("integer overflow in '") + op + "' (template integers are 64-bit)");
}
int64_t add_int(int64_t a, int64_t b, const char* op) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) int_overflow(op);
  return r;
}
int64_t sub_int(int64_t a, int64_t b, const char* op) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) int_overflow(op);
  return r;
}
int64_t mul_int(int64_t a, int64_t b, const char* op) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) int_overflow(op);
  return r;
}

// Longest string or list `*` may build: far above any prompt, low enough that a template cannot exhaust memory
// with one expression (jinja2's sandbox bounds range() the same way).
constexpr uint64_t kMaxRepeatBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxRepeatItems = 100000;

Value arith(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = a.is_integral() && b.is_integral();
  if (op == "+") {
    if (nums) return ints ? Value::integer(add_int(a.as_int(), b.as_int(), "+"))
                          : Value::number(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) return Value::string(a.str_ref() + b.str_ref());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List l = a.list_ref();
      l.insert(l.end(), b.list_ref().begin(), b.list_ref().end());
      return Value::list(std::move(l), a.is_tuple());
    }
    if (a.is_string() || b.is_string())
      throw Error("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() + "\") to str");
    throw Error(operand_error("+", a, b));
  }
  if (op == "-") {
    if (!nums) throw Error(operand_error("-", a, b));
    return ints ? Value::integer(sub_int(a.as_int(), b.as_int(), "-"))
                : Value::number(a.as_float() - b.as_float());
  }
  if (op == "*") {
    if (nums) return ints ? Value::integer(mul_int(a.as_int(), b.as_int(), "*"))
                          : Value::number(a.as_float() * b.as_float());
    const Value* seq = a.is_integral() ? &b : &a;
    const Value* n = a.is_integral() ? &a : &b;
    if (n->is_integral() && (seq->is_string() || seq->is_list())) {
      const uint64_t len = seq->is_string() ? seq->str_ref().size() : seq->list_ref().size();
      // An empty sequence stays empty however large the count ('' * 10**11 must not loop 10**11 times).
      const uint64_t k = len == 0 ? 0 : static_cast<uint64_t>(std::max<int64_t>(0, n->as_int()));
      if (len && k > (seq->is_string() ? kMaxRepeatBytes : kMaxRepeatItems) / len)
        throw Error(strf("'*' would make a %s of %llu x %llu %s (the limit is %llu)", seq->is_string() ? "string" : "list",
                         static_cast<unsigned long long>(k), static_cast<unsigned long long>(len),
                         seq->is_string() ? "bytes" : "items",
                         static_cast<unsigned long long>(seq->is_string() ? kMaxRepeatBytes : kMaxRepeatItems)));
      if (seq->is_string()) {
        std::string s;
        for (uint64_t i = 0; i < k; ++i) s += seq->str_ref();
        return Value::string(s);
      }
      List l;
      for (uint64_t i = 0; i < k; ++i) l.insert(l.end(), seq->list_ref().begin(), seq->list_ref().end());
      return Value::list(std::move(l), seq->is_tuple());
    }
    throw Error(operand_error("*", a, b));
  }
  if (!nums) throw Error(operand_error(op.c_str(), a, b));
  if (op == "**") {
    if (ints && b.as_int() >= 0) {  // by squaring: a large exponent of 0, 1 or -1 takes 63 steps, not 2^63
      int64_t r = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if (e & 1) r = mul_int(r, base, "**");
        if (e > 1) base = mul_int(base, base, "**");
      }
      return Value::integer(r);
    }
    return Value::number(std::pow(a.as_float(), b.as_float()));
  }
  if ((ints && b.as_int() == 0) || (!ints && b.as_float() == 0.0)) throw Error("division by zero");
  if (op == "/") return Value::number(a.as_float() / b.as_float());
  if (op == "//") {
    if (ints) {
      if (b.as_int() == -1) return Value::integer(sub_int(0, a.as_int(), "//"));  // INT64_MIN // -1 traps in C++
      int64_t q = a.as_int() / b.as_int();
      if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
      return Value::integer(q);
    }
    return Value::number(std::floor(a.as_float() / b.as_float()));
  }
  // "%": Python modulo takes the divisor's sign.
  if (ints) {
    if (b.as_int() == -1) return Value::integer(0);  // INT64_MIN % -1 traps in C++
    int64_t r = a.as_int() % b.as_int();
    if (r != 0 && ((r < 0) != (b.as_int() < 0))) r += b.as_int();
    return Value::integer(r);
  }
  double r = std::fmod(a.as_float(), b.as_float());
  if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
  return Value::number(r);
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  bool ok = true;
  bool r;
  if (op == "<") r = py_less(a, b, &ok);
  else if (op == ">") r = py_less(b, a, &ok);
  else if (op == "<=") r = !py_less(b, a, &ok);
  else r = !py_less(a, b, &ok);
  if (!ok) throw Error("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
  return r;
}

class Renderer {
 public:
  explicit Renderer(FramePtr globals) : globals_(std::move(globals)) {}

  Flow exec(const Body& body, const FramePtr& f, std::string& out) {
    for (const auto& s : body) {
      Flow fl = exec_stmt(*s, f, out);
      if (fl != Flow::kNormal) return fl;
    }
    return Flow::kNormal;
  }

 private:
  FramePtr child(const FramePtr& parent) {
    auto f = std::make_shared<Frame>();
    f->parent = parent;
    return f;
  }

  Flow exec_stmt(const Stmt& s, const FramePtr& f, std::string& out) {
    try {
      return exec_stmt_inner(s, f, out);
    } catch (const Error& e) {
      if (positioned(e)) throw;
      throw Error(where(s.line, s.col) + e.what());
    }
  }

  Flow exec_stmt_inner(const Stmt& s, const FramePtr& f, std::string& out) {
    switch (s.kind) {
      case StmtKind::kText: out += s.text; return Flow::kNormal;
      case StmtKind::kOutput: out += eval(*s.expr, f).to_str(); return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, f).truthy()) return exec(body, f, out);
        return exec(s.else_body, f, out);
      case StmtKind::kFor: return exec_for(s, f, out);
      case StmtKind::kSet: exec_set(s, f, eval(*s.expr, f)); return Flow::kNormal;
      case StmtKind::kSetBlock: {
        std::string body;
        exec(s.body, child(f), body);
        Value v = Value::string(body);
        if (s.expr) v = eval_filter(*s.expr, f, &v);
        f->set(s.targets[0], v);
        return Flow::kNormal;
      }
      case StmtKind::kMacro: f->set(s.text, make_macro(s, f)); return Flow::kNormal;
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kWith: {
        FramePtr w = child(f);
        for (const auto& [name, e] : s.params) w->set(name, eval(*e, f));
        return exec(s.body, w, out);
      }
      case StmtKind::kFilterBlock: {
        std::string body;
        Flow fl = exec(s.body, f, body);
        Value v = Value::string(body);
        out += eval_filter(*s.expr, f, &v).to_str();
        return fl;
      }
      case StmtKind::kGeneration: return exec(s.body, child(f), out);
    }
    return Flow::kNormal;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v, Frame& f) {
    if (targets.size() == 1) {
      f.set(targets[0], v);
      return;
    }
    List items = iterate(v);
    if (items.size() != targets.size())
      throw Error(strf("cannot unpack %zu values into %zu names", items.size(), targets.size()));
    for (size_t i = 0; i < items.size(); ++i) f.set(targets[i], items[i]);
  }

  void exec_set(const Stmt& s, const FramePtr& f, Value v) {
    if (!s.attr.empty()) {
      const Value* ns = f->lookup(s.targets[0]);
      if (!ns) ns = globals_->lookup(s.targets[0]);
      if (!ns || !ns->is_namespace()) throw Error("cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "': not a namespace");
      if (s.attr[0] == '_') throw Error("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + s.attr + "'");
      Dict& d = ns->dict_mut();
      for (auto& kv : d)
        if (kv.first == s.attr) { kv.second = std::move(v); return; }
      d.emplace_back(s.attr, std::move(v));
      return;
    }
    bind_targets(s.targets, v, *f);
  }

  Flow exec_for(const Stmt& s, const FramePtr& f, std::string& out) {
    List items = iterate(eval(*s.expr, f));
    if (s.cond) {  // `for x in xs if cond`: filter first; loop.* counts the kept items
      List kept;
      for (const Value& it : items) {
        FramePtr tf = child(f);
        bind_targets(s.targets, it, *tf);
        if (eval(*s.cond, tf).truthy()) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      FramePtr body = child(f);
      Dict loop = {{"index0", Value::integer(i)},      {"index", Value::integer(i + 1)},
                   {"revindex0", Value::integer(n - i - 1)}, {"revindex", Value::integer(n - i)},
                   {"first", Value::boolean(i == 0)},  {"last", Value::boolean(i == n - 1)},
                   {"length", Value::integer(n)},      {"depth", Value::integer(1)},
                   {"depth0", Value::integer(0)}};
      if (i > 0) loop.emplace_back("previtem", items[i - 1]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[i + 1]);
      loop.emplace_back("cycle", Value::callable("loop.cycle", [i](CallArgs& a) -> Value {
        if (a.pos.empty()) throw Error("loop.cycle() needs at least one argument");
        return a.pos[static_cast<size_t>(i) % a.pos.size()];
      }));
      body->set("loop", Value::dict(std::move(loop)));
      bind_targets(s.targets, items[i], *body);
      if (exec(s.body, body, out) == Flow::kBreak) break;
    }
    if (n == 0) return exec(s.else_body, f, out);
    return Flow::kNormal;
  }

  Value make_macro(const Stmt& s, const FramePtr& def) {
    std::weak_ptr<Frame> weak = def;
    const Stmt* st = &s;
    return Value::callable(s.text, [this, st, weak](CallArgs& a) -> Value {
      FramePtr parent = weak.lock();
      if (!parent) throw Error("macro '" + st->text + "' called after its scope ended");
      if (a.pos.size() > st->params.size())
        throw Error(strf("macro '%s' takes not more than %zu argument(s)", st->text.c_str(), st->params.size()));
      FramePtr f = child(parent);
      for (const auto& [k, v] : a.kw) {
        bool known = false;
        for (const auto& p : st->params) known = known || p.first == k;
        if (!known) throw Error("macro '" + st->text + "' was invoked with an unknown keyword argument '" + k + "'");
      }
      for (size_t i = 0; i < st->params.size(); ++i) {
        const auto& [pname, pdef] = st->params[i];
        const Value* kwv = nullptr;
        for (const auto& [k, v] : a.kw)
          if (k == pname) kwv = &v;
        if (i < a.pos.size()) f->set(pname, a.pos[i]);
        else if (kwv) f->set(pname, *kwv);
        else if (pdef) f->set(pname, eval(*pdef, f));
        else f->set(pname, Value::undefined("parameter '" + pname + "' was not provided"));
      }
      // Python stops runaway recursion with RecursionError; we refuse before the C++ stack runs out.
      if (depth_ >= kMaxCallDepth) throw Error(strf("macro '%s': call depth exceeds %d", st->text.c_str(), kMaxCallDepth));
      ++depth_;
      std::string out;
      try {
        exec(st->body, f, out);
      } catch (...) {
        --depth_;
        throw;
      }
      --depth_;
      return Value::string(out);
    });
  }

  Value eval(const Expr& e, const FramePtr& f) {
    try {
      return eval_inner(e, f);
    } catch (const Error& err) {
      if (positioned(err)) throw;
      throw Error(where(e.line, e.col) + err.what());
    }
  }

  CallArgs eval_args(const Expr& e, const FramePtr& f, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], f));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, f));
    return a;
  }

  // Filter node; `subject` replaces args[0] for filter blocks and `set` blocks (where it is null).
  Value eval_filter(const Expr& e, const FramePtr& f, const Value* subject) {
    Value in = e.args[0] ? (e.args[0]->kind == ExprKind::kFilter && subject ? eval_filter(*e.args[0], f, subject)
                                                                             : eval(*e.args[0], f))
                         : *subject;
    CallArgs a = eval_args(e, f, 1);
    return apply_filter(e.name, in, a);
  }

  Value eval_inner(const Expr& e, const FramePtr& f) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: {
        if (const Value* v = f->lookup(e.name)) return *v;
        if (const Value* v = globals_->lookup(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& x : e.args) items.push_back(eval(*x, f));
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], f);
          if (!k.is_string()) throw Error("dict literal keys must be strings, got " + k.type_name());
          Value v = eval(*e.args[i + 1], f);
          bool found = false;
          for (auto& kv : d)
            if (kv.first == k.str_ref()) { kv.second = v; found = true; }
          if (!found) d.emplace_back(k.str_ref(), v);
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::kGetAttr: return get_attr(eval(*e.args[0], f), e.name);
      case ExprKind::kGetItem: return get_item(eval(*e.args[0], f), eval(*e.args[1], f));
      case ExprKind::kSlice: {
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], f) : Value::none(); };
        Value obj = eval(*e.args[0], f);
        return slice_value(obj, part(1), part(2), part(3));
      }
      case ExprKind::kCall: {
        Value fn = eval(*e.args[0], f);
        if (fn.is_undefined()) undefined_error(fn);
        if (!fn.is_callable()) throw Error("'" + fn.type_name() + "' object is not callable");
        CallArgs a = eval_args(e, f, 1);
        return fn.function()(a);
      }
      case ExprKind::kFilter: return eval_filter(e, f, nullptr);
      case ExprKind::kTest: {
        Value v = eval(*e.args[0], f);
        CallArgs a = eval_args(e, f, 1);
        return Value::boolean(apply_test(e.name, v, a) != e.negated);
      }
      case ExprKind::kUnary: {
        Value v = eval(*e.args[0], f);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number()) throw Error("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.is_float() ? v : Value::integer(v.as_int());
        if (v.is_float()) return Value::number(-v.as_float());
        return Value::integer(sub_int(0, v.as_int(), "-"));
      }
      case ExprKind::kBinary: {
        Value l = eval(*e.args[0], f);
        if (e.name == "and") return l.truthy() ? eval(*e.args[1], f) : l;
        if (e.name == "or") return l.truthy() ? l : eval(*e.args[1], f);
        Value r = eval(*e.args[1], f);
        if (e.name == "~") return Value::string(l.to_str() + r.to_str());
        return arith(e.name, l, r);
      }
      case ExprKind::kCompare: {
        Value l = eval(*e.args[0], f);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = eval(*e.args[i + 1], f);
          if (!compare(e.ops[i], l, r)) return Value::boolean(false);
          l = std::move(r);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCond: {
        if (eval(*e.args[0], f).truthy()) return eval(*e.args[1], f);
        if (e.args[2]) return eval(*e.args[2], f);
        return Value::undefined("the inline if-expression had no else branch");
      }
    }
    return Value();
  }

  static constexpr int kMaxCallDepth = 200;
  FramePtr globals_;
  int depth_ = 0;
};

}  // namespace

Template::Template(const std::string& source) : body_(std::make_shared<const Body>(parse(lex(source)))) {}

std::string Template::render(const Dict& context) const {
  auto globals = std::make_shared<Frame>();
  globals->vars = make_globals();
  auto root = std::make_shared<Frame>();
  root->parent = globals;
  for (const auto& [k, v] : context) root->set(k, v);
  Renderer r(globals);
  std::string out;
  r.exec(*body_, root, out);
  return out;
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) fail("chat template: render context must be a JSON object, got %s", context.type_name());
  Value v = Value::from_json(context);
  return render(v.dict_ref());
}

}  // namespace tern::text::jinja
