// Jinja lexer with jinja2's whitespace rules as transformers configures them: trim_blocks=True (one newline after
// a block or comment tag is dropped), lstrip_blocks=True (whitespace between a line start and a block or comment
// tag is dropped), `-` / `+` tag modifiers, raw blocks, newline normalisation and keep_trailing_newline=False.
#pragma once
#include <string>
#include <vector>

namespace tern::text::jinja {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string text;  // data, name, decoded string literal, number spelling, operator
  int line = 1;
  int col = 1;
};

// Throws tern::Error "chat template: line L, column C: ..." on malformed input (unterminated tags, strings).
std::vector<Token> lex(const std::string& source);

// Message prefix used by every template error.
std::string where(int line, int col);

}  // namespace tern::text::jinja
