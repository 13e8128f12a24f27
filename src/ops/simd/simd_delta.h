// Gated delta rule kernels for one value head, written once against a vector policy V (see simd_math.h).
//
// Recurrence: the columns of a head's state S [dk, dv] evolve independently (column j needs only S[:, j], k, q,
// alpha, beta and v[j]), so the state is walked in column blocks of 4 vectors: per token, pass 1 reads the block
// (a = S^T k in registers), pass 2 re-reads it from cache, writes alpha S + k delta^T and accumulates o = S^T q. A
// decode token reads and writes each state element once from memory; a prefill keeps each block in L1 over all of
// its tokens. Per column the arithmetic is fixed by dk alone.
//
// Chunked form (contract 8.6, HF torch_chunk_gated_delta_rule, chunk 64): the ref's algorithm with every product on
// one register-blocked kernel, C = C0 + A B (gemm below), and the vector exp for the decay matrix. Decay factors
// below e^-41 (~2^-59) are taken as 0 (kFlush): every output and state sum also holds a term of factor 1 (the
// current token), so what is dropped is below 2^-35 of it, far under fp32 rounding; kept, products of such factors
// go subnormal and cost ~100 cycles each (before the flush the chunked step measured ~10x slower than the
// recurrence with strong decays; ~1.2-1.8x after).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

  // y = s x (y may be x)
  static void scale_row(const float* x, float s, float* y, int64_t n) {
    const R sv = V::set1(s);
    for (int64_t i = 0; i < n; i += L) {
      const int64_t m = n - i < L ? n - i : L;
      store_m<V>(y + i, V::mul(sv, load_m<V>(x + i, m)), m);
    }
  }

  // Columns [j0, j0 + (NV - 1) L + last) of the head, all of h's tokens; S points at column j0 of row 0, rows rs
  // apart. q is multiplied by q_scale here (1 when h.q already holds q / sqrt(dk): the same product either way).
  // a = S^T k accumulates even and odd rows apart (two FMA chains per vector), then adds them.
  template <int NV, bool Part>
  static void recurrent_block(const DeltaHead& h, float q_scale, float* S, int64_t rs, int64_t j0, int64_t last) {
    const int64_t dk = h.dk;
    for (int64_t t = 0; t < h.n_tokens; ++t) {
      const float* q = h.q + t * h.q_stride;
      const float* k = h.k + t * h.k_stride;
      const float* v = h.v + t * h.v_stride + j0;
      const float alpha = std::exp(h.g[t * h.gb_stride]);
      const R av = V::set1(alpha), bv = V::set1(h.beta[t * h.gb_stride]);
      R a[NV], a1[NV], d[NV], o[NV];
      for (int u = 0; u < NV; ++u) a[u] = a1[u] = o[u] = V::zero();
      int64_t i = 0;
      for (; i + 2 <= dk; i += 2) {  // a = S^T k
        const R k0 = V::set1(k[i]), k1 = V::set1(k[i + 1]);
        for (int u = 0; u < NV; ++u) {
          a[u] = V::fma(k0, ld<Part>(S + i * rs, u, NV, last), a[u]);
          a1[u] = V::fma(k1, ld<Part>(S + (i + 1) * rs, u, NV, last), a1[u]);
        }
      }
      if (i < dk) {
        const R k0 = V::set1(k[i]);
        for (int u = 0; u < NV; ++u) a[u] = V::fma(k0, ld<Part>(S + i * rs, u, NV, last), a[u]);
      }
      // delta = beta (v - alpha a): e = (alpha S)^T k as alpha (S^T k)
      for (int u = 0; u < NV; ++u) {
        const R e = V::mul(av, V::add(a[u], a1[u]));
        d[u] = V::mul(bv, V::sub(ld<Part>(v, u, NV, last), e));
      }
      for (i = 0; i < dk; ++i) {  // S <- alpha S + k delta^T; o = S^T q
        float* row = S + i * rs;
        const R ki = V::set1(k[i]), qi = V::set1(q[i] * q_scale);
        for (int u = 0; u < NV; ++u) {
          const R sv = V::fma(ki, d[u], V::mul(av, ld<Part>(row, u, NV, last)));
          st<Part>(row, sv, u, NV, last);
          o[u] = V::fma(qi, sv, o[u]);
        }
      }
      float* out = h.out + t * h.out_stride + j0;
      for (int u = 0; u < NV; ++u) st<Part>(out, o[u], u, NV, last);
    }
  }

  template <bool Pack>
  static void recurrent_blocks(const DeltaHead& h, float q_scale) {
    constexpr int64_t W = kNV * L;
    thread_local std::vector<float> pack;
    int64_t j0 = 0;
    for (; j0 + W <= h.dv; j0 += W) {
      if constexpr (Pack) {
        pack.resize(h.dk * W);
        for (int64_t i = 0; i < h.dk; ++i) std::memcpy(&pack[i * W], h.S + i * h.dv + j0, W * sizeof(float));
        recurrent_block<kNV, false>(h, q_scale, pack.data(), W, j0, L);
        for (int64_t i = 0; i < h.dk; ++i) std::memcpy(h.S + i * h.dv + j0, &pack[i * W], W * sizeof(float));
      } else {
        recurrent_block<kNV, false>(h, q_scale, h.S + j0, h.dv, j0, L);
      }
    }
    const int64_t rest = h.dv - j0;
    if (rest == 0) return;
    const int nv = static_cast<int>((rest + L - 1) / L);
    const int64_t last = rest - (nv - 1) * L;
    float* S = h.S + j0;
    const int64_t rs = h.dv;
    if (last < L) {
      switch (nv) {
        case 1: recurrent_block<1, true>(h, q_scale, S, rs, j0, last); break;
        case 2: recurrent_block<2, true>(h, q_scale, S, rs, j0, last); break;
        case 3: recurrent_block<3, true>(h, q_scale, S, rs, j0, last); break;
        default: recurrent_block<4, true>(h, q_scale, S, rs, j0, last); break;
      }
    } else {
      switch (nv) {
        case 1: recurrent_block<1, false>(h, q_scale, S, rs, j0, last); break;
        case 2: recurrent_block<2, false>(h, q_scale, S, rs, j0, last); break;
        case 3: recurrent_block<3, false>(h, q_scale, S, rs, j0, last); break;
        default: recurrent_block<4, false>(h, q_scale, S, rs, j0, last); break;
      }
    }
  }

  // One token (decode) streams the state in place: each element is read once from memory and written once.
  // Several tokens go 64 at a time: their q / sqrt(dk), k and v rows are first gathered into contiguous buffers
  // (read once per column block, they would otherwise be strided misses), and each full column block is copied
  // into a contiguous [dk, W] buffer for those tokens and back: in place, rows of dv = 128 floats put a 64-float
  // block's rows 512 bytes apart, so the block uses half of L1's sets (it spills to L2) and a store to row i
  // stalls the load of row i + 8 (4K aliasing). Neither copy changes a value: a token's arithmetic is the same on
  // both paths, so decode after prefill equals one prefill bit for bit.
  static void recurrent(const DeltaHead& h) {
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(h.dk));
    if (h.n_tokens == 1) {
      recurrent_blocks<false>(h, q_scale);
      return;
    }
    const int64_t dk = h.dk, dv = h.dv, C = kDeltaRuleChunk;
    thread_local std::vector<float> qs, ks, vs, gs, bs;
    qs.resize(C * dk);
    ks.resize(C * dk);
    vs.resize(C * dv);
    gs.resize(C);
    bs.resize(C);
    for (int64_t t0 = 0; t0 < h.n_tokens; t0 += C) {
      const int64_t n = std::min(C, h.n_tokens - t0);
      for (int64_t r = 0; r < n; ++r) {
        scale_row(h.q + (t0 + r) * h.q_stride, q_scale, &qs[r * dk], dk);
        std::memcpy(&ks[r * dk], h.k + (t0 + r) * h.k_stride, dk * sizeof(float));
        std::memcpy(&vs[r * dv], h.v + (t0 + r) * h.v_stride, dv * sizeof(float));
        gs[r] = h.g[(t0 + r) * h.gb_stride];
        bs[r] = h.beta[(t0 + r) * h.gb_stride];
      }
      DeltaHead c = h;
      c.q = qs.data();
      c.k = ks.data();
      c.v = vs.data();
      c.q_stride = c.k_stride = dk;
      c.v_stride = dv;
      c.g = gs.data();
      c.beta = bs.data();
      c.gb_stride = 1;
      c.out = h.out + t0 * h.out_stride;
      c.n_tokens = n;
      recurrent_blocks<true>(c, 1.0f);
    }
  }

  // ---- gemm: C[m][n] = C0[m][n] + sum_{k < K_m} A[m * sam + k * sak] B[k * ldb + n], for m < M, n < N_m, where
  // C0 = 0 (load_c false) or c_scale * C (c_scale 1: C itself). tri_k: K_m = min(K, end of m's 4-row block) (A is
  // zero past the diagonal); lower_n: N_m = min(N, end of m's 4-row block) (only the lower triangle is wanted).
  // Per element: its initial value, then one FMA per k in order (a single row: even and odd k apart, then added);
  // the order depends on the shapes only.
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
    if constexpr (MR == 1) {  // one row (the solve): even and odd k in two FMA chains, added at the end
      R odd[NV];
      for (int u = 0; u < NV; ++u) odd[u] = V::zero();
      int64_t k = 0;
      for (; k + 2 <= K; k += 2) {
        const R a0 = V::set1(a[k * g.sak]), a1 = V::set1(a[(k + 1) * g.sak]);
        for (int u = 0; u < NV; ++u) {
          acc[0][u] = V::fma(a0, ld<Part>(g.B + k * g.ldb + n0, u, NV, last), acc[0][u]);
          odd[u] = V::fma(a1, ld<Part>(g.B + (k + 1) * g.ldb + n0, u, NV, last), odd[u]);
        }
      }
      if (k < K) {
        const R a0 = V::set1(a[k * g.sak]);
        for (int u = 0; u < NV; ++u) acc[0][u] = V::fma(a0, ld<Part>(g.B + k * g.ldb + n0, u, NV, last), acc[0][u]);
      }
      for (int u = 0; u < NV; ++u) acc[0][u] = V::add(acc[0][u], odd[u]);
    } else {
      for (int64_t k = 0; k < K; ++k) {
        R b[NV];
        for (int u = 0; u < NV; ++u) b[u] = ld<Part>(g.B + k * g.ldb + n0, u, NV, last);
        for (int r = 0; r < MR; ++r) {
          const R ar = V::set1(a[r * g.sam + k * g.sak]);
          for (int u = 0; u < NV; ++u) acc[r][u] = V::fma(ar, b[u], acc[r][u]);
        }
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
    const int64_t rest = N - n0;  // tail: fewer vectors, the last one partial
    if (rest == 0) return;
    const int nv = static_cast<int>((rest + L - 1) / L);
    const int64_t last = rest - (nv - 1) * L;
    static_assert(NV <= 4);
    if (last < L) {
      switch (nv) {
        case 1: micro<MR, 1, true>(g, m0, n0, K, last); break;
        case 2: micro<MR, 2, true>(g, m0, n0, K, last); break;
        case 3: micro<MR, 3, true>(g, m0, n0, K, last); break;
        default: micro<MR, 4, true>(g, m0, n0, K, last); break;
      }
    } else {
      switch (nv) {
        case 1: micro<MR, 1, false>(g, m0, n0, K, L); break;
        case 2: micro<MR, 2, false>(g, m0, n0, K, L); break;
        case 3: micro<MR, 3, false>(g, m0, n0, K, L); break;
        default: micro<MR, 4, false>(g, m0, n0, K, L); break;
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

  static constexpr float kFlush = -41.0f;
  static float decay(float x) { return x < kFlush ? 0.0f : std::exp(x); }

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
      // exp(gam_r - gam_j), the difference summed directly (no cancellation of two large cumulative sums, as the
      // ref): row r = row r - 1 + g_r, diagonal 0.
      float* dr = c.dec.data() + r * C;
      const float* dp = c.dec.data() + (r - 1) * C;  // row r - 1 still holds the differences (exp comes after)
      const R gr = V::set1(h.g[(t0 + r) * h.gb_stride]);
      for (int64_t j = 0; j < r; j += L) {
        const int64_t m = r - j < L ? r - j : L;
        store_m<V>(dr + j, V::add(load_m<V>(dp + j, m), gr), m);
      }
      dr[r] = 0.0f;
    }
    for (int64_t r = n - 1; r >= 0; --r) {
      float* dr = c.dec.data() + r * C;
      const R beta = V::set1(h.beta[(t0 + r) * h.gb_stride]);
      float* ar = c.kk.data() + r * C;
      float* pr = c.p.data() + r * C;
      for (int64_t j = 0; j <= r; j += L) {  // dec = exp(diff) (flushed), A = -(beta kk dec), P = qk dec
        const int64_t m = r + 1 - j < L ? r + 1 - j : L;
        const R x = load_m<V>(dr + j, m);
        const R e = V::select(V::lt(x, V::set1(kFlush)), V::zero(), Math<V>::exp(x));
        store_m<V>(dr + j, e, m);
        store_m<V>(ar + j, V::neg(V::mul(V::mul(beta, load_m<V>(ar + j, m)), e)), m);
        store_m<V>(pr + j, V::mul(load_m<V>(pr + j, m), e), m);
      }
      for (int64_t j = r + 1; j < n; ++j) pr[j] = 0.0f;
      const float b = h.beta[(t0 + r) * h.gb_stride];
      float* xr = c.x.data() + r * NX;
      scale_row(h.v + (t0 + r) * h.v_stride, b, xr, dv);
      scale_row(k0 + r * h.k_stride, -(b * decay(c.gam[r])), xr + dv, dk);
    }
    // (I + A) [U | -W] = [beta V | -beta exp(gam) K], forward substitution row by row.
    for (int64_t r = 1; r < n; ++r)
      gemm({1, NX, r, c.kk.data() + r * C, C, 1, c.x.data(), NX, c.x.data() + r * NX, NX, true, 1.0f});
    const float* S = h.S;
    // V' = U - W S; o = exp(gam) (Q S) + P V'; S <- exp(gam_last) S + (dec_last K)^T V'.
    gemm({n, dv, dk, c.x.data() + dv, NX, 1, S, dv, c.x.data(), NX, true, 1.0f});
    for (int64_t r = 0; r < n; ++r) scale_row(c.qe.data() + r * dk, decay(c.gam[r]), c.qe.data() + r * dk, dk);
    float* out = h.out + t0 * h.out_stride;
    gemm({n, dv, dk, c.qe.data(), dk, 1, S, dv, out, h.out_stride, false, 1.0f});
    gemm({n, dv, n, c.p.data(), C, 1, c.x.data(), NX, out, h.out_stride, true, 1.0f, true, false});
    const float* dl = c.dec.data() + (n - 1) * C;
    for (int64_t j = 0; j < n; ++j) scale_row(k0 + j * h.k_stride, dl[j], c.kd.data() + j * dk, dk);
    gemm({dk, dv, n, c.kd.data(), 1, dk, c.x.data(), NX, h.S, dv, true, decay(c.gam[n - 1])});
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
