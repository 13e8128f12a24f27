#include "models/blocks/deltanet.h"

#include "core/profile.h"
#include "models/sequence_state.h"

namespace tern::models {

void deltanet_block(backend::Backend& be, const DeltaNetParams& c, const DeltaNetWeights& w, int layer,
                    const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y,
                    DeltaNetScratch& s, const TensorDump& dump, const TensorSplit* split) {
  const int64_t conv_dim = c.conv_dim(), vdim = c.value_dim(), hv = c.n_v_heads;
  const int64_t key_dim = c.n_k_heads * c.head_k_dim;
  float* qkv = s.qkv.grow<float>(be, n_rows * conv_dim);  // [n_rows, conv_dim] pre-conv
  float* u = s.u.grow<float>(be, n_rows * conv_dim);      // [n_rows, conv_dim] post conv + silu
  float* z = s.z.grow<float>(be, n_rows * vdim);          // [n_rows, n_v_heads, head_v_dim]
  float* beta = s.beta.grow<float>(be, n_rows * hv);      // [n_rows, n_v_heads]
  float* g = s.g.grow<float>(be, n_rows * hv);            // [n_rows, n_v_heads] log decay
  float* o = s.o.grow<float>(be, n_rows * vdim);          // [n_rows, n_v_heads, head_v_dim]
  TERN_PROFILE(prof_in, "deltanet.in",
               w.wqkv.bytes() + w.wgate.bytes() + w.wbeta.bytes() + w.walpha.bytes() + w.wba.bytes());
  be.matmul(w.wqkv, x, n_rows, qkv);
  be.matmul(w.wgate, x, n_rows, z);
  // Split across ranks: beta and the decay of every head (a few rows), then this rank's heads.
  const int64_t HV = split ? split->n_heads : hv, HK = split ? split->n_key_heads : c.n_k_heads;
  float* beta_all = split ? s.beta_all.grow<float>(be, n_rows * HV) : beta;
  float* g_all = split ? s.g_all.grow<float>(be, n_rows * HV) : g;
  if (w.wba.present()) {
    float* ba = s.ba.grow<float>(be, n_rows * 2 * HV);
    be.matmul(w.wba, x, n_rows, ba);
    be.split_ba(ba, n_rows, HK, HV / HK, beta_all, g_all);
  } else {
    be.matmul(w.wbeta, x, n_rows, beta_all);
    be.matmul(w.walpha, x, n_rows, g_all);
  }
  prof_in.done();
  dump("linear_attn_qkv_mixed", layer, qkv, {n_rows, conv_dim});
  dump("z", layer, z, {n_rows, vdim});
  // bytes: each segment's recurrent state [n_v_heads, head_k_dim, head_v_dim] f32 is read (and written) once
  TERN_PROFILE(prof_core, "deltanet.core", static_cast<int64_t>(segs.size()) * hv * c.head_k_dim * c.head_v_dim * 4);
  be.delta_gates(beta_all, g_all, w.a.data(), w.dt_bias.data(), n_rows, HV);
  if (split)
    for (int64_t t = 0; t < n_rows; ++t)
      for (int64_t i = 0; i < hv; ++i) {
        beta[t * hv + i] = beta_all[t * HV + split->local_heads[static_cast<size_t>(i)]];
        g[t * hv + i] = g_all[t * HV + split->local_heads[static_cast<size_t>(i)]];
      }
  dump("beta_sigmoid", layer, beta, {n_rows, hv});
  dump("gate", layer, g, {n_rows, hv});

  // One run of the conv and the recurrence over tokens [t0, t0 + n) of a segment.
  auto run = [&](const Segment& sg, LayerState& st, int64_t t0, int64_t n) {
    const int64_t r0 = sg.row0 + t0;
    float* us = u + r0 * conv_dim;
    be.conv1d_causal_silu(qkv + r0 * conv_dim, n, conv_dim, c.conv_kernel, w.conv.data(), st.conv->as<float>(), us);
    for (int64_t t = 0; t < n; ++t) {
      be.l2_norm(us + t * conv_dim, us + t * conv_dim, c.n_k_heads, c.head_k_dim, c.rms_eps);
      be.l2_norm(us + t * conv_dim + key_dim, us + t * conv_dim + key_dim, c.n_k_heads, c.head_k_dim, c.rms_eps);
    }
    ops::DeltaRuleShape shape{n, c.n_k_heads, c.n_v_heads, c.head_k_dim, c.head_v_dim};
    ops::DeltaRuleInputs in;
    in.q = us;
    in.q_stride = conv_dim;
    in.k = us + key_dim;
    in.k_stride = conv_dim;
    in.v = us + 2 * key_dim;
    in.v_stride = conv_dim;
    in.g = g + r0 * hv;
    in.beta = beta + r0 * hv;
    be.gated_delta_rule(shape, in, c.grouped_v_heads, st.ssm->as<float>(), o + r0 * vdim);
  };
  for (const Segment& sg : segs) {
    LayerState& st = sg.state->layer(layer);
    if (!sg.state->recording()) {
      run(sg, st, 0, sg.n_tokens);
      continue;
    }
    // Checkpointed (speculative verification): token by token, keeping the states after each token. The per-token
    // recurrence is the one a batch of n tokens runs, so outputs are bit-identical either way.
    const size_t conv_bytes = st.conv->bytes(), ssm_bytes = st.ssm->bytes();
    for (int64_t t = 0; t < sg.n_tokens; ++t) {
      run(sg, st, t, 1);
      be.copy(st.conv_ckpt->data() + static_cast<size_t>(t) * conv_bytes, st.conv->data(), conv_bytes);
      be.copy(st.ssm_ckpt->data() + static_cast<size_t>(t) * ssm_bytes, st.ssm->data(), ssm_bytes);
    }
  }
  dump("conv_output_silu", layer, u, {n_rows, conv_dim});
  dump("attn_linear_core", layer, o, {n_rows, hv, c.head_v_dim});
  be.rms_norm_gated(o, z, w.norm.data(), o, n_rows * hv, c.head_v_dim, c.rms_eps);
  dump("final_output", layer, o, {n_rows, vdim});
  prof_core.done();
  TERN_PROFILE(prof_out, "deltanet.out", w.wout.bytes());
  project_out(be, w.wout, split, o, n_rows, y, s.split);
  dump("linear_attn_out", layer, y, {n_rows, c.n_embd});
}

}  // namespace tern::models
