#include "models/blocks/moe.h"

#include <cstring>

#include "core/profile.h"
#include "ops/activation.h"
#include "ops/moe.h"

namespace tern::models {

void moe_block(const qwen35moe::Config& c, const qwen35moe::MoeWeights& w, qwen35moe::ExpertStore& experts,
               int layer, const float* x, int64_t n_rows, float* y, MoeScratch& s, const TensorDump& dump) {
  const int64_t E = c.n_expert, K = c.n_expert_used, D = c.n_embd, F = c.n_ff_exp;
  float* logits = grow(s.logits, n_rows * E);
  float* wts = grow(s.weights, n_rows * K);
  if (static_cast<int64_t>(s.ids.size()) < n_rows * K) s.ids.resize(static_cast<size_t>(n_rows * K));
  TERN_PROFILE(prof_router, "moe.router", w.router.bytes());
  apply(w.router, x, n_rows, logits);
  dump("ffn_moe_logits", layer, logits, {n_rows, E});
  ops::moe_route_softmax_topk(logits, n_rows, E, K, s.ids.data(), wts);
  prof_router.done();

  // Group (token, slot) pairs by expert; run each expert once over its tokens.
  TERN_PROFILE(prof_exps, "moe.experts", 0);
  s.by_expert.resize(static_cast<size_t>(E));
  for (auto& b : s.by_expert) b.clear();
  for (int64_t i = 0; i < n_rows * K; ++i) s.by_expert[s.ids[i]].push_back(static_cast<int32_t>(i));
  // Resident experts first (they run while the missing ones are read), then the missing ones.
  s.order.clear();
  int64_t n_resident = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int32_t e = 0; e < E; ++e)
      if (!s.by_expert[e].empty() && experts.resident(layer, e) == (pass == 0)) s.order.push_back(e);
    if (pass == 0) n_resident = static_cast<int64_t>(s.order.size());
  }
  experts.prefetch(layer, s.order.data() + n_resident, static_cast<int64_t>(s.order.size()) - n_resident,
                   s.order.data(), n_resident);
  float* slots = grow(s.slots, n_rows * K * D);  // [n_rows, K, D] each expert's output for each slot
  for (const int32_t e : s.order) {
    const auto& members = s.by_expert[e];
    const int64_t m = static_cast<int64_t>(members.size());
    float* xe = grow(s.xe, m * D);
    float* ge = grow(s.ge, m * F);
    float* ue = grow(s.ue, m * F);
    float* de = grow(s.de, m * D);
    for (int64_t r = 0; r < m; ++r) std::memcpy(xe + r * D, x + (members[r] / K) * D, D * sizeof(float));
    const qwen35moe::ExpertMatrices ex = experts.get(layer, e);
    TERN_PROFILE_BYTES(prof_exps, ex.gate.bytes() + ex.up.bytes() + ex.down.bytes());
    apply(ex.gate, xe, m, ge);
    apply(ex.up, xe, m, ue);
    ops::swiglu(ge, ue, ge, m * F);
    apply(ex.down, ge, m, de);
    for (int64_t r = 0; r < m; ++r) std::memcpy(slots + static_cast<int64_t>(members[r]) * D, de + r * D, D * sizeof(float));
  }
  for (int64_t t = 0; t < n_rows; ++t) {
    float* yt = y + t * D;
    std::memset(yt, 0, D * sizeof(float));
    for (int64_t k = 0; k < K; ++k) {
      const float wk = wts[t * K + k];
      const float* sl = slots + (t * K + k) * D;
      for (int64_t d = 0; d < D; ++d) yt[d] += wk * sl[d];
    }
  }
  prof_exps.done();
  dump("ffn_moe_out", layer, y, {n_rows, D});

  if (c.n_ff_shexp > 0) {
    TERN_PROFILE(prof_shexp, "moe.shared",
                 w.gate_shexp.bytes() + w.up_shexp.bytes() + w.down_shexp.bytes() + w.shexp_gate.bytes());
    const int64_t Fs = c.n_ff_shexp;
    float* sg = grow(s.sg, n_rows * Fs);
    float* su = grow(s.su, n_rows * Fs);
    float* sd = grow(s.sd, n_rows * D);
    float* gate = grow(s.sgate, n_rows);
    apply(w.gate_shexp, x, n_rows, sg);
    apply(w.up_shexp, x, n_rows, su);
    ops::swiglu(sg, su, sg, n_rows * Fs);
    apply(w.down_shexp, sg, n_rows, sd);
    dump("ffn_shexp", layer, sd, {n_rows, D});
    apply(w.shexp_gate, x, n_rows, gate);
    for (int64_t t = 0; t < n_rows; ++t) {
      const float gt = ops::sigmoid(gate[t]);
      for (int64_t d = 0; d < D; ++d) y[t * D + d] += gt * sd[t * D + d];
    }
  }
  dump("ffn_out", layer, y, {n_rows, D});
}

}  // namespace tern::models
