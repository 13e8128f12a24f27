// Recursive-descent Jinja parser (grammar per jinja2/parser.py, 3.1).
#include "text/jinja_parser.h"

#include <set>

#include "core/error.h"
#include "text/jinja_builtins.h"

namespace tern::text::jinja {
namespace {

// A float literal as Jinja reads it (Python's float()): 1e999 is inf, not an error.
double parse_float_literal(const std::string& text) {
  double d = 0;
  if (!parse_python_float(text, &d)) throw Error("jinja: malformed float literal " + text);
  return d;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] void fail_at(const Token& tok, const std::string& msg) const { throw Error(where(tok.line, tok.col) + msg); }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  std::string describe(const Token& tok) const {
    switch (tok.type) {
      case Tok::kEof: return "end of template";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kVarEnd: return "end of print statement";
      default: return "'" + tok.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail_at(cur(), std::string("expected '") + op + "', got " + describe(cur()));
    ++i_;
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail_at(cur(), "expected a name, got " + describe(cur()));
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail_at(cur(), "expected end of statement block, got " + describe(cur()));
    ++i_;
  }
  ExprPtr node(ExprKind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // Parses statements until one of `ends` opens a block; *end receives that tag (consumed, block end not).
  Body parse_body(const std::set<std::string>& ends, std::string* end) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Tok::kEof) {
        if (!ends.empty()) fail_at(tok, "unexpected end of template, expected '" + *ends.begin() + "'");
        *end = "";
        return body;
      }
      if (tok.type == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->text = tok.text;
        body.push_back(std::move(s));
        ++i_;
      } else if (tok.type == Tok::kVarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = tok.line;
        s->col = tok.col;
        s->expr = parse_tuple(true, false);
        if (cur().type != Tok::kVarEnd) fail_at(cur(), "expected end of print statement '}}', got " + describe(cur()));
        ++i_;
        body.push_back(std::move(s));
      } else {
        ++i_;  // block begin
        const Token& name = cur();
        if (name.type != Tok::kName) fail_at(name, "expected a statement name, got " + describe(name));
        if (ends.count(name.text)) {
          ++i_;
          *end = name.text;
          return body;
        }
        body.push_back(parse_statement());
      }
    }
  }

  StmtPtr new_stmt(StmtKind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  StmtPtr parse_statement() {
    const Token& tok = cur();
    if (++nesting_ > kMaxNesting) fail_at(tok, "statements nested too deeply");
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    const std::string& n = tok.text;
    ++i_;
    if (n == "if") return parse_if(tok);
    if (n == "for") return parse_for(tok);
    if (n == "set") return parse_set(tok);
    if (n == "macro") return parse_macro(tok);
    if (n == "with") return parse_with(tok);
    if (n == "filter") return parse_filter_block(tok);
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_at(tok, "'" + n + "' outside of a loop");
      expect_block_end();
      return new_stmt(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, tok);
    }
    if (n == "generation") {
      auto s = new_stmt(StmtKind::kGeneration, tok);
      expect_block_end();
      std::string end;
      s->body = parse_body({"endgeneration"}, &end);
      expect_block_end();
      return s;
    }
    static const std::set<std::string> kEnds = {"endif", "endfor", "endmacro", "endset", "endwith", "endfilter",
                                                "elif", "else", "endgeneration", "endraw"};
    if (kEnds.count(n)) fail_at(tok, "unexpected '" + n + "' (no matching block is open)");
    fail_at(tok, "unsupported tag '" + n + "'");
  }

