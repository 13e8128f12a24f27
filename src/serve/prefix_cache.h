// Prefix cache: snapshots of a sequence's whole state (SequenceState::snapshot: the first n rows of every attention
// layer's KV, every DeltaNet layer's conv and recurrent state, the draft block's KV) keyed by the n tokens that
// produced it, kept within a byte budget
// (least recently used first out). A new prompt resumes from the longest cached prefix, so a follow-up chat turn
// only processes what is new. Recurrent state cannot be rolled back, so only exact snapshot points can be hit;
// the scheduler takes them at the end of each message (after end-of-turn tokens), at the end of the prompt and at
// the end of the answer. Lookups walk a radix tree over the keys (serve/prefix_tree.h), in time linear in the
// prompt, however many entries there are. Thread-safety: used by the scheduler thread only.
#pragma once
#include <cstdint>
#include <list>
#include <vector>

#include "core/comm.h"
#include "models/sequence_state.h"
#include "serve/prefix_tree.h"

namespace tern::serve {

struct PrefixCacheStats {
  int64_t hits = 0, misses = 0, tokens_reused = 0, entries = 0, evictions = 0;
  size_t bytes = 0, budget = 0;
};

class PrefixCache {
 public:
  explicit PrefixCache(size_t budget_bytes) { stats_.budget = budget_bytes; }
  bool enabled() const { return stats_.budget > 0; }

  // Restores into `state` (which must be empty) the longest cached prefix of `prompt` shorter than the whole
  // prompt (at least one token must remain to feed). Returns its length (0: miss, state untouched).
  int64_t restore(const std::vector<int32_t>& prompt, models::SequenceState& state);
  // Snapshots `state`, which has processed exactly `tokens`. Evicts least recently used entries to fit.
  void insert(const std::vector<int32_t>& tokens, models::SequenceState& state);
  bool contains(const std::vector<int32_t>& tokens) const;
  const PrefixCacheStats& stats() const { return stats_; }
  // Across ranks (each rank caches its own share of the states, whose sizes differ): an entry counts the largest
  // of the ranks' sizes (a collective in insert), so every rank keeps and evicts the same entries.
  void set_comm(Comm* comm) { comm_ = comm; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    models::StateSnapshot state;  // SequenceState::snapshot(): KV rows, recurrent states, the draft state's
    size_t bytes = 0;
  };
  void evict_lru();

  std::list<Entry> lru_;  // front: most recently used
  PrefixTree<std::list<Entry>::iterator> index_;  // key -> its entry in lru_
  PrefixCacheStats stats_;
  Comm* comm_ = nullptr;
};

}  // namespace tern::serve
