// Gated delta rule kernels for one value head, written once against a vector policy V (see simd_math.h).
//
// Recurrence: the columns of a head's state S [dk, dv] evolve independently (column j needs only S[:, j], k, q,
// alpha, beta and v[j]), so the state is walked in column blocks of 4 vectors: per token, pass 1 reads the block
// (a = S^T k in registers), pass 2 re-reads it from L1, writes alpha S + k delta^T and accumulates o = S^T q. A
// decode token reads and writes each state element once from memory; a prefill keeps each block in L1 over all of
// its tokens. Per column the arithmetic is fixed by dk alone.
//
// Chunked form (contract 8.6, HF torch_chunk_gated_delta_rule, chunk 64): the ref's algorithm with every product on
// one register-blocked kernel, C = C0 + A B (gemm below), and the vector exp for the decay matrix.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/delta_rule.h"
#include "ops/kernels.h"
#include "ops/simd/simd_math.h"

namespace tern::ops {
namespace {

template <class V>
struct DeltaSimd {
  using R = typename V::R;
  static constexpr int64_t L = V::kL;
  static constexpr int kNV = 4;  // vectors per column block of the recurrence

  template <bool Part>
  static R ld(const float* p, int u, int nv, int64_t last) {
    return Part && u == nv - 1 ? V::load_n(p + u * L, last, 0.0f) : V::load(p + u * L);
  }
  template <bool Part>
  static void st(float* p, R x, int u, int nv, int64_t last) {
    if (Part && u == nv - 1) {
      V::store_n(p + u * L, x, last);
    } else {
      V::store(p + u * L, x);
    }
  }

  // Columns [j0, j0 + (NV - 1) L + last) of the head, all tokens.
  template <int NV, bool Part>
  static void recurrent_block(const DeltaHead& h, int64_t j0, int64_t last) {
    const int64_t dk = h.dk, dv = h.dv;
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    float* S = h.S + j0;
    for (int64_t t = 0; t < h.n_tokens; ++t) {
      const float* q = h.q + t * h.q_stride;
      const float* k = h.k + t * h.k_stride;
      const float* v = h.v + t * h.v_stride + j0;
      const float alpha = std::exp(h.g[t * h.gb_stride]);
      const R av = V::set1(alpha), bv = V::set1(h.beta[t * h.gb_stride]);
      R a[NV], d[NV], o[NV];
      for (int u = 0; u < NV; ++u) a[u] = o[u] = V::zero();
      for (int64_t i = 0; i < dk; ++i) {  // a = S^T k
        const R ki = V::set1(k[i]);
        for (int u = 0; u < NV; ++u) a[u] = V::fma(ki, ld<Part>(S + i * dv, u, NV, last), a[u]);
      }
      // delta = beta (v - alpha a): e = (alpha S)^T k as alpha (S^T k)
      for (int u = 0; u < NV; ++u) d[u] = V::mul(bv, V::sub(ld<Part>(v, u, NV, last), V::mul(av, a[u])));
      for (int64_t i = 0; i < dk; ++i) {  // S <- alpha S + k delta^T; o = S^T q
        float* row = S + i * dv;
        const R ki = V::set1(k[i]), qi = V::set1(q[i] * q_scale);
        for (int u = 0; u < NV; ++u) {
          const R s = V::fma(ki, d[u], V::mul(av, ld<Part>(row, u, NV, last)));
          st<Part>(row, s, u, NV, last);
          o[u] = V::fma(qi, s, o[u]);
        }
      }
      float* out = h.out + t * h.out_stride + j0;
      for (int u = 0; u < NV; ++u) st<Part>(out, o[u], u, NV, last);
    }
  }

  static void recurrent(const DeltaHead& h) {
    constexpr int64_t W = kNV * L;
    int64_t j0 = 0;
    for (; j0 + W <= h.dv; j0 += W) recurrent_block<kNV, false>(h, j0, L);
    const int64_t rest = h.dv - j0;
    if (rest == 0) return;
    const int nv = static_cast<int>((rest + L - 1) / L);
    const int64_t last = rest - (nv - 1) * L;
    const bool part = last < L;
    switch (nv) {
      case 1: part ? recurrent_block<1, true>(h, j0, last) : recurrent_block<1, false>(h, j0, last); break;
      case 2: part ? recurrent_block<2, true>(h, j0, last) : recurrent_block<2, false>(h, j0, last); break;
      case 3: part ? recurrent_block<3, true>(h, j0, last) : recurrent_block<3, false>(h, j0, last); break;
      default: part ? recurrent_block<4, true>(h, j0, last) : recurrent_block<4, false>(h, j0, last); break;
    }
  }

