// Jinja parser: tokens -> AST, following jinja2.parser's grammar and operator precedence
// (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary < postfix/filters/tests).
// Unsupported tags (include, import, extends, block, call, ...), unknown filters and unknown tests are errors that
// name the construct and its line/column, as jinja2 reports them at compile time.
#pragma once
#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"

namespace tern::text::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace tern::text::jinja
