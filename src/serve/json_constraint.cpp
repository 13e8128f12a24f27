#include "serve/json_constraint.h"

#include <algorithm>
#include <cmath>

namespace tern::serve {

namespace {
bool ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool hex(unsigned char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
}  // namespace

bool JsonPrefix::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed(c)) return false;
  return true;
}

bool JsonPrefix::after_value() {
  if (stack_.empty()) mode_ = Mode::kDone;
  else mode_ = stack_.back() == '{' ? Mode::kObjNext : Mode::kArrNext;
  return true;
}

bool JsonPrefix::end_number(char c) {
  after_value();
  return feed(c);  // the delimiter belongs to the container
}

bool JsonPrefix::value_start(char ch) {
  const unsigned char c = static_cast<unsigned char>(ch);
  switch (c) {
    case '{': stack_.push_back('{'); mode_ = Mode::kKeyOrEnd; return true;
    case '[': stack_.push_back('['); mode_ = Mode::kArrValueOrEnd; return true;
    case '"': key_ = false; mode_ = Mode::kString; return true;
    case '-': num_ = Num::kMinus; mode_ = Mode::kNumber; return true;
    case '0': num_ = Num::kZero; mode_ = Mode::kNumber; return true;
    case 't': lit_ = "rue"; mode_ = Mode::kLiteral; return true;
    case 'f': lit_ = "alse"; mode_ = Mode::kLiteral; return true;
    case 'n': lit_ = "ull"; mode_ = Mode::kLiteral; return true;
    default:
      if (c >= '1' && c <= '9') {
        num_ = Num::kInt;
        mode_ = Mode::kNumber;
        return true;
      }
      return false;
  }
}

bool JsonPrefix::feed(char ch) {
  const unsigned char c = static_cast<unsigned char>(ch);
  const bool in_string = mode_ == Mode::kString || mode_ == Mode::kEscape || mode_ == Mode::kUnicode;
  if (!in_string) {
    if (ws(c) && mode_ != Mode::kNumber && mode_ != Mode::kLiteral) {
      if (++ws_run_ > kMaxWhitespace) return false;
    } else {
      ws_run_ = 0;
    }
  }
  switch (mode_) {
    case Mode::kStart:
      if (ws(c)) return true;
      if (c != '{') return false;
      stack_.push_back('{');
      mode_ = Mode::kKeyOrEnd;
      return true;
    case Mode::kDone: return ws(c);
    case Mode::kValue: return ws(c) || value_start(ch);
    case Mode::kKeyOrEnd:
      if (ws(c)) return true;
      if (c == '}') {
        stack_.pop_back();
        return after_value();
      }
      [[fallthrough]];
    case Mode::kKey:
      if (ws(c)) return true;
      if (c != '"') return false;
      key_ = true;
      mode_ = Mode::kString;
      return true;
    case Mode::kColon:
      if (ws(c)) return true;
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kObjNext:
    case Mode::kArrNext: {
      if (ws(c)) return true;
      const bool obj = mode_ == Mode::kObjNext;
      if (c == ',') {
        mode_ = obj ? Mode::kKey : Mode::kValue;
        return true;
      }
      if (c != (obj ? '}' : ']')) return false;
      stack_.pop_back();
      return after_value();
    }
    case Mode::kArrValueOrEnd:
      if (ws(c)) return true;
      if (c == ']') {
        stack_.pop_back();
        return after_value();
      }
      return value_start(ch);
    case Mode::kString:
      if (c == '"') {
        if (key_) {
          key_ = false;
          mode_ = Mode::kColon;
          return true;
        }
        return after_value();
      }
      if (c == '\\') {
        mode_ = Mode::kEscape;
        return true;
      }
      return c >= 0x20;
    case Mode::kEscape:
      if (c == 'u') {
        hex_left_ = 4;
        mode_ = Mode::kUnicode;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        mode_ = Mode::kString;
        return true;
      }
      return false;
    case Mode::kUnicode:
      if (!hex(c)) return false;
      if (--hex_left_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kLiteral:
      if (lit_.empty() || c != static_cast<unsigned char>(lit_[0])) return false;
      lit_.remove_prefix(1);
      return lit_.empty() ? after_value() : true;
    case Mode::kNumber:
      switch (num_) {
        case Num::kMinus:
          if (c == '0') num_ = Num::kZero;
          else if (digit(c)) num_ = Num::kInt;
          else return false;
          return true;
        case Num::kZero:
        case Num::kInt:
          if (digit(c) && num_ == Num::kInt) return true;
          if (c == '.') num_ = Num::kDot;
          else if (c == 'e' || c == 'E') num_ = Num::kE;
          else return end_number(ch);
          return true;
        case Num::kDot:
          if (!digit(c)) return false;
          num_ = Num::kFrac;
          return true;
        case Num::kFrac:
          if (digit(c)) return true;
          if (c == 'e' || c == 'E') {
            num_ = Num::kE;
            return true;
          }
          return end_number(ch);
        case Num::kE:
          if (c == '+' || c == '-') num_ = Num::kESign;
          else if (digit(c)) num_ = Num::kExp;
          else return false;
          return true;
        case Num::kESign:
          if (!digit(c)) return false;
          num_ = Num::kExp;
          return true;
        case Num::kExp:
          if (digit(c)) return true;
          return end_number(ch);
      }
      return false;
  }
  return false;
}

bool TokenConstraint::mask(float* logits, int64_t n_vocab) const {
  std::vector<int32_t> banned;
  bool any = false;
  for (int64_t id = 0; id < n_vocab; ++id) {
    const bool ok = id < static_cast<int64_t>(bytes_.size()) && !special_[id] && !bytes_[id].empty() &&
                    allows(bytes_[id]);
    if (ok) any = true;
    else banned.push_back(static_cast<int32_t>(id));
  }
  if (!any) return false;
  for (int32_t id : banned) logits[id] = -INFINITY;
  return true;
}

bool JsonConstraint::allows(const std::string& bytes) const {
  JsonPrefix s = state_;
  return s.feed(bytes);
}

void JsonConstraint::accept(int32_t token) {
  if (token >= 0 && token < static_cast<int32_t>(bytes_.size())) state_.feed(bytes_[token]);
}

// A token fits when what has been generated plus its bytes is still a prefix of (or exactly) some option.
bool ChoiceConstraint::allows(const std::string& bytes) const {
  const std::string next = so_far_ + bytes;
  return std::any_of(options_.begin(), options_.end(),
                     [&](const std::string& o) { return o.compare(0, next.size(), next) == 0 && next.size() <= o.size(); });
}

void ChoiceConstraint::accept(int32_t token) {
  if (token >= 0 && token < static_cast<int32_t>(bytes_.size())) so_far_ += bytes_[token];
}

bool ChoiceConstraint::done() const {
  return std::any_of(options_.begin(), options_.end(), [&](const std::string& o) { return o == so_far_; });
}

}  // namespace tern::serve
