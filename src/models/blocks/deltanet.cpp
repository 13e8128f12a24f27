#include "models/blocks/deltanet.h"

#include <algorithm>

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
  const int64_t R = hv / c.n_k_heads;  // value heads per key head
  TERN_PROFILE(prof_in, "deltanet.in",
               w.wqkv.bytes() + w.wgate.bytes() + w.wbeta.bytes() + w.walpha.bytes() + w.wba.bytes());
  apply(w.wqkv, x, n_rows, qkv);
  apply(w.wgate, x, n_rows, z);
  if (w.wba.present()) {
    float* ba = grow(s.ba, n_rows * 2 * hv);
    apply(w.wba, x, n_rows, ba);
    for (int64_t t = 0; t < n_rows; ++t)
      for (int64_t kh = 0; kh < c.n_k_heads; ++kh)
        for (int64_t r = 0; r < R; ++r) {
          beta[t * hv + kh * R + r] = ba[t * 2 * hv + kh * 2 * R + r];
          g[t * hv + kh * R + r] = ba[t * 2 * hv + kh * 2 * R + R + r];
        }
  } else {
    apply(w.wbeta, x, n_rows, beta);
    apply(w.walpha, x, n_rows, g);
  }
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
    float* os = o + sg.row0 * vdim;
    if (c.grouped_v_heads && R > 1) {
      // The delta rule pairs value head p with key head p % n_k_heads (tiled). Grouped weights pair it with
      // p / R: feed the kernel each value head at tiled slot (p % R) * n_k_heads + p / R, and put its output
      // back. The recurrent state is kept in the kernel's (tiled) order.
      const int64_t dv = c.head_v_dim;
      float* pv = grow(s.perm, n * (vdim + 2 * hv));
      float* pg = pv + n * vdim;
      float* pb = pg + n * hv;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t p = 0; p < hv; ++p) {
          const int64_t q = (p % R) * c.n_k_heads + p / R;
          std::copy_n(us + t * conv_dim + 2 * key_dim + p * dv, dv, pv + t * vdim + q * dv);
          pg[t * hv + q] = in.g[t * hv + p];
          pb[t * hv + q] = in.beta[t * hv + p];
        }
      in.v = pv;
      in.v_stride = vdim;
      in.g = pg;
      in.beta = pb;
      float* po = grow(s.ba, n * vdim);  // the ba rows are no longer needed
      ops::gated_delta_rule(shape, in, st.ssm.data(), po);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t p = 0; p < hv; ++p)
          std::copy_n(po + t * vdim + ((p % R) * c.n_k_heads + p / R) * dv, dv, os + t * vdim + p * dv);
    } else {
      ops::gated_delta_rule(shape, in, st.ssm.data(), os);
    }
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