  StmtPtr parse_if(const Token& at) {
    auto s = new_stmt(StmtKind::kIf, at);
    while (true) {
      ExprPtr cond = parse_tuple(false, false);
      expect_block_end();
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end);
      }
      expect_block_end();
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = is_op("(");
    if (paren) ++i_;
    while (true) {
      names.push_back(expect_name());
      if (!is_op(",")) break;
      ++i_;
      if (cur().type != Tok::kName) break;
    }
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for(const Token& at) {
    auto s = new_stmt(StmtKind::kFor, at);
    s->targets = parse_targets();
    if (!is_name("in")) fail_at(cur(), "expected 'in' in for loop, got " + describe(cur()));
    ++i_;
    s->expr = parse_tuple(false, false, /*with_condexpr=*/false);
    if (is_name("if")) {
      ++i_;
      s->cond = parse_expression();
    }
    if (is_name("recursive")) fail_at(cur(), "unsupported construct 'recursive' loop");
    expect_block_end();
    ++loop_depth_;
    std::string end;
    s->body = parse_body({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(const Token& at) {
    auto s = new_stmt(StmtKind::kSet, at);
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
      s->targets.push_back(expect_name());
      ++i_;
      s->attr = expect_name();
    } else {
      s->targets = parse_targets();
    }
    if (is_op("=")) {
      ++i_;
      s->expr = parse_tuple(false, false);
      expect_block_end();
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1) fail_at(cur(), "expected '=' in set statement");
    s->kind = StmtKind::kSetBlock;
    if (is_op("|")) s->expr = parse_filter(nullptr, true);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(const Token& at) {
    auto s = new_stmt(StmtKind::kMacro, at);
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string p = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        ++i_;
        def = parse_expression();
      }
      s->params.emplace_back(p, std::move(def));
    }
    ++i_;
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    s->body = parse_body({"endmacro"}, &end);
    loop_depth_ = saved;
    if (cur().type == Tok::kName && cur().text == s->text) ++i_;
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(const Token& at) {
    auto s = new_stmt(StmtKind::kWith, at);
    while (cur().type != Tok::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      std::string n = expect_name();
      expect_op("=");
      s->params.emplace_back(n, parse_expression());
    }
    expect_block_end();
    std::string end;
    s->body = parse_body({"endwith"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(const Token& at) {
    auto s = new_stmt(StmtKind::kFilterBlock, at);
    s->expr = parse_filter(nullptr, true);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endfilter"}, &end);
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_condexpr = true) { return with_condexpr ? parse_condexpr() : parse_or(); }

  // Comma-separated expressions; a single one without a trailing comma is returned as is.
  ExprPtr parse_tuple(bool simplified, bool explicit_parens, bool with_condexpr = true) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        ++i_;
        comma = true;
      }
      if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")") || is_name("in") ||
          (is_name("if") && !with_condexpr)) {
        if (items.empty() && !explicit_parens) fail_at(cur(), "expected an expression, got " + describe(cur()));
        break;
      }
      items.push_back(parse_expression(with_condexpr));
    }
    if (items.size() == 1 && !comma) return std::move(items[0]);
    auto e = node(ExprKind::kTuple, at);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token& at = cur();
      ++i_;
      auto c = node(ExprKind::kCond, at);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      if (is_name("else")) {
        ++i_;
        c->args.push_back(parse_condexpr());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const char* op, ExprPtr l, ExprPtr r, const Token& at) {
    auto e = node(ExprKind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = cur();
      ++i_;
      e = binary("or", std::move(e), parse_and(), at);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = cur();
      ++i_;
      e = binary("and", std::move(e), parse_not(), at);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = node(ExprKind::kUnary, cur());
      ++i_;
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        ++i_;
      } else if (is_name("in")) {
        op = "in";
        ++i_;
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      ++i_;
      e = binary(at.text == "+" ? "+" : "-", std::move(e), parse_concat(), at);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = cur();
      ++i_;
      e = binary("~", std::move(e), parse_math2(), at);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      std::string op = at.text;
      ++i_;
      auto b = node(ExprKind::kBinary, at);
      b->name = op;
      b->args.push_back(std::move(e));
      b->args.push_back(parse_pow());
      e = std::move(b);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = cur();
      ++i_;
      e = binary("**", std::move(e), parse_unary(true), at);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    // Bounded nesting keeps hostile templates from exhausting the stack.
    if (++nesting_ > kMaxNesting) fail_at(cur(), "expression nested too deeply");
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(ExprKind::kUnary, cur());
      e->name = cur().text;
      ++i_;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    auto lit = [&](Value v) {
      auto e = node(ExprKind::kLiteral, tok);
      e->literal = std::move(v);
      return e;
    };
    switch (tok.type) {
      case Tok::kName: {
        ++i_;
        if (tok.text == "true" || tok.text == "True") return lit(Value::boolean(true));
        if (tok.text == "false" || tok.text == "False") return lit(Value::boolean(false));
        if (tok.text == "none" || tok.text == "None") return lit(Value::none());
        auto e = node(ExprKind::kName, tok);
        e->name = tok.text;
        return e;
      }
      case Tok::kString: {
        std::string s;
        while (cur().type == Tok::kString) s += t_[i_++].text;  // adjacent literals concatenate
        return lit(Value::string(s));
      }
      case Tok::kInt: {
        ++i_;
        try {
          return lit(Value::integer(std::stoll(tok.text)));
        } catch (const std::exception&) {
          fail_at(tok, "integer literal " + tok.text + " does not fit in 64 bits");
        }
      }
      case Tok::kFloat: ++i_; return lit(Value::number(parse_float_literal(tok.text)));
      case Tok::kOp:
        if (tok.text == "(") {
          ++i_;
          ExprPtr e = parse_tuple(false, true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") return parse_list();
        if (tok.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail_at(tok, "unexpected " + describe(tok));
  }

  ExprPtr parse_list() {
    auto e = node(ExprKind::kList, cur());
    expect_op("[");
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression());
    }
    ++i_;
    return e;
  }

  ExprPtr parse_dict() {
    auto e = node(ExprKind::kDict, cur());
    expect_op("{");
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression());
      expect_op(":");
      e->args.push_back(parse_expression());
    }
    ++i_;
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& at = cur();
      if (is_op(".")) {
        ++i_;
        if (cur().type == Tok::kName) {
          auto g = node(ExprKind::kGetAttr, at);
          g->name = t_[i_++].text;
          g->args.push_back(std::move(e));
          e = std::move(g);
        } else if (cur().type == Tok::kInt) {
          auto g = node(ExprKind::kGetItem, at);
          g->args.push_back(std::move(e));
          auto idx = node(ExprKind::kLiteral, cur());
          const Token& num = t_[i_++];
          try {
            idx->literal = Value::integer(std::stoll(num.text));
          } catch (const std::exception&) {
            fail_at(num, "integer literal " + num.text + " does not fit in 64 bits");
          }
          g->args.push_back(std::move(idx));
          e = std::move(g);
        } else {
          fail_at(cur(), "expected an attribute name after '.', got " + describe(cur()));
        }
      } else if (is_op("[")) {
        ++i_;
        e = parse_subscript(std::move(e), at);
        expect_op("]");
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
    ExprPtr parts[3];
    bool slice = false;
    if (!is_op(":")) parts[0] = parse_expression();
    if (is_op(":")) {
      slice = true;
      ++i_;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression();
      if (is_op(":")) {
        ++i_;
        if (!is_op("]")) parts[2] = parse_expression();
      }
    }
    auto e = node(slice ? ExprKind::kSlice : ExprKind::kGetItem, at);
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(parts[0]));
    if (slice) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return e;
  }

  // Call arguments `(a, b, k=v)` into e->args (after any existing) and e->kwargs.
  void parse_call_args(Expr* e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail_at(cur(), "unsupported construct '*args/**kwargs' in a call");
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        std::string k = t_[i_].text;
        i_ += 2;
        e->kwargs.emplace_back(k, parse_expression());
      } else {
        if (!e->kwargs.empty()) fail_at(cur(), "positional argument follows keyword argument");
        e->args.push_back(parse_expression());
      }
    }
    ++i_;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::kCall, cur());
    e->args.push_back(std::move(callee));
    parse_call_args(e.get());
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == Tok::kName) {
      ++i_;
      n += '.';
      n += expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr subject, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (is_op("|")) ++i_;
      start_inline = false;
      const Token& at = cur();
      auto f = node(ExprKind::kFilter, at);
      f->name = dotted_name();
      if (!has_filter(f->name)) fail_at(at, "unsupported filter '" + f->name + "'");
      f->args.push_back(std::move(subject));
      if (is_op("(")) parse_call_args(f.get());
      subject = std::move(f);
    }
    return subject;
  }

  ExprPtr parse_test(ExprPtr subject) {
    ++i_;  // 'is'
    bool negated = false;
    if (is_name("not")) {
      negated = true;
      ++i_;
    }
    const Token& at = cur();
    auto e = node(ExprKind::kTest, at);
    e->name = dotted_name();
    if (!has_test(e->name)) fail_at(at, "unsupported test '" + e->name + "'");
    e->negated = negated;
    e->args.push_back(std::move(subject));
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                cur().type == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_at(cur(), "cannot chain multiple tests with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) e = parse_filter(std::move(e), false);
      else if (is_name("is")) e = parse_test(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  const std::vector<Token>& t_;
  static constexpr int kMaxNesting = 200;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace tern::text::jinja
