#include "models/blocks/moe.h"

#include <algorithm>

#include "core/profile.h"

namespace tern::models {

Linear MoeWeights::expert_gate(int64_t e, int64_t n_ff) const {
  e -= expert0;
  const int64_t F = ff_stride ? ff_stride : n_ff;
  return fused_gate_up ? gate_exps.rows(e * 2 * F + ff0, n_ff) : gate_exps.rows(e * F + ff0, n_ff);
}
Linear MoeWeights::expert_up(int64_t e, int64_t n_ff) const {
  e -= expert0;
  const int64_t F = ff_stride ? ff_stride : n_ff;
  return fused_gate_up ? gate_exps.rows(e * 2 * F + F + ff0, n_ff) : up_exps.rows(e * F + ff0, n_ff);
}


void moe_block(backend::Backend& be, const MoeParams& c, const MoeWeights& w, ExpertSource& experts,
               int layer, const float* x, int64_t n_rows, float* y, MoeScratch& s, const TensorDump& dump,
               const MoeSplit* split) {
  const int64_t E = c.n_expert, K = c.n_expert_used;
  // Split by rows: this rank computes its columns of the output, gathered at the end (partial sums: its part of
  // every column, summed at the end).
  const bool by_rows = split && !split->partial_sums;
  const int64_t D = by_rows ? split->out.local(split->comm->rank()) : c.n_embd;
  float* y_full = y;
  if (by_rows) y = grow(s.y_part, n_rows * D);
  float* logits = s.logits.grow<float>(be, n_rows * E);
  float* wts = grow(s.weights, n_rows * K);
  if (static_cast<int64_t>(s.ids.size()) < n_rows * K) s.ids.resize(static_cast<size_t>(n_rows * K));
  TERN_PROFILE(prof_router, "moe.router", w.router.bytes());
  be.matmul(w.router, x, n_rows, logits);
  dump("ffn_moe_logits", layer, logits, {n_rows, E});
  ops::RouteParams rp;
  rp.gating = c.gating;
  rp.selection_bias = w.selection_bias.empty() ? nullptr : w.selection_bias.data();
  rp.normalize = c.normalize;
  rp.scale = c.routed_scale;
  be.moe_route(logits, n_rows, E, K, rp, s.ids.data(), wts);
  prof_router.done();

  // Group (token, slot) pairs by expert; each expert runs once over its tokens.
  TERN_PROFILE(prof_exps, "moe.experts", 0);
  s.by_expert.resize(static_cast<size_t>(E));
  for (auto& b : s.by_expert) b.clear();
  for (int64_t i = 0; i < n_rows * K; ++i) s.by_expert[s.ids[i]].push_back(static_cast<int32_t>(i));
  // Expert parallel: another rank runs the experts this one does not hold; their (token, slot) pairs read a zero row.
  const bool partial = w.n_local >= 0 && w.n_local < E;
  if (partial)
    for (int32_t e = 0; e < E; ++e)
      if (!w.owns(e)) s.by_expert[e].clear();
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

  // Every routed expert's output rows land in s.out at out_off; slot_row maps (token, k) to its row.
  s.tokens.resize(static_cast<size_t>(n_rows * K));
  if (static_cast<int64_t>(s.slot_row.size()) < n_rows * K) s.slot_row.resize(static_cast<size_t>(n_rows * K));
  const bool shared = c.n_ff_shexp > 0 && w.run_shared;
  float* out = s.out.grow<float>(be, (n_rows * K + (shared ? n_rows : 0) + (partial ? 1 : 0)) * D);
  if (partial) {
    const int64_t zero = n_rows * K + (shared ? n_rows : 0);
    std::fill(out + zero * D, out + (zero + 1) * D, 0.0f);
    for (int64_t i = 0; i < n_rows * K; ++i)
      if (!w.owns(s.ids[i])) s.slot_row[i] = static_cast<int32_t>(zero);
  }
  int64_t row = 0;
  std::vector<backend::FfnJob> jobs;
  bool same_x = false;  // x's activations were prepared by an earlier call of this layer
  // Split by rows: the SwiGLU rows of a call are this rank's columns of each job's; every rank's are gathered.
  auto mid = [&](const ColumnLayout& ff) -> backend::FfnMid {
    if (!by_rows) return {};
    return [&s, split, &ff](const float* h, int64_t h_rows, int64_t, int64_t* F_down) -> const float* {
      s.h_full.resize(static_cast<size_t>(h_rows * ff.total));
      TERN_PROFILE(prof, "comm.ffn_h", 0);
      gather_columns(*split->comm, ff, h, h_rows, s.h_full.data(), s.gather);
      *F_down = ff.total;
      return s.h_full.data();
    };
  };
  const ColumnLayout* ff = by_rows ? &split->ff : nullptr;
  auto run = [&](const ColumnLayout* layout) {
    be.swiglu_ffns(jobs, x, n_rows, D, out, same_x, layout ? mid(*layout) : backend::FfnMid{});
    same_x = true;
    jobs.clear();
  };
  // Mapped experts all run in one set of passes; a streamed expert is valid only until the next get() of its
  // layer, so each runs on its own.
  const bool one_at_a_time = experts.streamed();
  for (size_t i = 0; i < s.order.size(); ++i) {
    const int32_t e = s.order[i];
    const auto& members = s.by_expert[e];
    const ExpertMatrices ex = experts.get(layer, e);
    TERN_PROFILE_BYTES(prof_exps, ex.gate.bytes() + ex.up.bytes() + ex.down.bytes());
    backend::FfnJob j{ex.gate, ex.up, ex.down, s.tokens.data() + row, static_cast<int64_t>(members.size()), row};
    for (size_t r = 0; r < members.size(); ++r) {
      s.tokens[row + r] = members[r] / static_cast<int32_t>(K);
      s.slot_row[members[r]] = static_cast<int32_t>(row + r);
    }
    row += j.m;
    jobs.push_back(j);
    if (one_at_a_time) run(ff);
  }
  if (shared) {
    TERN_PROFILE_BYTES(prof_exps, w.gate_shexp.bytes() + w.up_shexp.bytes() + w.down_shexp.bytes());
    // Split by rows, the shared expert joins the routed experts' call when its SwiGLU width is theirs.
    const bool own_call = by_rows && split->shff.total != split->ff.total;
    if (own_call && !jobs.empty()) run(ff);
    jobs.push_back({w.gate_shexp, w.up_shexp, w.down_shexp, nullptr, n_rows, row});
    if (own_call) run(&split->shff);
  }
  if (!jobs.empty()) run(ff);

  // Each token's expert outputs summed in its top-k order, then (below) the gated shared expert.
  be.moe_combine(out, s.slot_row.data(), wts, n_rows, K, D, y);
  prof_exps.done();
  dump("ffn_moe_out", layer, y, {n_rows, D});

  if (shared) {
    TERN_PROFILE(prof_shexp, "moe.shared", w.shexp_gate.bytes());
    const float* sd = out + row * D;
    dump("ffn_shexp", layer, sd, {n_rows, D});
    if (w.shexp_gate.present()) {  // Qwen: sigmoid-gated; DeepSeek-V3 / GLM: added as it is
      float* gate = s.sgate.grow<float>(be, n_rows);
      be.matmul(w.shexp_gate, x, n_rows, gate);
      be.add_gated_rows(y, sd, gate, n_rows, D);
    } else {
      be.add(y, sd, n_rows * D);
    }
  }
  if (by_rows) {
    TERN_PROFILE(prof_comm, "comm.ffn_out", 0);
    gather_columns(*split->comm, split->out, y, n_rows, y_full, s.gather);
  } else if (split) {  // partial sums: every rank's part of the routed and shared experts' outputs
    TERN_PROFILE(prof_comm, "comm.ffn_sum", 0);
    sum_over_ranks(*split->comm, y, n_rows * D, s.gather);
  }
  dump("ffn_out", layer, y_full, {n_rows, c.n_embd});
}

}  // namespace tern::models
