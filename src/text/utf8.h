// UTF-8 scanning shared by the tokenizer (input validation) and the stream decoder (hold back / replace).
// Well-formedness follows Unicode Table 3-7; invalid input is measured in "maximal subparts" (Unicode 3.9,
// the same units Python's errors="replace" turns into one U+FFFD each).
#pragma once
#include <cstddef>
#include <string_view>

namespace tern::text {

enum class Utf8Status { kValid, kIncomplete, kInvalid };

struct Utf8Step {
  Utf8Status status;
  size_t n;  // kValid: sequence length; kIncomplete: bytes left in s; kInvalid: maximal subpart length (>= 1)
};

// Examines the sequence starting at s[i] (i < s.size()).
Utf8Step utf8_step(std::string_view s, size_t i);

// Code point of the valid sequence of length n at s[i].
char32_t utf8_decode(std::string_view s, size_t i, size_t n);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace tern::text
