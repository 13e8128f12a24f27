// Stop strings: finds the earliest stop string in generated text and tells how much text is safe to emit now
// (text that could still become the start of a stop string is held back).
#pragma once
#include <string>
#include <vector>

namespace tern::runtime {

struct StopMatch {
  bool stopped = false;
  size_t emit_upto = 0;  // bytes of `text` that may be emitted
  int which = -1;        // when stopped: the index in `stops` of the string found (the earliest; ties: the first)
};

// text: everything generated so far. Returns where to cut if a stop string occurs, else the safe emit length.
// searched: the length of a prefix of text an earlier call already searched without finding a stop (the text
// before the newest token); only occurrences that end beyond it are looked for, so a generation costs linear
// time in its length, not quadratic.
StopMatch find_stop(const std::string& text, const std::vector<std::string>& stops, size_t searched = 0);

}  // namespace tern::runtime
