// Byte-level BPE core: the GPT-2 byte <-> stand-in character map and rank-ordered merging of one pre-token.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tern::text {

// GPT-2 bytes_to_unicode: bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF stand for themselves; the other 68 bytes map, in
// increasing byte order, to U+0100, U+0101, ... (space -> U+0120 'Ġ', newline -> U+010A 'Ċ').
class ByteMap {
 public:
  ByteMap();
  const std::string& encode(uint8_t b) const { return utf8_[b]; }  // stand-in character as UTF-8
  // Maps stand-in characters back to bytes; false if text holds a character outside the map (or bad UTF-8).
  bool decode(std::string_view text, std::string* out) const;

 private:
  std::array<std::string, 256> utf8_;
  std::array<int16_t, 324> byte_of_cp_;  // code point (< 256 + 68) -> byte, -1 if not a stand-in
};

const ByteMap& byte_map();

class BpeModel {
 public:
  // vocab: stored form -> id; merges "left right" (rank = index). Throws Error (prefixed with source) when a merge
  // is malformed or names a token outside the vocab, or a byte has no single-character token.
  BpeModel(const std::unordered_map<std::string, int32_t>& vocab, const std::vector<std::string>& merges,
           bool ignore_merges, const std::string& source);

  // Appends the ids of one pre-token (raw bytes).
  void encode(std::string_view piece, std::vector<int32_t>* out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // id of the merged token
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  const std::unordered_map<std::string, int32_t>& vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> merge
  std::array<int32_t, 256> byte_token_{};       // id of each byte's stand-in character token
  bool ignore_merges_;
};

}  // namespace tern::text
