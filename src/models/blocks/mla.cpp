#include "models/blocks/mla.h"

#include <cmath>

#include "core/error.h"
#include "core/profile.h"
#include "models/sequence_state.h"

namespace tern::models {

namespace {

// The indexer of one layer: keys stored for every new token; each new token's selection when the sequence is longer
// than topk (else every causal key is chosen: the dense path, the same result without scoring).
void run_indexer(backend::Backend& be, const MlaParams& c, const IndexerWeights& w, int layer,
                 const std::vector<Segment>& segs, const float* x, const float* qa, int64_t n_rows, MlaScratch& s,
                 const TensorDump& dump) {
  const int64_t H = c.idx_heads, d = c.idx_dim;
  float* iq = s.iq.grow<float>(be, n_rows * H * d);
  float* ik = s.ik.grow<float>(be, n_rows * d);
  float* iw = s.iw.grow<float>(be, n_rows * H);
  TERN_PROFILE(prof, "mla.indexer", w.wq_b.bytes() + w.wk.bytes() + w.proj.bytes());
  be.matmul(w.wq_b, qa, n_rows, iq);
  be.matmul(w.wk, x, n_rows, ik);
  be.layer_norm(ik, w.k_norm.data(), w.k_norm_b.data(), ik, n_rows, d, c.idx_eps);
  be.matmul(w.proj, x, n_rows, iw);
  // HF: weights * n_heads^-0.5, scores * head_dim^-0.5, relu, sum over heads; both scales are positive: folded here.
  be.scale(iw, 1.0f / std::sqrt(static_cast<float>(H * d)), n_rows * H);
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& sg = segs[i];
    const int64_t n = sg.n_tokens, p0 = sg.state->n_past();
    const int32_t* pos = s.pos.data() + sg.row0;
    be.rope_interleaved(iq + sg.row0 * H * d, n, H, d, 0, c.rope, pos, c.rope_freq_base);
    be.rope_interleaved(ik + sg.row0 * d, n, 1, d, 0, c.rope, pos, c.rope_freq_base);
    LayerState& ls = sg.state->layer(layer);
    if (!ls.v) fail("internal: layer %d has an indexer but its state keeps no indexer keys", layer);
    be.rows_store(ls.v->data(), sg.state->kv_config().k, sg.state->n_ctx(), d, ik + sg.row0 * d, n, p0);
    MlaSelection& sel = s.selections[i];
    sel.dense = p0 + n <= c.idx_topk;
    if (sel.dense) continue;
    sel.sel.resize(static_cast<size_t>(n * c.idx_topk));
    sel.n_sel.resize(static_cast<size_t>(n));
    be.indexer_topk(iq + sg.row0 * H * d, iw + sg.row0 * H, n, H, d, ls.v->data(), sg.state->kv_config().k,
                    sg.state->n_ctx(), p0, c.idx_topk, sel.sel.data(), sel.n_sel.data());
  }
  dump("indexer_k", layer, ik, {n_rows, d});
}

}  // namespace

