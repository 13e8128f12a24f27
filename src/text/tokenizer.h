// Byte-level BPE tokenizer (GPT-2 style) for the Qwen2 / Qwen3.5 and GLM-4/5 vocabularies: added-token split,
// optional NFC, regex pre-tokenisation (PCRE2, Unicode classes), byte -> stand-in character map, rank-ordered
// merges; decoding maps stand-ins back to bytes. Reference behaviour: HF `tokenizers` (see
// tools/gen_tokenizer_fixtures.py). Non-goals: SentencePiece/WordPiece vocabularies, HF dropout, offsets.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tern::text {

// GGUF tokenizer.ggml.token_type values (gguf-py TokenType).
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // special added token (HF special=true); matched in text only with parse_special
  kUserDefined = 4,  // added token that is not special (HF special=false); always matched
  kUnused = 5,
  kByte = 6,
};

// Pre-tokenizer split regex family (GGUF tokenizer.ggml.pre).
enum class PreType { kQwen35, kQwen2, kGlm4 };

// "qwen35" | "qwen2" | "glm4" (alias "glm5", as llama.cpp); anything else -> Error listing the supported names.
PreType parse_pre_type(std::string_view name);
const char* pre_type_name(PreType pre);

// Everything the tokenizer needs, as plain containers (filled from GGUF metadata or from tokenizer.json).
struct TokenizerData {
  std::string source;                // file name, for error messages
  std::vector<std::string> tokens;   // [n_vocab] token text; byte-mapped form for normal tokens ("Ġthe")
  std::vector<int32_t> token_type;   // [n_vocab] TokenType values; empty = all normal
  std::vector<std::string> merges;   // "left right" in byte-mapped form; rank = index
  std::string pre;                   // pre-tokenizer name, see parse_pre_type
  bool nfc = false;                  // apply Unicode NFC to non-special text (HF normalizer "NFC")
  bool ignore_merges = false;        // HF BPE ignore_merges: a pre-token that is a whole vocab entry wins
  std::vector<bool> added_normalized;  // [n_vocab] or empty: added token matched after normalisation (HF)
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, pad_id = -1;  // -1 = absent
  int32_t eom_id = -1;  // end of message: GLM's <|observation|>, after its tool calls (-1 = absent)
  bool add_bos = false;
};

// For data read from GGUF metadata (which records only tokenizer.ggml.pre): sets what the family's HF tokenizer
// does but the GGUF does not say. qwen35/qwen2: nfc = true (HF normalizer NFC; llama.cpp skips it).
// glm4/glm5: ignore_merges = true and no automatic BOS (llama.cpp llama-vocab.cpp does both for these names).
// Unknown pre -> Error (as parse_pre_type).
void apply_gguf_pre_defaults(TokenizerData* d);

// Fills TokenizerData from a Hugging Face tokenizer.json (text) and optional tokenizer_config.json (text, may be
// empty). Unsupported features (other models, normalizers, regexes, dropout, added-token strip flags) -> Error.
TokenizerData parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                 const std::string& source);
// Same, from files; config_path may be empty (then <dir of tokenizer_path>/tokenizer_config.json is used if present).
TokenizerData load_hf_tokenizer(const std::string& tokenizer_path, const std::string& config_path = "");

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerData data);  // validates everything; throws Error naming the problem
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Text -> ids. Added tokens are cut out first: non-special (USER_DEFINED) always, special (CONTROL) only when
  // parse_special (use true for rendered chat templates). Never adds BOS (see add_bos()). Invalid UTF-8 -> Error.
  std::vector<int32_t> encode(std::string_view text, bool parse_special) const;

  // Ids -> bytes (may end inside a UTF-8 character if the ids do). Id out of range -> Error.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Bytes of one token: stand-ins mapped back to bytes; added tokens give their literal text.
  std::string token_bytes(int32_t id) const;

  int32_t n_vocab() const;
  const std::string& token_text(int32_t id) const;  // stored form ("Ġthe")
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> find_token(std::string_view text) const;  // by stored form
  PreType pre_type() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t eot_id() const;
  int32_t eom_id() const;
  int32_t pad_id() const;
  bool add_bos() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Incremental detokeniser for streaming output: push() returns only complete, valid UTF-8; bytes of a character
// split across tokens are held back until it completes. Bytes that can never form valid UTF-8 become U+FFFD
// (one per maximal invalid subpart, as Python's errors="replace"). flush() emits what is held (an incomplete
// tail becomes U+FFFD) and resets.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false) : tok_(tok), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 character (at most 3)
};

// True when s is well-formed UTF-8 (no surrogates, no overlongs, nothing above U+10FFFF).
bool utf8_valid(std::string_view s);

}  // namespace tern::text
