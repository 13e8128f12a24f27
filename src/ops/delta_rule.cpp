// Gated delta rule: token recurrence and chunked form (see delta_rule.h for conventions and layouts).
#include "ops/delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
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

// Row pointers of token t for value head h (key head h % Hk: the tiled GGUF convention).
struct HeadRows {
  const float* q;
  const float* k;
  const float* v;
};

HeadRows head_rows(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t t, int64_t h) {
  const int64_t kh = h % s.n_k_heads;
  return {in.q + t * in.q_stride + kh * s.head_k_dim, in.k + t * in.k_stride + kh * s.head_k_dim,
          in.v + t * in.v_stride + h * s.head_v_dim};
}

void recurrent_head(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t h, float* S, float* out) {
  const int64_t dk = s.head_k_dim, dv = s.head_v_dim;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  thread_local std::vector<float> buf;
  buf.resize(2 * dv);
  float* e = buf.data();
  float* delta = buf.data() + dv;
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    const HeadRows r = head_rows(s, in, t, h);
    const float alpha = std::exp(in.g[t * s.n_v_heads + h]);
    const float beta = in.beta[t * s.n_v_heads + h];
    std::fill(e, e + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {  // S <- alpha S; e = S^T k
      float* row = S + i * dv;
      vec::scale(alpha, row, dv);
      vec::axpy(r.k[i], row, e, dv);
    }
    for (int64_t j = 0; j < dv; ++j) delta[j] = beta * (r.v[j] - e[j]);
    float* o = out + (t * s.n_v_heads + h) * dv;
    std::fill(o, o + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {  // S <- S + k delta^T; o = S^T q
      float* row = S + i * dv;
      vec::axpy(r.k[i], delta, row, dv);
      vec::axpy(r.q[i] * q_scale, row, o, dv);
    }
  }
}

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

// Intra-chunk matrices: gam, dec, kk, qk, qs for tokens [t0, t0 + n).
void chunk_prepare(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t h, int64_t t0, int64_t n,
                   ChunkScratch& c) {
  const int64_t dk = s.head_k_dim, C = kDeltaRuleChunk;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  float acc = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    acc += in.g[(t0 + r) * s.n_v_heads + h];
    c.gam[r] = acc;
    const float* q = head_rows(s, in, t0 + r, h).q;
    for (int64_t i = 0; i < dk; ++i) c.qs[r * dk + i] = q[i] * q_scale;
  }
  for (int64_t r = 0; r < n; ++r) {
    const float* kr = head_rows(s, in, t0 + r, h).k;
    // gam[r] - gam[j] summed directly as g[j+1] + ... + g[r]: subtracting two large cumulative sums (g can
    // reach -20 per token, so gam ~ -1e3 within a chunk) would cancel to ~1e-4 absolute error.
    float diff = 0.0f;
    for (int64_t j = r; j >= 0; --j) {
      if (j < r) diff += in.g[(t0 + j + 1) * s.n_v_heads + h];
      const float* kj = head_rows(s, in, t0 + j, h).k;
      c.dec[r * C + j] = std::exp(diff);
      c.kk[r * C + j] = j < r ? vec::dot(kr, kj, dk) : 0.0f;
      c.qk[r * C + j] = vec::dot(c.qs.data() + r * dk, kj, dk);
    }
  }
}

// One chunk of one head: outputs for tokens [t0, t0 + n) and the state update.
void chunk_step(const DeltaRuleShape& s, const DeltaRuleInputs& in, int64_t h, int64_t t0, int64_t n, float* S,
                float* out, ChunkScratch& c) {
  const int64_t dk = s.head_k_dim, dv = s.head_v_dim, C = kDeltaRuleChunk;
  chunk_prepare(s, in, h, t0, n, c);
  // (I + A) U = beta V and (I + A) W = beta exp(gam) K by forward substitution,
  // A[r][j] = beta_r (k_r . k_j) exp(gam_r - gam_j) for j < r.
  for (int64_t r = 0; r < n; ++r) {
    const HeadRows rows = head_rows(s, in, t0 + r, h);
    const float beta = in.beta[(t0 + r) * s.n_v_heads + h];
    float* ur = c.u.data() + r * dv;
    float* wr = c.w.data() + r * dk;
    const float bg = beta * std::exp(c.gam[r]);
    for (int64_t j = 0; j < dv; ++j) ur[j] = beta * rows.v[j];
    for (int64_t i = 0; i < dk; ++i) wr[i] = bg * rows.k[i];
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
    float* o = out + ((t0 + r) * s.n_v_heads + h) * dv;
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
      const float kji = head_rows(s, in, t0 + j, h).k[i];
      vec::axpy(c.dec[(n - 1) * C + j] * kji, c.u.data() + j * dv, row, dv);
    }
  }
}

}  // namespace

void gated_delta_rule_recurrent(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out) {
  check_shape(shape, in);
  const int64_t per_head = shape.head_k_dim * shape.head_v_dim;
  parallel_for(shape.n_v_heads, [&](int64_t h) { recurrent_head(shape, in, h, state + h * per_head, out); });
}

void gated_delta_rule_chunked(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out) {
  check_shape(shape, in);
  const int64_t per_head = shape.head_k_dim * shape.head_v_dim;
  parallel_for(shape.n_v_heads, [&](int64_t h) {
    thread_local ChunkScratch scratch;
    scratch.resize(shape.head_k_dim, shape.head_v_dim);
    for (int64_t t0 = 0; t0 < shape.n_tokens; t0 += kDeltaRuleChunk) {
      const int64_t n = std::min(kDeltaRuleChunk, shape.n_tokens - t0);
      chunk_step(shape, in, h, t0, n, state + h * per_head, out, scratch);
    }
  });
}

void gated_delta_rule(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out) {
  if (shape.n_tokens < kDeltaRuleChunkMin) {
    gated_delta_rule_recurrent(shape, in, state, out);
  } else {
    gated_delta_rule_chunked(shape, in, state, out);
  }
}

}  // namespace tern::ops