void mla_block(backend::Backend& be, const MlaParams& c, const MlaWeights& w, int layer,
               const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y, MlaScratch& s,
               const TensorDump& dump) {
  const int64_t H = c.n_head, dqk = c.nope + c.rope, L = c.kv_lora, R = c.rope, dc = c.cache_dim();
  float* qa = s.qa.grow<float>(be, n_rows * c.q_lora);
  float* q = s.q.grow<float>(be, n_rows * H * dqk);
  float* kva = s.kva.grow<float>(be, n_rows * dc);
  float* lc = s.c.grow<float>(be, n_rows * L);
  float* kr = s.kr.grow<float>(be, n_rows * R);
  float* lat = s.lat.grow<float>(be, n_rows * dc);
  float* qabs = s.qabs.grow<float>(be, n_rows * H * dc);
  float* qn = s.qn.grow<float>(be, n_rows * c.nope);
  float* qt = s.qt.grow<float>(be, n_rows * L);
  float* obar = s.obar.grow<float>(be, n_rows * H * L);
  float* ob = s.ob.grow<float>(be, n_rows * L);
  float* oh = s.oh.grow<float>(be, n_rows * c.v_head);
  float* o = s.o.grow<float>(be, n_rows * H * c.v_head);

  TERN_PROFILE(prof_in, "mla.in", w.wq_a.bytes() + w.wq_b.bytes() + w.wkv_a.bytes());
  be.matmul(w.wq_a, x, n_rows, qa);
  be.rms_norm(qa, w.q_a_norm.data(), qa, n_rows, c.q_lora, c.lora_eps);
  be.matmul(w.wq_b, qa, n_rows, q);
  be.matmul(w.wkv_a, x, n_rows, kva);
  be.copy_rows(kva, dc, lc, L, n_rows, L);
  be.copy_rows(kva + L, dc, kr, R, n_rows, R);
  be.rms_norm(lc, w.kv_a_norm.data(), lc, n_rows, L, c.lora_eps);
  prof_in.done();

  // Positions of every row (segment by segment), then RoPE on the query's rope dims and the shared key.
  if (static_cast<int64_t>(s.pos.size()) < n_rows) s.pos.resize(static_cast<size_t>(n_rows));
  for (const Segment& sg : segs)
    for (int64_t t = 0; t < sg.n_tokens; ++t) s.pos[static_cast<size_t>(sg.row0 + t)] = static_cast<int32_t>(sg.state->n_past() + t);
  for (const Segment& sg : segs) {
    const int32_t* pos = s.pos.data() + sg.row0;
    be.rope_interleaved(q + sg.row0 * H * dqk, sg.n_tokens, H, dqk, c.nope, R, pos, c.rope_freq_base);
    be.rope_interleaved(kr + sg.row0 * R, sg.n_tokens, 1, R, 0, R, pos, c.rope_freq_base);
  }
  be.concat_rows(lc, L, kr, R, n_rows, lat);
  dump("q", layer, q, {n_rows, H, dqk});
  dump("kv_latent", layer, lat, {n_rows, dc});

  // Absorbed queries: per head [W_UK^T q_nope ; q_rope] (kv_lora + rope).
  TERN_PROFILE(prof_abs, "mla.absorb", w.wk_b.bytes());
  for (int64_t h = 0; h < H; ++h) {
    be.copy_rows(q + h * dqk, H * dqk, qn, c.nope, n_rows, c.nope);
    be.matmul(w.wk_b.rows(h * L, L), qn, n_rows, qt);
    be.copy_rows(qt, L, qabs + h * dc, H * dc, n_rows, L);
    be.copy_rows(q + h * dqk + c.nope, H * dqk, qabs + h * dc + L, H * dc, n_rows, R);
  }
  prof_abs.done();

  if (s.selections.size() < segs.size()) s.selections.resize(segs.size());
  if (w.indexer.present()) run_indexer(be, c, w.indexer, layer, segs, x, qa, n_rows, s, dump);

  TERN_PROFILE(prof_core, "mla.core", 0);
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& sg = segs[i];
    const int64_t n = sg.n_tokens, p0 = sg.state->n_past();
    LayerState& ls = sg.state->layer(layer);
    be.rows_store(ls.k->data(), sg.state->kv_config().k, sg.state->n_ctx(), dc, lat + sg.row0 * dc, n, p0);
    const MlaSelection* sel = c.idx_heads > 0 ? &s.selections[i] : nullptr;
    const bool sparse = sel && !sel->dense;
    be.attention_mla(qabs + sg.row0 * H * dc, n, H, ls.k->data(), sg.state->kv_config().k, sg.state->n_ctx(), dc, L, p0,
                     sparse ? sel->sel.data() : nullptr, c.idx_topk, sparse ? sel->n_sel.data() : nullptr, c.scale,
                     obar + sg.row0 * H * L);
    TERN_PROFILE_BYTES(prof_core, (p0 + n) * dc * (sg.state->kv_config().k == ops::KvType::kF16 ? 2 : 4));
  }
  prof_core.done();

  // Values: per head W_UV o_latent.
  TERN_PROFILE(prof_out, "mla.out", w.wv_b.bytes() + w.wo.bytes());
  for (int64_t h = 0; h < H; ++h) {
    be.copy_rows(obar + h * L, H * L, ob, L, n_rows, L);
    be.matmul(w.wv_b.rows(h * c.v_head, c.v_head), ob, n_rows, oh);
    be.copy_rows(oh, c.v_head, o + h * c.v_head, H * c.v_head, n_rows, c.v_head);
  }
  dump("kqv_out", layer, o, {n_rows, H * c.v_head});
  be.matmul(w.wo, o, n_rows, y);
  dump("attn_output", layer, y, {n_rows, c.n_embd});
}

}  // namespace tern::models
