// Turns a sequence's generated token ids into text pieces that are safe to send: complete UTF-8 only, and text that
// could still become the start of a stop string is held back (same rules as runtime::generate for one sequence).
// End-of-generation tokens are handled by the caller and never pushed here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace tern::serve {

class TextStream {
 public:
  TextStream(const text::Tokenizer& tok, std::vector<std::string> stops);
  // Adds one token; returns the text that may be sent now. Sets *stopped when a stop string has appeared (the
  // stop string and anything after it are never returned).
  std::string push(int32_t id, bool* stopped);
  // End of generation (not by a stop string): returns everything still held back.
  std::string finish();
  // After a stop: the stop string that ended the text (empty when none did).
  const std::string& matched_stop() const { return matched_; }

 private:
  std::string take(size_t upto);

  text::StreamDecoder dec_;
  std::vector<std::string> stops_;
  std::string text_;    // all decoded text so far
  size_t emitted_ = 0;  // bytes of text_ already returned
  std::string matched_;
};

}  // namespace tern::serve
