// Gated delta rule: token recurrence and chunked form (see delta_rule.h for conventions and layouts): the scalar
// twins, the per-head split and the choice between the two forms.
#include "ops/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/vec.h"

namespace tern::ops {

namespace {

void check_shape(const DeltaRuleShape& s, const DeltaRuleInputs& in) {
  if (s.n_tokens < 0 || s.n_k_heads <= 0 || s.n_v_heads <= 0 || s.head_k_dim <= 0 || s.head_v_dim <= 0 ||
      s.n_v_heads % s.n_k_heads != 0) {
    fail("gated_delta_rule: bad shape (n_tokens %lld, n_k_heads %lld, n_v_heads %lld, head_k_dim %lld, "
         "head_v_dim %lld); n_v_heads must be a positive multiple of n_k_heads",
         static_cast<long long>(s.n_tokens), static_cast<long long>(s.n_k_heads),
         static_cast<long long>(s.n_v_heads), static_cast<long long>(s.head_k_dim),
         static_cast<long long>(s.head_v_dim));
  }
  if (in.q_stride < s.n_k_heads * s.head_k_dim || in.k_stride < s.n_k_heads * s.head_k_dim ||
      in.v_stride < s.n_v_heads * s.head_v_dim) {
    fail("gated_delta_rule: token strides (q %lld, k %lld, v %lld) smaller than a token's heads",
         static_cast<long long>(in.q_stride), static_cast<long long>(in.k_stride),
         static_cast<long long>(in.v_stride));
  }
}

}  // namespace

void delta_recurrent_ref(const DeltaHead& h) {
  const int64_t dk = h.dk, dv = h.dv;
  float* S = h.S;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  thread_local std::vector<float> buf;
  buf.resize(2 * dv);
  float* e = buf.data();
  float* delta = buf.data() + dv;
  for (int64_t t = 0; t < h.n_tokens; ++t) {
    const float* q = h.q + t * h.q_stride;
    const float* k = h.k + t * h.k_stride;
    const float* v = h.v + t * h.v_stride;
    const float alpha = std::exp(h.g[t * h.gb_stride]);
    const float beta = h.beta[t * h.gb_stride];
    std::fill(e, e + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {  // S <- alpha S; e = S^T k
      float* row = S + i * dv;
      vec::scale(alpha, row, dv);
      vec::axpy(k[i], row, e, dv);
    }
    for (int64_t j = 0; j < dv; ++j) delta[j] = beta * (v[j] - e[j]);
    float* o = h.out + t * h.out_stride;
    std::fill(o, o + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {  // S <- S + k delta^T; o = S^T q
      float* row = S + i * dv;
      vec::axpy(k[i], delta, row, dv);
      vec::axpy(q[i] * q_scale, row, o, dv);
    }
  }
}

namespace {

// Scratch for one chunk of one value head. C = chunk length (<= 64).
struct ChunkScratch {
  std::vector<float> gam;  // [C] cumulative log decay
  std::vector<float> dec;  // [C, C] exp(gam[r] - gam[s]) for s <= r, lower triangle
  std::vector<float> kk;   // [C, C] k_r . k_s for s < r
  std::vector<float> qk;   // [C, C] (q_r / sqrt(dk)) . k_s for s <= r
  std::vector<float> u;    // [C, dv] then V' = U - W S
  std::vector<float> w;    // [C, dk]
  std::vector<float> qs;   // [C, dk] scaled queries
  void resize(int64_t dk, int64_t dv) {
    const int64_t C = kDeltaRuleChunk;
    gam.resize(C);
    dec.resize(C * C);
    kk.resize(C * C);
    qk.resize(C * C);
    u.resize(C * dv);
    w.resize(C * dk);
    qs.resize(C * dk);
  }
};

const float* k_row(const DeltaHead& h, int64_t t) { return h.k + t * h.k_stride; }
float g_at(const DeltaHead& h, int64_t t) { return h.g[t * h.gb_stride]; }

// Intra-chunk matrices: gam, dec, kk, qk, qs for tokens [t0, t0 + n).
void chunk_prepare(const DeltaHead& h, int64_t t0, int64_t n, ChunkScratch& c) {
  const int64_t dk = h.dk, C = kDeltaRuleChunk;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  float acc = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    acc += g_at(h, t0 + r);
    c.gam[r] = acc;
    const float* q = h.q + (t0 + r) * h.q_stride;
    for (int64_t i = 0; i < dk; ++i) c.qs[r * dk + i] = q[i] * q_scale;
  }
  for (int64_t r = 0; r < n; ++r) {
    const float* kr = k_row(h, t0 + r);
    // gam[r] - gam[j] summed directly as g[j+1] + ... + g[r]: subtracting two large cumulative sums (g can
    // reach -20 per token, so gam ~ -1e3 within a chunk) would cancel to ~1e-4 absolute error.
    float diff = 0.0f;
    for (int64_t j = r; j >= 0; --j) {
      if (j < r) diff += g_at(h, t0 + j + 1);
      const float* kj = k_row(h, t0 + j);
      c.dec[r * C + j] = std::exp(diff);
      c.kk[r * C + j] = j < r ? vec::dot(kr, kj, dk) : 0.0f;
      c.qk[r * C + j] = vec::dot(c.qs.data() + r * dk, kj, dk);
    }
  }
}

// One chunk of one head: outputs for tokens [t0, t0 + n) and the state update.
void chunk_step(const DeltaHead& h, int64_t t0, int64_t n, ChunkScratch& c) {
  const int64_t dk = h.dk, dv = h.dv, C = kDeltaRuleChunk;
  float* S = h.S;
  chunk_prepare(h, t0, n, c);
  // (I + A) U = beta V and (I + A) W = beta exp(gam) K by forward substitution,
  // A[r][j] = beta_r (k_r . k_j) exp(gam_r - gam_j) for j < r.
  for (int64_t r = 0; r < n; ++r) {
    const float* kr = k_row(h, t0 + r);
    const float* vr = h.v + (t0 + r) * h.v_stride;
    const float beta = h.beta[(t0 + r) * h.gb_stride];
    float* ur = c.u.data() + r * dv;
    float* wr = c.w.data() + r * dk;
    const float bg = beta * std::exp(c.gam[r]);
    for (int64_t j = 0; j < dv; ++j) ur[j] = beta * vr[j];
    for (int64_t i = 0; i < dk; ++i) wr[i] = bg * kr[i];
    for (int64_t j = 0; j < r; ++j) {
      const float a = beta * c.kk[r * C + j] * c.dec[r * C + j];
      vec::axpy(-a, c.u.data() + j * dv, ur, dv);
      vec::axpy(-a, c.w.data() + j * dk, wr, dk);
    }
  }
  // V' = U - W S (in place in u); o_r = exp(gam_r) (S^T q_r) + sum_{j<=r} qk[r][j] dec[r][j] V'_j.
  for (int64_t r = 0; r < n; ++r) {
    float* vr = c.u.data() + r * dv;
    const float* wr = c.w.data() + r * dk;
    for (int64_t i = 0; i < dk; ++i) vec::axpy(-wr[i], S + i * dv, vr, dv);
  }
  for (int64_t r = 0; r < n; ++r) {
    float* o = h.out + (t0 + r) * h.out_stride;
    std::fill(o, o + dv, 0.0f);
    const float* qr = c.qs.data() + r * dk;
    for (int64_t i = 0; i < dk; ++i) vec::axpy(qr[i], S + i * dv, o, dv);
    vec::scale(std::exp(c.gam[r]), o, dv);
    for (int64_t j = 0; j <= r; ++j) vec::axpy(c.qk[r * C + j] * c.dec[r * C + j], c.u.data() + j * dv, o, dv);
  }
  // S <- exp(gam_last) S + sum_j exp(gam_last - gam_j) k_j V'_j^T.
  const float e_last = std::exp(c.gam[n - 1]);
  for (int64_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    vec::scale(e_last, row, dv);
    for (int64_t j = 0; j < n; ++j) {
      const float kji = k_row(h, t0 + j)[i];
      vec::axpy(c.dec[(n - 1) * C + j] * kji, c.u.data() + j * dv, row, dv);
    }
  }
}

// Value head h's view of the inputs: key head h % Hk (the tiled GGUF convention) or h / (Hv / Hk) (grouped).
DeltaHead head_view(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t h, float* state, float* out) {
  const int64_t kh = s.grouped ? h / (s.n_v_heads / s.n_k_heads) : h % s.n_k_heads;
  DeltaHead d;
  d.q = in.q + kh * s.head_k_dim;
  d.k = in.k + kh * s.head_k_dim;
  d.v = in.v + h * s.head_v_dim;
  d.q_stride = in.q_stride;
  d.k_stride = in.k_stride;
  d.v_stride = in.v_stride;
  d.g = in.g + h;
  d.beta = in.beta + h;
  d.gb_stride = s.n_v_heads;
  d.out = out + h * s.head_v_dim;
  d.out_stride = s.n_v_heads * s.head_v_dim;
  d.S = state + h * s.head_k_dim * s.head_v_dim;
  d.n_tokens = s.n_tokens;
  d.dk = s.head_k_dim;
  d.dv = s.head_v_dim;
  return d;
}

}  // namespace

void delta_chunked_ref(const DeltaHead& h) {
  thread_local ChunkScratch scratch;
  scratch.resize(h.dk, h.dv);
  for (int64_t t0 = 0; t0 < h.n_tokens; t0 += kDeltaRuleChunk) {
    chunk_step(h, t0, std::min(kDeltaRuleChunk, h.n_tokens - t0), scratch);
  }
}

void gated_delta_rule_recurrent(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out,
                                Isa isa) {
  check_shape(shape, in);
  const Kernels& k = kernels(isa);
  parallel_for(shape.n_v_heads, [&](int64_t h) { k.delta_recurrent(head_view(shape, in, h, state, out)); });
}

void gated_delta_rule_chunked(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out,
                              Isa isa) {
  check_shape(shape, in);
  const Kernels& k = kernels(isa);
  parallel_for(shape.n_v_heads, [&](int64_t h) { k.delta_chunked(head_view(shape, in, h, state, out)); });
}

int64_t delta_rule_chunk_min(Isa isa) { return kernels(isa).delta_chunk_min; }

void gated_delta_rule(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out, Isa isa) {
  const int64_t chunk_min = delta_rule_chunk_min(isa);
  static std::once_flag logged;
  std::call_once(logged, [&] {
    if (chunk_min >= (int64_t{1} << 40)) {
      log::info("ops: gated delta rule: token recurrence at every length on %s (the chunked form measured slower, "
                "see ops/delta_rule.h)", isa_name(isa));
    } else {
      log::info("ops: gated delta rule: chunked form for segments of >= %lld tokens on %s, the recurrence below "
                "(measured crossover)", static_cast<long long>(chunk_min), isa_name(isa));
    }
  });
  if (shape.n_tokens < chunk_min) {
    gated_delta_rule_recurrent(shape, in, state, out, isa);
  } else {
    gated_delta_rule_chunked(shape, in, state, out, isa);
  }
}

}  // namespace tern::ops
