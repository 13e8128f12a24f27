#include "serve/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tern::serve {

using models::SequenceState;

bool PrefixCache::contains(const std::vector<int32_t>& tokens) const {
  return index_.find(tokens) != nullptr;
}

int64_t PrefixCache::restore(const std::vector<int32_t>& prompt, SequenceState& state) {
  if (!enabled()) return 0;
  size_t len = 0;
  auto* hit = prompt.empty() ? nullptr : index_.longest_prefix(prompt.data(), prompt.size(), prompt.size() - 1, &len);
  if (!hit) {
    ++stats_.misses;
    return 0;
  }
  const auto best = *hit;
  const int64_t n = static_cast<int64_t>(len);
  if (state.n_past() != 0 || n > state.n_ctx()) return 0;
  state.restore(best->state);
  lru_.splice(lru_.begin(), lru_, best);
  ++stats_.hits;
  stats_.tokens_reused += n;
  return n;
}

void PrefixCache::evict_lru() {
  stats_.bytes -= lru_.back().bytes;
  index_.erase(lru_.back().tokens);
  lru_.pop_back();
  ++stats_.evictions;
}

void PrefixCache::insert(const std::vector<int32_t>& tokens, SequenceState& state) {
  if (!enabled() || tokens.empty()) return;
  if (state.n_past() != static_cast<int64_t>(tokens.size()))
    fail("prefix cache: the state has %lld tokens, the key %zu", static_cast<long long>(state.n_past()), tokens.size());
  if (auto* it = index_.find(tokens)) {
    lru_.splice(lru_.begin(), lru_, *it);
    return;
  }
  Entry e;
  e.tokens = tokens;
  e.state = state.snapshot();
  e.bytes = e.state.bytes();
  e.bytes += tokens.size() * sizeof(int32_t);
  if (comm_ && comm_->size() > 1) e.bytes = static_cast<size_t>(max_over_ranks(*comm_, static_cast<int64_t>(e.bytes)));
  if (e.bytes > stats_.budget) return;  // one snapshot larger than the whole budget: never cached
  while (!lru_.empty() && stats_.bytes + e.bytes > stats_.budget) evict_lru();
  stats_.bytes += e.bytes;
  lru_.push_front(std::move(e));
  index_.insert(lru_.front().tokens, lru_.begin());
  stats_.entries = static_cast<int64_t>(lru_.size());
}

}  // namespace tern::serve
