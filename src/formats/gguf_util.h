// Small helpers shared by the GGUF reader and writer: unaligned little-endian loads and a printable form of
// untrusted names (keys and tensor names may hold any bytes; error messages must stay one line).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tern::gguf {

// tern only targets little-endian hosts (x86-64), so a GGUF (little-endian) value is a plain memcpy.
template <typename T>
inline T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Escapes bytes outside printable ASCII as \xNN and cuts the result at max_len input bytes ("..." appended).
inline std::string printable(std::string_view s, size_t max_len = 120) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  const size_t n = s.size() < max_len ? s.size() : max_len;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (n < s.size()) out += "...";
  return out;
}

}  // namespace tern::gguf