  // ---- gemm: C[m][n] = C0[m][n] + sum_{k < K_m} A[m * sam + k * sak] B[k * ldb + n], for m < M, n < N_m, where
  // C0 = 0 (load_c false) or c_scale * C (c_scale 1: C itself). tri_k: K_m = min(K, end of m's 4-row block) (A is
  // zero past the diagonal); lower_n: N_m = min(N, end of m's 4-row block) (only the lower triangle is wanted).
  // Per element: its initial value, then one FMA per k in order; blocking never changes a result.
  struct GemmArgs {
    int64_t M, N, K;
    const float* A;
    int64_t sam, sak;
    const float* B;
    int64_t ldb;
    float* C;
    int64_t ldc;
    bool load_c = false;
    float c_scale = 1.0f;
    bool tri_k = false, lower_n = false;
  };

  template <int MR, int NV, bool Part>
  static void micro(const GemmArgs& g, int64_t m0, int64_t n0, int64_t K, int64_t last) {
    R acc[MR][NV];
    for (int r = 0; r < MR; ++r) {
      float* c = g.C + (m0 + r) * g.ldc + n0;
      for (int u = 0; u < NV; ++u) {
        if (!g.load_c) {
          acc[r][u] = V::zero();
        } else if (g.c_scale == 1.0f) {
          acc[r][u] = ld<Part>(c, u, NV, last);
        } else {
          acc[r][u] = V::mul(V::set1(g.c_scale), ld<Part>(c, u, NV, last));
        }
      }
    }
    const float* a = g.A + m0 * g.sam;
    for (int64_t k = 0; k < K; ++k) {
      R b[NV];
      for (int u = 0; u < NV; ++u) b[u] = ld<Part>(g.B + k * g.ldb + n0, u, NV, last);
      for (int r = 0; r < MR; ++r) {
        const R ar = V::set1(a[r * g.sam + k * g.sak]);
        for (int u = 0; u < NV; ++u) acc[r][u] = V::fma(ar, b[u], acc[r][u]);
      }
    }
    for (int r = 0; r < MR; ++r)
      for (int u = 0; u < NV; ++u) st<Part>(g.C + (m0 + r) * g.ldc + n0, acc[r][u], u, NV, last);
  }

  template <int MR>
  static void row_block(const GemmArgs& g, int64_t m0) {
    constexpr int NV = V::kGemmNV;
    const int64_t K = g.tri_k ? std::min(g.K, m0 + MR) : g.K;
    const int64_t N = g.lower_n ? std::min(g.N, m0 + MR) : g.N;
    int64_t n0 = 0;
    for (; n0 + NV * L <= N; n0 += NV * L) micro<MR, NV, false>(g, m0, n0, K, L);
    for (; n0 < N; n0 += L) {  // tail: one vector at a time, the last one partial
      const int64_t m = N - n0 < L ? N - n0 : L;
      if (m == L) {
        micro<MR, 1, false>(g, m0, n0, K, L);
      } else {
        micro<MR, 1, true>(g, m0, n0, K, m);
      }
    }
  }

  static void gemm(const GemmArgs& g) {
    int64_t m0 = 0;
    for (; m0 + 4 <= g.M; m0 += 4) row_block<4>(g, m0);
    switch (g.M - m0) {
      case 1: row_block<1>(g, m0); break;
      case 2: row_block<2>(g, m0); break;
      case 3: row_block<3>(g, m0); break;
      default: break;
    }
  }

  // ---- chunked form ----
  struct Scratch {
    std::vector<float> gam, kt, kk, p, dec, x, qe, kd;
    void resize(int64_t dk, int64_t dv) {
      const int64_t C = kDeltaRuleChunk;
      gam.resize(C);
      kt.resize(dk * C);   // [dk, C] keys transposed
      kk.resize(C * C);    // k_r . k_j, then -A (the solve's coefficients)
      p.resize(C * C);     // q_r . k_j, then P = (q . k) * dec, zero above the diagonal
      dec.resize(C * C);   // exp(gam_r - gam_j), j <= r
      x.resize(C * (dv + dk));  // rows [U | -W]: after the solve, U becomes V' = U - W S in place
      qe.resize(C * dk);   // q_r / sqrt(dk), then times exp(gam_r)
      kd.resize(C * dk);   // exp(gam_last - gam_j) k_j
    }
  };

