// Test helper shared by the attention tests: T tokens stored and attended one at a time, as decoding does.
#pragma once
#include <cstdint>
#include <vector>

#include "core/cpu.h"
#include "core/parallel.h"
#include "ops/attention.h"

namespace tern::ops::test {

// For t < T: kv_store of token t's k / v rows [n_head_kv, head_dim] at position t, then attention_causal of its
// query [n_head, head_dim] at `threads` threads (restored after). Returns out [T, n_head, head_dim]. Storing the
// same rows again gives the same bytes, so calls at several thread counts may share one view.
inline std::vector<float> attend_one_by_one(const KvCacheView& view, const float* k, const float* v,
                                            const float* q, int64_t T, int64_t n_head, float scale, Isa isa,
                                            int threads) {
  const int64_t row_kv = view.n_head_kv * view.head_dim, row_q = n_head * view.head_dim;
  std::vector<float> out(T * row_q);
  const int saved = n_threads();
  set_n_threads(threads);
  for (int64_t t = 0; t < T; ++t) {
    kv_store(view, k + t * row_kv, v + t * row_kv, 1, t, isa);
    attention_causal(q + t * row_q, 1, n_head, view, t, scale, out.data() + t * row_q, isa);
  }
  set_n_threads(saved);
  return out;
}

}  // namespace tern::ops::test
