// Jinja lexer; the whitespace handling mirrors jinja2.lexer.Lexer.tokeniter (3.1) rule by rule.
#include "text/jinja_lexer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "text/jinja_value.h"

namespace tern::text::jinja {

std::string where(int line, int col) { return strf("chat template: line %d, column %d: ", line, col); }

namespace {

// Python str.rstrip() (Unicode whitespace).
std::string py_rstrip(const std::string& s) {
  auto cps = utf8_decode(s);
  size_t n = cps.size();
  while (n > 0 && py_isspace(cps[n - 1])) --n;
  return utf8_encode(cps, 0, n);
}

// Length in bytes of the run of Python whitespace starting at pos.
size_t py_space_run(const std::string& s, size_t pos) {
  auto cps = utf8_decode(s.substr(pos));
  size_t bytes = 0;
  for (uint32_t cp : cps) {
    if (!py_isspace(cp)) break;
    std::string tmp;
    utf8_append(&tmp, cp);
    bytes += tmp.size();
  }
  return bytes;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, tag - pos);
      if (tag == src_.size()) {
        emit_text(text, pos);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      text = strip_before(text, pos, kind, sign);
      emit_text(text, pos);
      size_t body = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') pos = lex_comment(tag, body);
      else if (kind == '%' && is_raw(body)) pos = lex_raw(tag, body);
      else pos = lex_tag(tag, body, kind);
    }
    out_.push_back(Token{Tok::kEof, "", line_of(src_.size()), col_of(src_.size())});
    return std::move(out_);
  }

