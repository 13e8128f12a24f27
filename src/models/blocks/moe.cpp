#include "models/blocks/moe.h"

#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "core/profile.h"
#include "ops/activation.h"
#include "ops/moe.h"
#include "ops/split.h"

namespace tern::models {

Linear MoeWeights::expert_gate(int64_t e, int64_t n_ff) const {
  return fused_gate_up ? gate_exps.rows(e * 2 * n_ff, n_ff) : gate_exps.rows(e * n_ff, n_ff);
}
Linear MoeWeights::expert_up(int64_t e, int64_t n_ff) const {
  return fused_gate_up ? gate_exps.rows(e * 2 * n_ff + n_ff, n_ff) : up_exps.rows(e * n_ff, n_ff);
}

namespace {

constexpr int64_t kRowChunk = 16;  // rows of one matrix per task (a multiple of the repacked 8-row groups)

// One SwiGLU FFN over a set of the batch's tokens: a routed expert (its tokens) or the shared expert (all).
struct FfnJob {
  Linear gate, up, down;
  const int32_t* tokens = nullptr;  // [m] batch rows, or nullptr for rows 0..m-1
  int64_t m = 0;
  int64_t h_off = 0, out_off = 0;   // row offsets into MoeScratch::h / ::out
};

int64_t chunks(int64_t n) { return (n + kRowChunk - 1) / kRowChunk; }

// Runs every job's gate+up (with SwiGLU), then every job's down, as three parallel passes over fixed
// (job, row chunk) tasks: each output element is one gemm call's, so results never depend on the threads.
// Jobs read their tokens' rows of the batch's activations, quantized once per format (s.batch_q).
void run_ffns(const std::vector<FfnJob>& jobs, const float* x, int64_t n_rows, int64_t D, MoeScratch& s) {
  auto batch_q = [&](const Linear& w) -> const uint8_t* {
    for (size_t i = 0; i < s.q_fmt.size(); ++i)
      if (same_act_format(s.q_fmt[i], w)) return s.q_buf[i].data();
    const size_t i = s.q_fmt.size();
    s.q_fmt.push_back(w);
    if (s.q_buf.size() <= i) s.q_buf.emplace_back();  // buffers are reused layer after layer
    uint8_t* q = grow(s.q_buf[i], n_rows * static_cast<int64_t>(act_row_bytes(w)));
    quantize_rows(w, x, n_rows, q);
    return q;
  };
  std::vector<const uint8_t*> gate_in(jobs.size()), up_in(jobs.size());
  int64_t F = 0, h_rows = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    gate_in[i] = batch_q(jobs[i].gate);
    up_in[i] = batch_q(jobs[i].up);
    F = std::max(F, jobs[i].gate.n_out);
    h_rows = std::max(h_rows, jobs[i].h_off + jobs[i].m);
  }

  // gate and up rows of a chunk into per-thread [m, kRowChunk] tiles, SwiGLU into h [h_rows, F] (each job's m
  // rows at h_off).
  std::vector<std::pair<int32_t, int32_t>> tasks;
  for (size_t i = 0; i < jobs.size(); ++i)
    for (int64_t c = 0; c < chunks(jobs[i].gate.n_out); ++c) tasks.push_back({static_cast<int32_t>(i), static_cast<int32_t>(c)});
  float* h = grow(s.h, h_rows * F);
  parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t k) {
    const FfnJob& j = jobs[tasks[k].first];
    const int64_t r0 = tasks[k].second * kRowChunk, r1 = std::min(j.gate.n_out, r0 + kRowChunk);
    thread_local std::vector<float> tg, tu;
    float* g = grow(tg, j.m * kRowChunk);
    float* u = grow(tu, j.m * kRowChunk);
    gemm_rows(j.gate, gate_in[tasks[k].first], j.tokens, j.m, r0, r1, g, kRowChunk);
    gemm_rows(j.up, up_in[tasks[k].first], j.tokens, j.m, r0, r1, u, kRowChunk);
    for (int64_t t = 0; t < j.m; ++t)
      ops::swiglu(g + t * kRowChunk, u + t * kRowChunk, h + (j.h_off + t) * F + r0, r1 - r0);
  });

  // down: its input rows quantized, then its rows in chunks into out [.., D] at out_off.
  std::vector<size_t> dn_off(jobs.size());
  size_t dn_bytes = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    dn_off[i] = dn_bytes;
    dn_bytes += static_cast<size_t>(jobs[i].m) * act_row_bytes(jobs[i].down);
  }
  uint8_t* dq = grow(s.down_q, static_cast<int64_t>(dn_bytes));
  std::vector<std::pair<int32_t, int32_t>> rows;
  for (size_t i = 0; i < jobs.size(); ++i)
    for (int64_t t = 0; t < jobs[i].m; ++t) rows.push_back({static_cast<int32_t>(i), static_cast<int32_t>(t)});
  parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t k) {
    const FfnJob& j = jobs[rows[k].first];
    const int64_t t = rows[k].second;
    // h rows are F wide; the down matrix reads its first n_in (= this job's F) of them
    quantize_rows(j.down, h + (j.h_off + t) * F, 1, dq + dn_off[rows[k].first] + t * act_row_bytes(j.down));
  });
  tasks.clear();
  for (size_t i = 0; i < jobs.size(); ++i)
    for (int64_t c = 0; c < chunks(jobs[i].down.n_out); ++c) tasks.push_back({static_cast<int32_t>(i), static_cast<int32_t>(c)});
  parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t k) {
    const FfnJob& j = jobs[tasks[k].first];
    const int64_t r0 = tasks[k].second * kRowChunk, r1 = std::min(j.down.n_out, r0 + kRowChunk);
    gemm_rows(j.down, dq + dn_off[tasks[k].first], nullptr, j.m, r0, r1, s.out.data() + j.out_off * D + r0, D);
  });
}

}  // namespace

