#include "models/blocks/mla.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "quant/convert.h"
#include "core/profile.h"
#include "models/sequence_state.h"

namespace tern::models {

namespace {

constexpr int64_t kMlaExpandHeads = 8;  // heads expanded at once: ~24 KiB of keys and values per past row

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

namespace {

// The absorbed form's query side for rows [r0, r1): per head [W_UK^T q_nope ; q_rope] (kv_lora + rope) into qabs
// (row r at qabs + (r - r0) * H * dc).
void absorb_queries(backend::Backend& be, const MlaParams& c, const MlaWeights& w, const float* q, int64_t r0,
                    int64_t r1, float* qabs, MlaScratch& s) {
  const int64_t H = c.n_head, dqk = c.nope + c.rope, L = c.kv_lora, R = c.rope, dc = c.cache_dim(), n = r1 - r0;
  float* qn = s.qn.grow<float>(be, n * c.nope);
  float* qt = s.qt.grow<float>(be, n * L);
  for (int64_t h = 0; h < H; ++h) {
    be.copy_rows(q + (r0 * H + h) * dqk, H * dqk, qn, c.nope, n, c.nope);
    be.matmul(w.wk_b.rows(h * L, L), qn, n, qt);
    be.copy_rows(qt, L, qabs + h * dc, H * dc, n, L);
    be.copy_rows(q + (r0 * H + h) * dqk + c.nope, H * dqk, qabs + h * dc + L, H * dc, n, R);
  }
}

// The absorbed form's value side for rows [r0, r1): per head W_UV o_latent into o (row r at o + r * H * v_head).
void project_values(backend::Backend& be, const MlaParams& c, const MlaWeights& w, const float* obar, int64_t r0,
                    int64_t r1, float* o, MlaScratch& s) {
  const int64_t H = c.n_head, L = c.kv_lora, n = r1 - r0;
  float* ob = s.ob.grow<float>(be, n * L);
  float* oh = s.oh.grow<float>(be, n * c.v_head);
  for (int64_t h = 0; h < H; ++h) {
    be.copy_rows(obar + h * L, H * L, ob, L, n, L);
    be.matmul(w.wv_b.rows(h * c.v_head, c.v_head), ob, n, oh);
    be.copy_rows(oh, c.v_head, o + (r0 * H + h) * c.v_head, H * c.v_head, n, c.v_head);
  }
}

// The expanded form for one segment: its P = p0 + n latent rows read back from the cache (the values the absorbed
// form attends to), expanded a group of heads at a time into keys [W_UK c ; rope key] and values W_UV c, then
// attention per head; the head outputs land in o directly.
void expanded_segment(backend::Backend& be, const MlaParams& c, const MlaWeights& w, const Segment& sg,
                      const LayerState& ls, const float* q, float* o, MlaScratch& s) {
  const int64_t H = c.n_head, dqk = c.nope + c.rope, L = c.kv_lora, R = c.rope, dc = c.cache_dim(), dv = c.v_head;
  const int64_t n = sg.n_tokens, p0 = sg.state->n_past(), P = p0 + n;
  const int64_t G = std::min<int64_t>(H, kMlaExpandHeads);
  float* lat = s.xlat.grow<float>(be, P * dc);
  float* lc = s.xc.grow<float>(be, P * L);
  float* kn = s.xkn.grow<float>(be, P * G * c.nope);
  float* vx = s.xv.grow<float>(be, P * G * dv);
  float* kh = s.xk.grow<float>(be, G * P * dqk);
  float* vh = s.xvh.grow<float>(be, G * P * dv);
  be.rows_load(ls.k->data(), sg.state->kv_config().k, sg.state->n_ctx(), dc, 0, P, lat);
  be.copy_rows(lat, dc, lc, L, P, L);
  for (int64_t h0 = 0; h0 < H; h0 += G) {
    const int64_t g = std::min(G, H - h0);
    be.matmul(w.wk_b_t.rows(h0 * c.nope, g * c.nope), lc, P, kn);
    be.matmul(w.wv_b.rows(h0 * dv, g * dv), lc, P, vx);
    for (int64_t j = 0; j < g; ++j) {
      be.copy_rows(kn + j * c.nope, g * c.nope, kh + j * P * dqk, dqk, P, c.nope);
      be.copy_rows(lat + L, dc, kh + j * P * dqk + c.nope, dqk, P, R);
      be.copy_rows(vx + j * dv, g * dv, vh + j * P * dv, dv, P, dv);
    }
    be.attention_mla_expanded(q + (sg.row0 * H + h0) * dqk, H * dqk, n, g, kh, vh, P, dqk, dv, p0, c.scale,
                              o + (sg.row0 * H + h0) * dv, H * dv);
  }
}

}  // namespace

int64_t mla_expanded_scratch_floats(const MlaParams& c, int64_t P) {
  const int64_t G = std::min<int64_t>(c.n_head, kMlaExpandHeads);
  return P * (c.cache_dim() + c.kv_lora + G * (c.nope + 2 * c.v_head + c.nope + c.rope));
}

bool mla_expanded_pays(int64_t n, int64_t p0) {
  // Measured end to end (docs/BENCHMARKS.md "MLA: absorbed and expanded forms", GLM-5 widths, Zen 4, 2 threads):
  // from an empty past the forms tie at 16-32 tokens (absorbed 0-6% ahead) and the expanded one leads from 64
  // (+15%, +21% at 512); over a past of 1024 they tie at 128 new tokens and the expanded one leads at 256 (+10%),
  // i.e. expanding a past row costs what the expanded attention saves on ~150 (query, key) pairs.
  constexpr int64_t kMinTokens = 64, kPairsPerRow = 150;
  if (n < kMinTokens) return false;
  return n * (2 * p0 + n + 1) > 2 * kPairsPerRow * p0;  // pairs n (p0 + (n + 1) / 2) against 150 per past row
}

void mla_key_expansion(const Linear& wk_b, int64_t nope, int64_t kv_lora, int64_t n_head, quant::Type type,
                       uint8_t* dst) {
  if (wk_b.repacked) fail("internal: %s: the key expansion is built from the file's layout", wk_b.name.c_str());
  const int64_t n = nope * kv_lora * n_head;
  std::vector<float> src(static_cast<size_t>(n)), t(static_cast<size_t>(n));
  quant::dequantize_row(wk_b.type, wk_b.data, src.data(), n);
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t l = 0; l < kv_lora; ++l)
      for (int64_t j = 0; j < nope; ++j) t[static_cast<size_t>((h * nope + j) * kv_lora + l)] = src[static_cast<size_t>((h * kv_lora + l) * nope + j)];
  const size_t row = quant::row_size(quant::traits(type), kv_lora);
  for (int64_t r = 0; r < nope * n_head; ++r) quant::quantize_row_ref(type, t.data() + r * kv_lora, dst + r * row, kv_lora);
}

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

