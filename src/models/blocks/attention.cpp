#include "models/blocks/attention.h"

#include <cmath>

#include "core/profile.h"
#include "models/sequence_state.h"

namespace tern::models {

void attention_block(backend::Backend& be, const AttentionParams& c, const AttentionWeights& w, int layer,
                     const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y,
                     AttentionScratch& s, const TensorDump& dump, const TensorSplit* split) {
  const int64_t hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  float* qg = s.qg.grow<float>(be, n_rows * 2 * q_dim);
  float* k = s.k.grow<float>(be, n_rows * kv_dim);
  float* v = s.v.grow<float>(be, n_rows * kv_dim);
  float* q = s.q.grow<float>(be, n_rows * q_dim);
  float* gate = s.gate.grow<float>(be, n_rows * q_dim);
  float* out = s.out.grow<float>(be, n_rows * q_dim);
  TERN_PROFILE(prof_in, "attn.qkv", w.wq.bytes() + w.wk.bytes() + w.wv.bytes());
  be.matmul(w.wq, x, n_rows, qg);
  be.matmul(w.wk, x, n_rows, k);
  be.matmul(w.wv, x, n_rows, v);
  prof_in.done();
  TERN_PROFILE(prof_core, "attn.core", 0);  // bytes: the KV cache rows each segment reads
  be.split_q_gate(qg, n_rows, c.n_head, hd, q, gate);
  be.rms_norm(q, w.q_norm.data(), q, n_rows * c.n_head, hd, c.rms_eps);
  be.rms_norm(k, w.k_norm.data(), k, n_rows * c.n_head_kv, hd, c.rms_eps);
  dump("Qcur_normed", layer, q, {n_rows, c.n_head, hd});
  dump("Kcur_normed", layer, k, {n_rows, c.n_head_kv, hd});

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const Segment& sg : segs) {
    const int64_t n = sg.n_tokens, p0 = sg.state->n_past();
    if (static_cast<int64_t>(s.pos.size()) < n) s.pos.resize(static_cast<size_t>(n));
    int32_t* pos = s.pos.data();
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(p0 + t);
    float* qs = q + sg.row0 * q_dim;
    float* ks = k + sg.row0 * kv_dim;
    be.rope_neox(qs, n, c.n_head, hd, c.n_rot, pos, c.rope_freq_base);
    be.rope_neox(ks, n, c.n_head_kv, hd, c.n_rot, pos, c.rope_freq_base);
    const ops::KvCacheView kv = sg.state->kv(layer);
    be.kv_store(kv, ks, v + sg.row0 * kv_dim, n, p0);
    be.attention_causal(qs, n, c.n_head, kv, p0, scale, out + sg.row0 * q_dim);
    TERN_PROFILE_BYTES(prof_core, (p0 + n) * c.n_head_kv *
                                      (ops::kv_row_bytes(kv.k_type, hd) + ops::kv_row_bytes(kv.v_type, hd)));
  }
  dump("attn_pregate", layer, out, {n_rows, q_dim});
  be.sigmoid_gate(out, gate, n_rows * q_dim);
  dump("attn_gated", layer, out, {n_rows, q_dim});
  prof_core.done();
  TERN_PROFILE(prof_out, "attn.out", w.wo.bytes());
  project_out(be, w.wo, split, out, n_rows, y, s.split);
  dump("attn_output", layer, y, {n_rows, c.n_embd});
}

}  // namespace tern::models