void moe_block(const MoeParams& c, const MoeWeights& w, ExpertSource& experts,
               int layer, const float* x, int64_t n_rows, float* y, MoeScratch& s, const TensorDump& dump) {
  const int64_t E = c.n_expert, K = c.n_expert_used, D = c.n_embd;
  float* logits = grow(s.logits, n_rows * E);
  float* wts = grow(s.weights, n_rows * K);
  if (static_cast<int64_t>(s.ids.size()) < n_rows * K) s.ids.resize(static_cast<size_t>(n_rows * K));
  TERN_PROFILE(prof_router, "moe.router", w.router.bytes());
  apply(w.router, x, n_rows, logits);
  dump("ffn_moe_logits", layer, logits, {n_rows, E});
  ops::RouteParams rp;
  rp.gating = c.gating;
  rp.selection_bias = w.selection_bias.empty() ? nullptr : w.selection_bias.data();
  rp.normalize = c.normalize;
  rp.scale = c.routed_scale;
  ops::moe_route(logits, n_rows, E, K, rp, s.ids.data(), wts);
  prof_router.done();

  // Group (token, slot) pairs by expert; each expert runs once over its tokens.
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

  s.q_fmt.clear();  // the batch's activations are quantized anew for this layer (run_ffns, once per format)
  // Every routed expert's output rows land in s.out at out_off; slot_row maps (token, k) to its row.
  s.tokens.resize(static_cast<size_t>(n_rows * K));
  if (static_cast<int64_t>(s.slot_row.size()) < n_rows * K) s.slot_row.resize(static_cast<size_t>(n_rows * K));
  const bool shared = c.n_ff_shexp > 0;
  grow(s.out, (n_rows * K + (shared ? n_rows : 0)) * D);
  int64_t row = 0;
  std::vector<FfnJob> jobs;
  // Mapped experts all run in one set of passes; a streamed expert is valid only until the next get() of its
  // layer, so each runs on its own.
  const bool one_at_a_time = experts.streamed();
  for (size_t i = 0; i < s.order.size(); ++i) {
    const int32_t e = s.order[i];
    const auto& members = s.by_expert[e];
    const ExpertMatrices ex = experts.get(layer, e);
    TERN_PROFILE_BYTES(prof_exps, ex.gate.bytes() + ex.up.bytes() + ex.down.bytes());
    FfnJob j{ex.gate, ex.up, ex.down, s.tokens.data() + row, static_cast<int64_t>(members.size()), row, row};
    for (size_t r = 0; r < members.size(); ++r) {
      s.tokens[row + r] = members[r] / static_cast<int32_t>(K);
      s.slot_row[members[r]] = static_cast<int32_t>(row + r);
    }
    row += j.m;
    jobs.push_back(j);
    if (one_at_a_time) {
      run_ffns(jobs, x, n_rows, D, s);
      jobs.clear();
    }
  }
  if (shared) {
    TERN_PROFILE_BYTES(prof_exps, w.gate_shexp.bytes() + w.up_shexp.bytes() + w.down_shexp.bytes());
    jobs.push_back({w.gate_shexp, w.up_shexp, w.down_shexp, nullptr, n_rows, row, row});
  }
  if (!jobs.empty()) run_ffns(jobs, x, n_rows, D, s);

  // Each token's expert outputs summed in its top-k order, then (below) the gated shared expert.
  const float* out = s.out.data();
  parallel_for(n_rows, [&](int64_t t) {
    float* yt = y + t * D;
    std::memset(yt, 0, D * sizeof(float));
    for (int64_t k = 0; k < K; ++k) {
      const float wk = wts[t * K + k];
      const float* sl = out + static_cast<int64_t>(s.slot_row[t * K + k]) * D;
      for (int64_t d = 0; d < D; ++d) yt[d] += wk * sl[d];
    }
  });
  prof_exps.done();
  dump("ffn_moe_out", layer, y, {n_rows, D});

  if (shared) {
    TERN_PROFILE(prof_shexp, "moe.shared", w.shexp_gate.bytes());
    const float* sd = out + row * D;
    dump("ffn_shexp", layer, sd, {n_rows, D});
    float* gate = grow(s.sgate, n_rows);
    apply(w.shexp_gate, x, n_rows, gate);
    ops::split::rows(n_rows, D, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float gt = ops::sigmoid(gate[t]);
        for (int64_t d = 0; d < D; ++d) y[t * D + d] += gt * sd[t * D + d];
      }
    });
  }
  dump("ffn_out", layer, y, {n_rows, D});
}

}  // namespace tern::models
