#include "serve/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tern::serve {

using models::SequenceState;

namespace {

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

bool PrefixCache::contains(const std::vector<int32_t>& tokens) const {
  return std::any_of(lru_.begin(), lru_.end(), [&](const Entry& e) { return e.tokens == tokens; });
}

int64_t PrefixCache::restore(const std::vector<int32_t>& prompt, SequenceState& state) {
  if (!enabled()) return 0;
  auto best = lru_.end();
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->tokens.size() < prompt.size() && is_prefix(it->tokens, prompt) &&
        (best == lru_.end() || it->tokens.size() > best->tokens.size()))
      best = it;
  if (best == lru_.end()) {
    ++stats_.misses;
    return 0;
  }
  const int64_t n = static_cast<int64_t>(best->tokens.size());
  if (state.n_past() != 0 || n > state.n_ctx()) return 0;
  state.restore(best->state);
  lru_.splice(lru_.begin(), lru_, best);
  ++stats_.hits;
  stats_.tokens_reused += n;
  return n;
}

void PrefixCache::insert(const std::vector<int32_t>& tokens, SequenceState& state) {
  if (!enabled() || tokens.empty()) return;
  if (state.n_past() != static_cast<int64_t>(tokens.size()))
    fail("prefix cache: the state has %lld tokens, the key %zu", static_cast<long long>(state.n_past()), tokens.size());
  for (auto it = lru_.begin(); it != lru_.end(); ++it)
    if (it->tokens == tokens) {
      lru_.splice(lru_.begin(), lru_, it);
      return;
    }
  Entry e;
  e.tokens = tokens;
  e.state = state.snapshot();
  e.bytes = e.state.bytes();
  e.bytes += tokens.size() * sizeof(int32_t);
  if (e.bytes > stats_.budget) return;  // one snapshot larger than the whole budget: never cached
  while (!lru_.empty() && stats_.bytes + e.bytes > stats_.budget) {
    stats_.bytes -= lru_.back().bytes;
    lru_.pop_back();
    ++stats_.evictions;
  }
  stats_.bytes += e.bytes;
  lru_.push_front(std::move(e));
  stats_.entries = static_cast<int64_t>(lru_.size());
}

}  // namespace tern::serve
