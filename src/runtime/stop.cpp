#include "runtime/stop.h"

#include <algorithm>

namespace tern::runtime {

StopMatch find_stop(const std::string& text, const std::vector<std::string>& stops, size_t searched) {
  StopMatch m;
  size_t first = std::string::npos;
  int which = -1;
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string& s = stops[i];
    if (s.empty()) continue;
    const size_t from = searched >= s.size() ? searched - s.size() + 1 : 0;
    const size_t p = text.find(s, from);
    if (p != std::string::npos && p < first) {
      first = p;
      which = static_cast<int>(i);
    }
  }
  if (first != std::string::npos) return {true, first, which};
  // Hold back the longest suffix of text that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops) {
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  }
  m.emit_upto = text.size() - hold;
  return m;
}

}  // namespace tern::runtime
