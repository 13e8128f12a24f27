// MoE routing: softmax, deterministic top-k, renormalisation (see moe.h).
#include "ops/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/kernels.h"
#include "ops/split.h"

namespace tern::ops {

void moe_route(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t n_used, const RouteParams& rp,
               int32_t* ids, float* weights, Isa isa) {
  if (n_used <= 0 || n_expert <= 0 || n_used > n_expert) {
    fail("moe routing: n_expert_used %lld must be in [1, n_expert = %lld]", static_cast<long long>(n_used),
         static_cast<long long>(n_expert));
  }
  const Kernels& kern = kernels(isa);
  // Tokens are independent: a prefill batch is routed on all threads, each with its own scratch.
  split::rows(n_tokens, n_expert, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> p, sel;
    thread_local std::vector<int32_t> order;
    p.resize(n_expert);
    sel.resize(n_expert);
    order.resize(n_expert);
    for (int64_t t = t0; t < t1; ++t) {
      std::copy(logits + t * n_expert, logits + (t + 1) * n_expert, p.begin());
      if (rp.gating == Gating::kSoftmax) kern.softmax_rows(p.data(), 1, n_expert);
      else kern.sigmoid(p.data(), n_expert);
      for (int64_t e = 0; e < n_expert; ++e) sel[e] = rp.selection_bias ? p[e] + rp.selection_bias[e] : p[e];
      for (int64_t e = 0; e < n_expert; ++e) order[e] = static_cast<int32_t>(e);
      // Strict weak order: higher score first, then lower index. NaNs compare false both ways and would break
      // the strict weak order, so they are ranked as -inf here.
      auto key = [&](int32_t e) { return sel[e] == sel[e] ? sel[e] : -INFINITY; };
      std::partial_sort(order.begin(), order.begin() + n_used, order.end(), [&](int32_t a, int32_t b) {
        const float pa = key(a), pb = key(b);
        return pa > pb || (pa == pb && a < b);
      });
      double sum = 0.0;
      for (int64_t k = 0; k < n_used; ++k) sum += p[order[k]];
      for (int64_t k = 0; k < n_used; ++k) {
        ids[t * n_used + k] = order[k];
        const float w = rp.normalize ? static_cast<float>(p[order[k]] / sum) : p[order[k]];
        weights[t * n_used + k] = rp.scale == 1.0f ? w : w * rp.scale;
      }
    }
  });
}

void moe_route_softmax_topk(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t n_used, int32_t* ids,
                            float* weights, Isa isa) {
  moe_route(logits, n_tokens, n_expert, n_used, RouteParams{}, ids, weights, isa);
}

}  // namespace tern::ops
