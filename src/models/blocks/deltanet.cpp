#include "models/blocks/deltanet.h"

#include "core/profile.h"
#include "models/sequence_state.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/delta_rule.h"
#include "ops/norm.h"

namespace tern::models {

void deltanet_block(const DeltaNetParams& c, const DeltaNetWeights& w, int layer,
                    const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y,
                    DeltaNetScratch& s, const TensorDump& dump) {
  const int64_t conv_dim = c.conv_dim(), vdim = c.value_dim(), hv = c.n_v_heads;
  const int64_t key_dim = c.n_k_heads * c.head_k_dim;
  float* qkv = grow(s.qkv, n_rows * conv_dim);  // [n_rows, conv_dim] pre-conv
  float* u = grow(s.u, n_rows * conv_dim);      // [n_rows, conv_dim] post conv + silu
  float* z = grow(s.z, n_rows * vdim);          // [n_rows, n_v_heads, head_v_dim]
  float* beta = grow(s.beta, n_rows * hv);      // [n_rows, n_v_heads]
  float* g = grow(s.g, n_rows * hv);            // [n_rows, n_v_heads] log decay
  float* o = grow(s.o, n_rows * vdim);          // [n_rows, n_v_heads, head_v_dim]
  TERN_PROFILE(prof_in, "deltanet.in", w.wqkv.bytes() + w.wgate.bytes() + w.wbeta.bytes() + w.walpha.bytes());
  apply(w.wqkv, x, n_rows, qkv);
  apply(w.wgate, x, n_rows, z);
  apply(w.wbeta, x, n_rows, beta);
  apply(w.walpha, x, n_rows, g);
  prof_in.done();
  dump("linear_attn_qkv_mixed", layer, qkv, {n_rows, conv_dim});
  dump("z", layer, z, {n_rows, vdim});
  // bytes: each segment's recurrent state [n_v_heads, head_k_dim, head_v_dim] f32 is read (and written) once
  TERN_PROFILE(prof_core, "deltanet.core", static_cast<int64_t>(segs.size()) * hv * c.head_k_dim * c.head_v_dim * 4);
  ops::sigmoid_inplace(beta, n_rows * hv);
  for (int64_t t = 0; t < n_rows; ++t)
    for (int64_t h = 0; h < hv; ++h) {
      float& gv = g[t * hv + h];
      gv = w.a[h] * ops::softplus(gv + w.dt_bias[h]);
    }
  dump("beta_sigmoid", layer, beta, {n_rows, hv});
  dump("gate", layer, g, {n_rows, hv});

  for (const Segment& sg : segs) {
    LayerState& st = sg.state->layer(layer);
    const int64_t n = sg.n_tokens;
    float* us = u + sg.row0 * conv_dim;
    ops::conv1d_causal_silu(qkv + sg.row0 * conv_dim, n, conv_dim, c.conv_kernel, w.conv.data(), st.conv.data(), us);
    for (int64_t t = 0; t < n; ++t) {
      ops::l2_norm(us + t * conv_dim, us + t * conv_dim, c.n_k_heads, c.head_k_dim, c.rms_eps);
      ops::l2_norm(us + t * conv_dim + key_dim, us + t * conv_dim + key_dim, c.n_k_heads, c.head_k_dim, c.rms_eps);
    }
    ops::DeltaRuleShape shape{n, c.n_k_heads, c.n_v_heads, c.head_k_dim, c.head_v_dim};
    ops::DeltaRuleInputs in;
    in.q = us;
    in.q_stride = conv_dim;
    in.k = us + key_dim;
    in.k_stride = conv_dim;
    in.v = us + 2 * key_dim;
    in.v_stride = conv_dim;
    in.g = g + sg.row0 * hv;
    in.beta = beta + sg.row0 * hv;
    ops::gated_delta_rule(shape, in, st.ssm.data(), o + sg.row0 * vdim);
  }
  dump("conv_output_silu", layer, u, {n_rows, conv_dim});
  dump("attn_linear_core", layer, o, {n_rows, hv, c.head_v_dim});
  ops::rms_norm_gated(o, z, w.norm.data(), o, n_rows * hv, c.head_v_dim, c.rms_eps);
  dump("final_output", layer, o, {n_rows, vdim});
  prof_core.done();
  TERN_PROFILE(prof_out, "deltanet.out", w.wout.bytes());
  apply(w.wout, o, n_rows, y);
  dump("linear_attn_out", layer, y, {n_rows, c.n_embd});
}

}  // namespace tern::models
