#include "serve/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tern::serve {

using models::SequenceState;

namespace {

size_t elem_bytes(ops::KvType t) { return t == ops::KvType::kF16 ? 2 : 4; }

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// Copies the first n positions of each KV head between a state's full cache [n_head_kv][n_ctx][head_dim] (a
// backend buffer) and a compact host copy [n_head_kv][n][head_dim].
void save_rows(const ops::KvCacheView& kv, size_t esz, int64_t n, const backend::Buffer& src, uint8_t* dst) {
  const size_t row = static_cast<size_t>(kv.head_dim) * esz;
  for (int64_t h = 0; h < kv.n_head_kv; ++h)
    src.read(static_cast<size_t>(h * kv.n_ctx) * row, dst + static_cast<size_t>(h * n) * row, static_cast<size_t>(n) * row);
}
void load_rows(const ops::KvCacheView& kv, size_t esz, int64_t n, const uint8_t* src, backend::Buffer& dst) {
  const size_t row = static_cast<size_t>(kv.head_dim) * esz;
  for (int64_t h = 0; h < kv.n_head_kv; ++h)
    dst.write(static_cast<size_t>(h * kv.n_ctx) * row, src + static_cast<size_t>(h * n) * row, static_cast<size_t>(n) * row);
}

std::vector<float> save_floats(const backend::Buffer& b) {
  std::vector<float> v(b.bytes() / sizeof(float));
  b.read(0, v.data(), v.size() * sizeof(float));
  return v;
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
  const size_t esz = elem_bytes(state.kv_type());
  for (size_t il = 0; il < best->k.size(); ++il) {
    auto& l = state.layer(static_cast<int64_t>(il));
    if (l.k) {
      const ops::KvCacheView kv = state.kv(static_cast<int64_t>(il));
      load_rows(kv, esz, n, best->k[il].data(), *l.k);
      load_rows(kv, esz, n, best->v[il].data(), *l.v);
    } else {
      if (l.conv) l.conv->write(0, best->conv[il].data(), best->conv[il].size() * sizeof(float));
      if (l.ssm) l.ssm->write(0, best->ssm[il].data(), best->ssm[il].size() * sizeof(float));
    }
  }
  state.advance(n);
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
  const int64_t n = static_cast<int64_t>(tokens.size());
  const size_t esz = elem_bytes(state.kv_type());
  Entry e;
  e.tokens = tokens;
  for (int64_t il = 0; il < n_layer_; ++il) {
    auto& l = state.layer(il);
    if (l.k) {
      const ops::KvCacheView kv = state.kv(il);
      const size_t sz = static_cast<size_t>(kv.n_head_kv * n * kv.head_dim) * esz;
      e.k.emplace_back(sz);
      e.v.emplace_back(sz);
      save_rows(kv, esz, n, *l.k, e.k.back().data());
      save_rows(kv, esz, n, *l.v, e.v.back().data());
      e.conv.emplace_back();
      e.ssm.emplace_back();
      e.bytes += 2 * sz;
    } else {
      e.k.emplace_back();
      e.v.emplace_back();
      e.conv.push_back(l.conv ? save_floats(*l.conv) : std::vector<float>());
      e.ssm.push_back(l.ssm ? save_floats(*l.ssm) : std::vector<float>());
      e.bytes += (e.conv.back().size() + e.ssm.back().size()) * sizeof(float);
    }
  }
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
