// Errors: tern reports bad input (files, flags, requests) by throwing tern::Error with a message that says
// what was wrong and where; the CLI and server catch it at their boundary. Asserts are only for internal
// invariants, never for input.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

namespace tern {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// printf-style message builder: strf("%s: tensor %s", path, name).
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace tern
