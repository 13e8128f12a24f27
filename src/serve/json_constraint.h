// Constrained decoding for response_format json_object: a byte-level pushdown automaton that accepts exactly the
// prefixes of JSON texts whose top-level value is an object (RFC 8259 syntax; string bytes >= 0x80 are passed
// through, the tokenizer's decoder handles UTF-8), with at most kMaxWhitespace whitespace bytes in a row between
// tokens (a model that prefers whitespace would otherwise never get to the content). At each step every token whose bytes would leave the accepted
// language is masked out; once the object is complete the answer ends. Non-goals: JSON Schema (json_schema
// requests are refused), duplicate-key checks.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tern::serve {

class JsonPrefix {
 public:
  static constexpr int kMaxWhitespace = 16;
  // Feeds bytes; false (and the state is then unspecified) if they cannot continue a JSON object text.
  bool feed(std::string_view bytes);
  bool feed(char c);
  bool done() const { return mode_ == Mode::kDone; }  // a complete object has been read

 private:
  enum class Mode : uint8_t {
    kStart,         // before the top-level '{'
    kValue,         // a value is expected
    kKeyOrEnd,      // after '{'
    kKey,           // after ',' in an object
    kColon,         // after a key
    kObjNext,       // after a member value: ',' or '}'
    kArrValueOrEnd, // after '['
    kArrNext,       // after an element: ',' or ']'
    kString,        // inside a string
    kEscape,        // after a backslash
    kUnicode,       // inside \uXXXX
    kNumber,        // inside a number (sub-state in num_)
    kLiteral,       // inside true / false / null (rest in lit_)
    kDone,
  };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

  bool after_value();        // a value just ended: continue in the enclosing container
  bool end_number(char c);   // c ends the number; false if the number is incomplete
  bool value_start(char c);

  Mode mode_ = Mode::kStart;
  Num num_ = Num::kInt;
  bool key_ = false;         // the current string is an object key
  int hex_left_ = 0;
  std::string_view lit_;     // remaining bytes of a literal
  std::vector<char> stack_;  // '{' or '['
  int ws_run_ = 0;           // consecutive whitespace bytes between tokens (bounded, as llama.cpp's JSON grammar)
};

// Per-request token filter: which tokens may come next, given what has been generated.
class TokenConstraint {
 public:
  // token_bytes: [n_vocab] bytes of every token; special: [n_vocab] tokens never allowed (control tokens).
  TokenConstraint(const std::vector<std::string>& token_bytes, const std::vector<bool>& special)
      : bytes_(token_bytes), special_(special) {}
  virtual ~TokenConstraint() = default;
  // Sets logits of tokens that cannot come next to -inf. Returns false when no token can (then nothing changes).
  bool mask(float* logits, int64_t n_vocab) const;
  virtual void accept(int32_t token) = 0;
  virtual bool done() const = 0;
  virtual bool ends_answer() const = 0;  // true: the answer ends when done(); false: generation goes on freely

 protected:
  virtual bool allows(const std::string& bytes) const = 0;
  const std::vector<std::string>& bytes_;
  const std::vector<bool>& special_;
};

// response_format json_object.
class JsonConstraint : public TokenConstraint {
 public:
  using TokenConstraint::TokenConstraint;
  void accept(int32_t token) override;
  bool done() const override { return state_.done(); }
  bool ends_answer() const override { return true; }

 private:
  bool allows(const std::string& bytes) const override;
  JsonPrefix state_;
};

// Exactly one of a few strings comes next (tool_choice "required": one of the tool names), then anything.
class ChoiceConstraint : public TokenConstraint {
 public:
  ChoiceConstraint(const std::vector<std::string>& token_bytes, const std::vector<bool>& special,
                   std::vector<std::string> options)
      : TokenConstraint(token_bytes, special), options_(std::move(options)) {}
  void accept(int32_t token) override;
  bool done() const override;
  bool ends_answer() const override { return false; }

 private:
  bool allows(const std::string& bytes) const override;
  std::vector<std::string> options_;
  std::string so_far_;
};

}  // namespace tern::serve