  if (s.selections.size() < segs.size()) s.selections.resize(segs.size());
  if (w.indexer.present()) run_indexer(be, c, w.indexer, layer, segs, x, qa, n_rows, s, dump);

  // Each segment's form; runs of consecutive absorbed segments share their per-head matmuls.
  std::vector<bool> expanded(segs.size());
  std::vector<std::pair<int64_t, int64_t>> runs;  // absorbed row ranges
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& sg = segs[i];
    const bool sparse = c.idx_heads > 0 && !s.selections[i].dense;
    expanded[i] = !sparse && w.wk_b_t.present() && c.form != MlaForm::kAbsorbed &&
                  (c.form == MlaForm::kExpanded || mla_expanded_pays(sg.n_tokens, sg.state->n_past()));
    if (expanded[i]) continue;
    if (!runs.empty() && runs.back().second == sg.row0) runs.back().second += sg.n_tokens;
    else runs.emplace_back(sg.row0, sg.row0 + sg.n_tokens);
  }

  for (const Segment& sg : segs) {
    LayerState& ls = sg.state->layer(layer);
    be.rows_store(ls.k->data(), sg.state->kv_config().k, sg.state->n_ctx(), dc, lat + sg.row0 * dc, sg.n_tokens,
                  sg.state->n_past());
  }

  TERN_PROFILE(prof_abs, "mla.absorb", w.wk_b.bytes());
  float* qabs = nullptr;
  float* obar = nullptr;
  if (!runs.empty()) {
    qabs = s.qabs.grow<float>(be, n_rows * H * dc);
    obar = s.obar.grow<float>(be, n_rows * H * L);
    for (const auto& [r0, r1] : runs) absorb_queries(be, c, w, q, r0, r1, qabs + r0 * H * dc, s);
  }
  prof_abs.done();

  TERN_PROFILE(prof_core, "mla.core", 0);
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& sg = segs[i];
    if (expanded[i]) continue;
    const int64_t n = sg.n_tokens, p0 = sg.state->n_past();
    LayerState& ls = sg.state->layer(layer);
    const MlaSelection* sel = c.idx_heads > 0 ? &s.selections[i] : nullptr;
    const bool sparse = sel && !sel->dense;
    be.attention_mla(qabs + sg.row0 * H * dc, n, H, ls.k->data(), sg.state->kv_config().k, sg.state->n_ctx(), dc, L, p0,
                     sparse ? sel->sel.data() : nullptr, c.idx_topk, sparse ? sel->n_sel.data() : nullptr, c.scale,
                     obar + sg.row0 * H * L);
    TERN_PROFILE_BYTES(prof_core, (p0 + n) * dc * (sg.state->kv_config().k == ops::KvType::kF16 ? 2 : 4));
  }
  prof_core.done();

  TERN_PROFILE(prof_out, "mla.out", w.wv_b.bytes());
  for (const auto& [r0, r1] : runs) project_values(be, c, w, obar + r0 * H * L, r0, r1, o, s);
  prof_out.done();

  TERN_PROFILE(prof_exp, "mla.expanded", w.wk_b_t.bytes() + w.wv_b.bytes());
  for (size_t i = 0; i < segs.size(); ++i)
    if (expanded[i]) expanded_segment(be, c, w, segs[i], segs[i].state->layer(layer), q, o, s);
  prof_exp.done();

  dump("kqv_out", layer, o, {n_rows, H * c.v_head});
  TERN_PROFILE(prof_wo, "mla.wo", w.wo.bytes());
  be.matmul(w.wo, o, n_rows, y);
  prof_wo.done();
  dump("attn_output", layer, y, {n_rows, c.n_embd});
}

}  // namespace tern::models
