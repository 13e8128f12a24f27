// Jinja AST: one node struct per family (expressions, statements), fields used according to the kind.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace tern::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args = items
  kTuple,     // args = items
  kDict,      // kwargs-like: keys in args[2i], values in args[2i+1]
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs)
  kTest,      // args[0] is [not] name(args[1..])
  kUnary,     // op args[0]: "not", "-", "+"
  kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
  kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0, col = 0;
  Value literal;
  std::string name;  // name, attribute, filter, test, or unary/binary operator
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // comparison operators
  bool negated = false;          // `is not`
};

enum class StmtKind {
  kText,        // text
  kOutput,      // {{ expr }}
  kIf,          // branches (cond, body); else_body
  kFor,         // targets in expr [if cond]; body; else_body
  kSet,         // targets (or ns_target.attr) = expr
  kSetBlock,    // {% set x %}body{% endset %}
  kMacro,       // name(params) body
  kBreak,
  kContinue,
  kWith,        // {% with a = x %} body
  kFilterBlock, // {% filter f %} body: filter expression in expr with a null subject
  kGeneration,  // transformers' {% generation %} body (rendered as is)
};

struct Stmt {
  StmtKind kind;
  int line = 0, col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: targets[0].attr
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters / with-assignments
  Body body, else_body;
};

}  // namespace tern::text::jinja
