// StreamDecoder: token bytes are appended to a small pending buffer; every complete valid character is released,
// an incomplete tail (<= 3 bytes that are a valid prefix) is held, and invalid bytes become U+FFFD.
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace tern::text {

// Moves the longest releasable prefix of *buf to the returned string; at_end turns an incomplete tail into U+FFFD.
static std::string drain(std::string* buf, bool at_end) {
  std::string out;
  size_t i = 0;
  while (i < buf->size()) {
    const Utf8Step st = utf8_step(*buf, i);
    if (st.status == Utf8Status::kIncomplete && !at_end) break;
    if (st.status == Utf8Status::kValid) out.append(*buf, i, st.n);
    else out += kReplacementChar;  // invalid subpart, or incomplete at end of stream
    i += st.n;
  }
  buf->erase(0, i);
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_) {
    const TokenType t = tok_.token_type(id);
    if (t == TokenType::kControl || t == TokenType::kUnknown) return {};
  }
  pending_ += tok_.token_bytes(id);
  return drain(&pending_, false);
}

std::string StreamDecoder::flush() { return drain(&pending_, true); }

}  // namespace tern::text