 private:
  int line_of(size_t off) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), off) - line_starts_.begin()) + 1;
  }
  int col_of(size_t off) const {
    size_t ls = 0;
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    if (it != line_starts_.begin()) ls = *(it - 1);
    return static_cast<int>(off - ls) + 1;
  }
  [[noreturn]] void error(size_t off, const std::string& msg) const {
    throw Error(where(line_of(off), col_of(off)) + msg);
  }
  void push(Tok t, std::string text, size_t off) { out_.push_back(Token{t, std::move(text), line_of(off), col_of(off)}); }

  size_t find_tag(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  void emit_text(const std::string& text, size_t off) {
    if (!text.empty()) push(Tok::kText, text, off);
  }

  // `{%-` strips all whitespace before the tag; otherwise lstrip_blocks strips the whitespace between the line
  // start and a block/comment tag (jinja2: only when the text since the last newline is all whitespace).
  std::string strip_before(const std::string& text, size_t text_pos, char kind, char sign) const {
    if (sign == '-') return py_rstrip(text);
    if (sign == '+' || kind == '{') return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    bool line_starting = text_pos == 0 || src_[text_pos - 1] == '\n';
    if (l_pos == 0 && !line_starting) return text;
    std::string tail = text.substr(l_pos);
    if (tail.empty() || py_space_run(tail, 0) != tail.size()) return text;
    return text.substr(0, l_pos);
  }

  // After a block/comment end: `-%}` eats all following whitespace, `+%}` nothing, plain `%}` one newline.
  size_t after_block_end(size_t end_pos, char sign) const {
    if (sign == '-') return end_pos + py_space_run(src_, end_pos);
    if (sign == '+') return end_pos;
    return (end_pos < src_.size() && src_[end_pos] == '\n') ? end_pos + 1 : end_pos;
  }

  size_t lex_comment(size_t tag, size_t body) {
    size_t e = src_.find("#}", body);
    if (e == std::string::npos) error(tag, "missing end of comment tag '#}'");
    char sign = (e > body && (src_[e - 1] == '-' || src_[e - 1] == '+')) ? src_[e - 1] : '\0';
    return after_block_end(e + 2, sign);
  }

  size_t skip_ws(size_t p) const {
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n' || src_[p] == '\r')) ++p;
    return p;
  }

  // `{% raw %}` / `{%- raw -%}`; the raw_begin rule has no trim_blocks suffix in jinja2.
  bool is_raw(size_t body) const {
    size_t p = skip_ws(body);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_ws(p + 3);
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  size_t lex_raw(size_t tag, size_t body) {
    size_t p = skip_ws(skip_ws(body) + 3);
    size_t start = src_[p] == '-' ? p + 3 + py_space_run(src_, p + 3) : p + 2;
    for (size_t q = src_.find("{%", start); q != std::string::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      char sign = (src_[r] == '-' || src_[r] == '+') ? src_[r] : '\0';
      r = skip_ws(r + (sign ? 1 : 0));
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r = skip_ws(r + 6);
      char esign = (src_[r] == '-' || src_[r] == '+') ? src_[r] : '\0';
      if (src_.compare(r + (esign ? 1 : 0), 2, "%}") != 0) continue;
      emit_text(strip_before(src_.substr(start, q - start), start, '%', sign), start);
      return after_block_end(r + (esign ? 1 : 0) + 2, esign);
    }
    error(tag, "missing end of raw directive '{% endraw %}'");
  }

  size_t lex_tag(size_t tag, size_t body, char kind) {
    push(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", tag);
    const char* close = kind == '{' ? "}}" : "%}";
    std::vector<char> brackets;
    size_t p = body;
    while (true) {
      p = skip_ws(p);
      if (p >= src_.size()) error(tag, std::string("unexpected end of template, expected '") + close + "'");
      if (brackets.empty()) {
        char sign = (src_[p] == '-' || (src_[p] == '+' && kind == '%')) ? src_[p] : '\0';
        if (src_.compare(p + (sign ? 1 : 0), 2, close) == 0) {
          size_t end = p + (sign ? 1 : 0) + 2;
          push(kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", p);
          if (kind == '{') return sign == '-' ? end + py_space_run(src_, end) : end;
          return after_block_end(end, sign);
        }
      }
      p = lex_one(p, &brackets, tag);
    }
  }

  size_t lex_one(size_t p, std::vector<char>* brackets, size_t tag) {
    char c = src_[p];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t q = p;
      while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      push(Tok::kName, src_.substr(p, q - p), p);
      return q;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                 ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(p, n, op) != 0) continue;
      if (n == 1 && std::strchr("([{", op[0])) brackets->push_back(op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}');
      if (n == 1 && std::strchr(")]}", op[0])) {
        if (brackets->empty()) error(p, std::string("unexpected '") + op + "'");
        if (brackets->back() != op[0]) error(p, std::string("unexpected '") + op + "', expected '" + brackets->back() + "'");
        brackets->pop_back();
      }
      push(Tok::kOp, op, p);
      return p + n;
    }
    error(p, std::string("unexpected character '") + c + "' in tag opened at " + where(line_of(tag), col_of(tag)));
  }

  size_t lex_number(size_t p) {
    auto digits = [&](size_t q) {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      return q;
    };
    size_t q = digits(p);
    bool is_float = false;
    // jinja2 float_re refuses a number right after '.', so `a.0.b` is item 0, not 0.b.
    bool after_dot = !out_.empty() && out_.back().type == Tok::kOp && out_.back().text == ".";
    if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      q = digits(q + 1);
      is_float = true;
    }
    if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string spelling;
    for (size_t i = p; i < q; ++i)
      if (src_[i] != '_') spelling += src_[i];
    push(is_float ? Tok::kFloat : Tok::kInt, spelling, p);
    return q;
  }

  // Python's unicode-escape decoding of a literal (jinja2 lexer: encode('ascii','backslashreplace')
  // .decode('unicode-escape')); unknown escapes keep their backslash.
  size_t lex_string(size_t p) {
    char q = src_[p];
    std::string out;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) error(p, "unterminated string literal");
      char c = src_[i];
      if (c == q) break;
      if (c != '\\') { out += c; ++i; continue; }
      if (i + 1 >= src_.size()) error(p, "unterminated string literal");
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) error(p, strf("truncated \\%c escape in string literal", e));
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) error(p, strf("truncated \\%c escape in string literal", e));
            cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF) error(p, "illegal Unicode character in string literal");
          utf8_append(&out, cp);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = e - '0';
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) cp = cp * 8 + (src_[i++] - '0');
            utf8_append(&out, cp);
          } else if (e == 'N') {
            error(p, "\\N{...} escapes are not supported");
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    push(Tok::kString, out, p);
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

// jinja2 splits the source on \r\n, \r and \n, drops one trailing empty line (keep_trailing_newline=False) and
// joins with \n.
std::string normalize(const std::string& source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(normalize(source)).run(); }

}  // namespace tern::text::jinja
