// Constrained decoding for response_format json_object / json_schema: a byte-level pushdown automaton that accepts
// exactly the prefixes of JSON texts whose top-level value is an object (RFC 8259 syntax; string bytes >= 0x80 are
// passed through, the tokenizer's decoder handles UTF-8; surrogate escapes only in pairs), with at most
// kMaxWhitespace whitespace bytes in a row between tokens (a model that prefers whitespace would otherwise never get
// to the content), and, given a schema, that conform to it. Schema subset (check_schema refuses anything else): type
// (one or a list), properties (then only those keys, each at most once, unless additionalProperties is true;
// additionalProperties false alone: no key), required, items, enum, const (all keywords of a schema hold
// together); title, description, default, examples, $schema are ignored. At each step every token whose bytes
// would leave the language is masked out; once the object is complete the answer ends.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tern::serve {

// Empty when the schema is within the supported subset (root: an object schema), else what is not supported.
std::string check_schema(const nlohmann::ordered_json& schema);

class JsonPrefix {
 public:
  static constexpr int kMaxWhitespace = 8;
  // schema: null (any object) or a schema that passed check_schema; it must outlive the automaton.
  explicit JsonPrefix(const nlohmann::ordered_json* schema = nullptr) : root_(schema) {}
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
    kEnum,          // inside an enum / const value (matched against the options' compact JSON text)
    kDone,
  };
  using json = nlohmann::ordered_json;
  struct Frame {
    char kind;                       // '{' or '['
    const json* schema;              // the container's schema (null: anything)
    std::vector<std::string> seen;   // object keys so far
  };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

  bool after_value();        // a value just ended: continue in the enclosing container
  bool close_container();    // '}' or ']' of the innermost container (an object's required keys must be there)
  static const json* items_of(const json* s);  // the element schema of an array schema (null: anything)
  bool closed(const Frame& f) const;                  // only the schema's properties may appear
  bool key_ok(const Frame& f, bool complete) const;   // keybuf_ so far / complete
  bool required_met(const Frame& f) const;
  bool more_keys(const Frame& f) const;               // a ',' can still be followed by an allowed key
  static bool allows_type(const json* s, const char* type);
  bool end_number(char c);   // c ends the number; false if the number is incomplete
  bool value_start(char c);

  Mode mode_ = Mode::kStart;
  Num num_ = Num::kInt;
  bool key_ = false;         // the current string is an object key
  int hex_left_ = 0;
  uint8_t hex_hi_ = 0;       // first byte of the \uXXXX being read
  bool high_ = false;        // that escape is a high surrogate
  bool want_low_ = false;    // a high surrogate was read: \u + low surrogate must follow
  std::string_view lit_;     // remaining bytes of a literal
  std::vector<Frame> stack_;
  const json* root_ = nullptr;
  const json* vschema_ = nullptr;  // schema of the value about to start (null: anything)
  std::string keybuf_;             // the object key being read
  bool integer_ = false;           // the number being read must be an integer
  std::vector<std::string> enum_opts_;
  std::string enum_so_far_;
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
  // Not const: it reuses scratch buffers.
  bool mask(float* logits, int64_t n_vocab);
  virtual void accept(int32_t token) = 0;
  virtual bool done() const = 0;
  virtual bool ends_answer() const = 0;  // true: the answer ends when done(); false: generation goes on freely

 protected:
  virtual bool allows(const std::string& bytes) = 0;
  const std::vector<std::string>& bytes_;
  const std::vector<bool>& special_;
  std::vector<int32_t> banned_;  // mask's scratch
};

// response_format json_object (schema null) or json_schema.
class JsonConstraint : public TokenConstraint {
 public:
  JsonConstraint(const std::vector<std::string>& token_bytes, const std::vector<bool>& special,
                 const nlohmann::ordered_json& schema)
      : TokenConstraint(token_bytes, special), schema_(schema), state_(schema_.is_null() ? nullptr : &schema_) {}
  void accept(int32_t token) override;
  bool done() const override { return state_.done(); }
  bool ends_answer() const override { return true; }

 private:
  bool allows(const std::string& bytes) override;
  nlohmann::ordered_json schema_;  // owned: state_ points into it
  JsonPrefix state_;
  JsonPrefix trial_;               // allows' scratch: state_ plus one token's bytes
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
  bool allows(const std::string& bytes) override;
  std::vector<std::string> options_;
  std::string so_far_;
};

}  // namespace tern::serve
