// Pre-tokenizer: splits normalised text into pieces with the family's regex (HF `Split`, behaviour Isolated:
// every match is a piece and so is every unmatched gap). Regexes run on PCRE2 in UTF + UCP mode so \p{L},
// \p{N}, \p{M}, \s follow the Unicode database (HF tokenizers uses Oniguruma with the same patterns).
#pragma once
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

struct pcre2_real_code_8;

namespace tern::text {

class PreTokenizer {
 public:
  explicit PreTokenizer(PreType pre);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of text (views into it, covering it in order). text must be valid UTF-8.
  void split(std::string_view text, std::vector<std::string_view>* pieces) const;

  // The split regex as written in the family's HF tokenizer.json.
  static std::string_view hf_regex(PreType pre);

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace tern::text