  static void scale_row(const float* x, float s, float* y, int64_t n) {
    const R sv = V::set1(s);
    for (int64_t i = 0; i < n; i += L) {
      const int64_t m = n - i < L ? n - i : L;
      V::store_n(y + i, V::mul(sv, V::load_n(x + i, m, 0.0f)), m);
    }
  }

  static void chunk(const DeltaHead& h, int64_t t0, int64_t n, Scratch& c) {
    const int64_t dk = h.dk, dv = h.dv, C = kDeltaRuleChunk, NX = dv + dk;
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const float* k0 = h.k + t0 * h.k_stride;
    float acc = 0.0f;
    for (int64_t r = 0; r < n; ++r) {
      acc += h.g[(t0 + r) * h.gb_stride];
      c.gam[r] = acc;
      scale_row(h.q + (t0 + r) * h.q_stride, q_scale, c.qe.data() + r * dk, dk);
      for (int64_t i = 0; i < dk; ++i) c.kt[i * C + r] = k0[r * h.k_stride + i];
    }
    gemm({n, n, dk, k0, h.k_stride, 1, c.kt.data(), C, c.kk.data(), C, false, 1.0f, false, true});
    gemm({n, n, dk, c.qe.data(), dk, 1, c.kt.data(), C, c.p.data(), C, false, 1.0f, false, true});
    for (int64_t r = 0; r < n; ++r) {
      // exp(gam_r - gam_j) with the difference summed directly as g_{j+1} + ... + g_r (as the ref: no cancellation)
      float* dr = c.dec.data() + r * C;
      float diff = 0.0f;
      for (int64_t j = r; j >= 0; --j) {
        if (j < r) diff += h.g[(t0 + j + 1) * h.gb_stride];
        dr[j] = diff;
      }
      for (int64_t j = 0; j <= r; j += L) {
        const int64_t m = r + 1 - j < L ? r + 1 - j : L;
        V::store_n(dr + j, Math<V>::exp(V::load_n(dr + j, m, 0.0f)), m);
      }
      const float beta = h.beta[(t0 + r) * h.gb_stride];
      float* ar = c.kk.data() + r * C;
      float* pr = c.p.data() + r * C;
      for (int64_t j = 0; j < r; ++j) ar[j] = -(beta * ar[j] * dr[j]);
      for (int64_t j = 0; j <= r; ++j) pr[j] *= dr[j];
      for (int64_t j = r + 1; j < n; ++j) pr[j] = 0.0f;
      float* xr = c.x.data() + r * NX;
      scale_row(h.v + (t0 + r) * h.v_stride, beta, xr, dv);
      scale_row(k0 + r * h.k_stride, -(beta * std::exp(c.gam[r])), xr + dv, dk);
    }
    // (I + A) [U | -W] = [beta V | -beta exp(gam) K], forward substitution row by row.
    for (int64_t r = 1; r < n; ++r)
      gemm({1, NX, r, c.kk.data() + r * C, C, 1, c.x.data(), NX, c.x.data() + r * NX, NX, true, 1.0f});
    const float* S = h.S;
    // V' = U - W S; o = exp(gam) (Q S) + P V'; S <- exp(gam_last) S + (dec_last K)^T V'.
    gemm({n, dv, dk, c.x.data() + dv, NX, 1, S, dv, c.x.data(), NX, true, 1.0f});
    for (int64_t r = 0; r < n; ++r) scale_row(c.qe.data() + r * dk, std::exp(c.gam[r]), c.qe.data() + r * dk, dk);
    float* out = h.out + t0 * h.out_stride;
    gemm({n, dv, dk, c.qe.data(), dk, 1, S, dv, out, h.out_stride, false, 1.0f});
    gemm({n, dv, n, c.p.data(), C, 1, c.x.data(), NX, out, h.out_stride, true, 1.0f, true, false});
    const float* dl = c.dec.data() + (n - 1) * C;
    for (int64_t j = 0; j < n; ++j) scale_row(k0 + j * h.k_stride, dl[j], c.kd.data() + j * dk, dk);
    gemm({dk, dv, n, c.kd.data(), 1, dk, c.x.data(), NX, h.S, dv, true, std::exp(c.gam[n - 1])});
  }

  static void chunked(const DeltaHead& h) {
    thread_local Scratch scratch;
    scratch.resize(h.dk, h.dv);
    for (int64_t t0 = 0; t0 < h.n_tokens; t0 += kDeltaRuleChunk)
      chunk(h, t0, std::min(kDeltaRuleChunk, h.n_tokens - t0), scratch);
  }
};

}  // namespace
}  // namespace tern::ops
