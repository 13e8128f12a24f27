// UTF-8 well-formedness per Unicode Table 3-7 (second-byte ranges after E0, ED, F0, F4 exclude overlongs,
// surrogates and code points above U+10FFFF).
#include "text/utf8.h"

#include "text/tokenizer.h"

namespace tern::text {

Utf8Step utf8_step(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {Utf8Status::kValid, 1};
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Status::kInvalid, 1};  // continuation byte, C0/C1, F5..FF
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return {Utf8Status::kIncomplete, s.size() - i};
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Status::kInvalid, k};
  }
  return {Utf8Status::kValid, len};
}

char32_t utf8_decode(std::string_view s, size_t i, size_t n) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (n == 1) return b0;
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    Utf8Step st = utf8_step(s, i);
    if (st.status != Utf8Status::kValid) return false;
    i += st.n;
  }
  return true;
}

}  // namespace tern::text
