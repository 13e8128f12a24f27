// The MLA / DSA-indexer kernels (mla.h), written once against a vector policy V (see simd_math.h): interleaved
// RoPE and the indexer's LayerNorm (the ref's operations, element for element), the indexer scores (vectorised over
// key positions so that every score is the ref's scalar operation sequence: bit-identical on every ISA) and the
// absorbed-form attention over the one latent head (AttnSimd's score and value steps, simd_attention.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/kernels.h"
#include "ops/simd/simd_attention.h"
#include "ops/simd/simd_math.h"

namespace tern::ops {
namespace {

// Interleaved-pair rotation: x * (c0, c0, c1, c1, ..) + swap_pairs(x) * (-s0, s0, -s1, s1, ..), two products and
// one add per element; a + b * (-s) is exactly the ref's a - b * s, so every ISA gives the ref's bits. Vectors
// start at even dims (L is even), so a pair never straddles two vectors.
template <class V>
void rope_interleaved_simd(float* x, int64_t n_tokens, int64_t n_head, int64_t head_stride, int64_t off, int64_t half,
                           const float* cs, const float* sn) {
  using R = typename V::R;
  constexpr int64_t L = V::kL;
  const int64_t n = 2 * half;
  thread_local std::vector<float> c2, s2;  // [n]: one token's table, expanded to pairs
  c2.resize(n);
  s2.resize(n);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      c2[2 * j] = c2[2 * j + 1] = cs[t * half + j];
      s2[2 * j] = -sn[t * half + j];
      s2[2 * j + 1] = sn[t * half + j];
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = x + (t * n_head + h) * head_stride + off;
      for (int64_t i = 0; i < n; i += L) {
        const int64_t m = n - i < L ? n - i : L;
        const R a = load_m<V>(v + i, m);
        const R cc = load_m<V>(c2.data() + i, m), ss = load_m<V>(s2.data() + i, m);
        store_m<V>(v + i, V::add(V::mul(a, cc), V::mul(V::swap_pairs(a), ss)), m);
      }
    }
  }
}

template <class V>
struct LayerNormSimd {
  using R = typename V::R;
  static constexpr int64_t L = V::kL;

  // sum x[i] and sum (x[i] - mean)^2 in double: per lane, vectors in order (the deviations' tail in scalar code, so
  // no padding lane adds a (0 - mean)^2); the order depends on n alone.
  static double sum(const float* x, int64_t n) {
    auto a0 = V::dzero(), a1 = V::dzero();
    for (int64_t i = 0; i < n; i += L) {
      const auto v = load_m<V>(x + i, n - i < L ? n - i : L);
      a0 = V::dadd(a0, V::cvt_lo(v));
      a1 = V::dadd(a1, V::cvt_hi(v));
    }
    return V::dhsum(V::dadd(a0, a1));
  }
  static double sum_dev2(const float* x, int64_t n, double mean) {
    const auto neg_mean = V::dset1(-mean);
    auto a0 = V::dzero(), a1 = V::dzero();
    int64_t i = 0;
    for (; i + L <= n; i += L) {
      const auto v = V::load(x + i);
      const auto l = V::dadd(V::cvt_lo(v), neg_mean), h = V::dadd(V::cvt_hi(v), neg_mean);
      a0 = V::dfma(l, l, a0);
      a1 = V::dfma(h, h, a1);
    }
    double s = V::dhsum(V::dadd(a0, a1));
    for (; i < n; ++i) {
      const double d = static_cast<double>(x[i]) - mean;
      s += d * d;
    }
    return s;
  }

  // The ref's statistics (in another summation order), then (x - mean) * inv_std [* w] [+ b] as the ref, no FMA.
  static void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n,
                         float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      const double mean = sum(xr, n) / static_cast<double>(n);
      const double var = sum_dev2(xr, n, mean) / static_cast<double>(n);
      const R m = V::set1(static_cast<float>(mean));
      const R s = V::set1(static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps))));
      for (int64_t i = 0; i < n; i += L) {
        const int64_t k = n - i < L ? n - i : L;
        R v = V::mul(V::sub(load_m<V>(xr + i, k), m), s);
        if (w) v = V::mul(v, load_m<V>(w + i, k));
        if (b) v = V::add(v, load_m<V>(b + i, k));
        store_m<V>(yr + i, v, k);
      }
    }
  }
};

// Indexer scores, vectorised over L key positions: the keys of a block are transposed to kt [dim][L] (f16 converted
// in registers), then per head acc = acc + q[i] * kt[i] (a product and an add, dims ascending: the ref's dot) and
// score = score + w[j] * relu(acc) (heads ascending). max(acc, 0) with 0 as the second operand is the ref's
// acc > 0 ? acc : 0, NaN and -0 included. So each score has the ref's bits on every ISA; up to 4 heads run as
// independent chains (never changes a result). A transposed block serves every token of the task.
template <class V>
struct IndexerSimd {
  using R = typename V::R;
  static constexpr int64_t L = V::kL;

  template <bool F16>
  static void transpose(const IndexerBlock& b, int64_t s, int64_t m, float* kt) {
    const int64_t dim = b.dim;
    alignas(64) float tmp[L];
    const KvRows rows{b.k, dim};
    for (int64_t l = 0; l < L; ++l) {
      if (l >= m) {
        for (int64_t i = 0; i < dim; ++i) kt[i * L + l] = 0.0f;
        continue;
      }
      const void* row = rows.at<F16>(s + l);
      for (int64_t i = 0; i < dim; i += L) {
        const int64_t k = dim - i < L ? dim - i : L;
        V::store(tmp, k == L ? AttnSimd<V>::template ld<F16>(row, i) : AttnSimd<V>::template ld_n<F16>(row, i, k));
        for (int64_t ii = 0; ii < k; ++ii) kt[(i + ii) * L + l] = tmp[ii];
      }
    }
  }

  // score + sum over heads [j0, j0 + NR) of w[j] relu(q[j] . kt), heads in order.
  template <int NR>
  static R heads(const float* q, const float* w, int64_t j0, int64_t dim, const float* kt, R score) {
    R acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = V::zero();
    for (int64_t i = 0; i < dim; ++i) {
      const R k = V::load(kt + i * L);
      for (int r = 0; r < NR; ++r) acc[r] = V::add(acc[r], V::mul(V::set1(q[(j0 + r) * dim + i]), k));
    }
    for (int r = 0; r < NR; ++r) score = V::add(score, V::mul(V::set1(w[j0 + r]), V::max_keep(V::zero(), acc[r])));
    return score;
  }

  template <bool F16>
  static void run(const IndexerBlock& b) {
    thread_local std::vector<float> kt;  // [dim, L]
    kt.resize(b.dim * L);
    const int64_t s_end = std::min(b.s1, b.n_pos0 + b.n_tok - 1);  // the last token's bound
    for (int64_t s = b.s0; s < s_end; s += L) {
      transpose<F16>(b, s, std::min(L, s_end - s), kt.data());
      for (int64_t t = 0; t < b.n_tok; ++t) {
        const int64_t m = std::min(L, std::min(b.n_pos0 + t, b.s1) - s);  // this token's positions in the block
        if (m <= 0) continue;
        const float* q = b.q + t * b.n_head * b.dim;
        const float* w = b.w + t * b.n_head;
        R score = V::zero();
        int64_t j = 0;
        for (; j + 4 <= b.n_head; j += 4) score = heads<4>(q, w, j, b.dim, kt.data(), score);
        switch (b.n_head - j) {
          case 1: score = heads<1>(q, w, j, b.dim, kt.data(), score); break;
          case 2: score = heads<2>(q, w, j, b.dim, kt.data(), score); break;
          case 3: score = heads<3>(q, w, j, b.dim, kt.data(), score); break;
          default: break;
        }
        store_m<V>(b.scores + t * b.score_stride + s, score, m);
      }
    }
  }

  static void scores(const IndexerBlock& b) {
    if (b.f16) {
      run<true>(b);
    } else {
      run<false>(b);
    }
  }
};

// MLA attention of one task: per token, scores of all its query heads (position tiles outer, groups of 4 heads
// inner, so a tile of latent rows is read from memory once for every head), softmax per head, then the value sums
// over the first dv dims of the same rows, tile by tile. Per head the arithmetic is AttnSimd's, whatever the task's
// head count or the tiling.
template <class V>
struct MlaSimd {
  static constexpr int64_t L = V::kL;
  using A = AttnSimd<V>;

  template <int NR, bool F16>
  static void values(const float* sc, int64_t n_pos, const KvRows& rows, int64_t dv, int64_t p0, int64_t p1,
                     const float* inv, float* const* out) {
    const bool first = p0 == 0, last = p1 == n_pos;
    int64_t i = 0;
    for (; i + 2 * L <= dv; i += 2 * L)
      A::template slice<NR, F16, true>(sc, n_pos, rows, i, L, L, p0, p1, first, last, inv, out);
    if (i < dv) {
      const int64_t rest = dv - i;
      A::template slice<NR, F16, false>(sc, n_pos, rows, i, rest < L ? rest : L, rest > L ? rest - L : 0, p0, p1,
                                        first, last, inv, out);
    }
  }

  template <bool F16>
  static void token(const MlaBlock& b, int64_t t, float* sc, float* inv) {
    const int64_t dk = b.dk, dv = b.dv;
    const bool sparse = b.sel != nullptr;
    const int64_t n_pos = sparse ? b.n_sel[t] : b.n_pos0 + t;
    const KvRows rows{b.kv, dk, sparse ? b.sel + t * b.sel_stride : nullptr};
    const float* q[4];
    float* out[4];
    const int64_t tile = std::max<int64_t>(8, 16384 / (dk * (F16 ? 2 : 4)));
    // groups of up to 4 heads: g = j0 / 4, rows q + j * dk, scores sc + j * n_pos
    auto group = [&](int64_t j0) {
      const int64_t nr = std::min<int64_t>(4, b.n_q - j0);
      for (int64_t r = 0; r < nr; ++r) {
        q[r] = b.q + t * b.q_tok_stride + (j0 + r) * dk;
        out[r] = b.out + t * b.out_tok_stride + (j0 + r) * dv;
      }
      return nr;
    };
    for (int64_t p0 = 0; p0 < n_pos; p0 += tile) {
      const int64_t p1 = std::min(n_pos, p0 + tile);
      for (int64_t j0 = 0; j0 < b.n_q; j0 += 4) {
        float* s = sc + j0 * n_pos;
        switch (group(j0)) {
          case 1: A::template scores<1, F16>(q, rows, p0, p1, n_pos, dk, b.scale, s); break;
          case 2: A::template scores<2, F16>(q, rows, p0, p1, n_pos, dk, b.scale, s); break;
          case 3: A::template scores<3, F16>(q, rows, p0, p1, n_pos, dk, b.scale, s); break;
          default: A::template scores<4, F16>(q, rows, p0, p1, n_pos, dk, b.scale, s); break;
        }
      }
    }
    for (int64_t j = 0; j < b.n_q; ++j) inv[j] = static_cast<float>(1.0 / exp_shifted<V>(sc + j * n_pos, n_pos));
    for (int64_t p0 = 0; p0 < n_pos; p0 += tile) {
      const int64_t p1 = std::min(n_pos, p0 + tile);
      for (int64_t j0 = 0; j0 < b.n_q; j0 += 4) {
        const float* s = sc + j0 * n_pos;
        switch (group(j0)) {
          case 1: values<1, F16>(s, n_pos, rows, dv, p0, p1, inv + j0, out); break;
          case 2: values<2, F16>(s, n_pos, rows, dv, p0, p1, inv + j0, out); break;
          case 3: values<3, F16>(s, n_pos, rows, dv, p0, p1, inv + j0, out); break;
          default: values<4, F16>(s, n_pos, rows, dv, p0, p1, inv + j0, out); break;
        }
      }
    }
  }

  // The expanded form (MlaExpBlock): one head, tokens in blocks of 4 that share each key and value row (AttnSimd's
  // score and value steps with tokens as the rows), positions in outer tiles of kOuter rows so that a tile is read
  // from memory once for every block of the task. A block's scores run to its last token's position count n_j; a
  // token with fewer positions gets weight exactly 0 past its own (value sums unchanged), so its result does not
  // depend on the tokens it shares a block with.
  static constexpr int64_t kOuter = 64;

  static int64_t block_rows(const MlaExpBlock& b, int64_t j, const float** q, float** out) {
    const int64_t nr = std::min<int64_t>(4, b.n_tok - 4 * j);
    for (int64_t r = 0; r < nr; ++r) {
      q[r] = b.q + (4 * j + r) * b.q_stride;
      out[r] = b.out + (4 * j + r) * b.out_stride;
    }
    return nr;
  }

  static void attend_expanded(const MlaExpBlock& b) {
    if (b.n_tok <= 0) return;
    const int64_t n_last = b.n_pos0 + b.n_tok - 1, n_blk = (b.n_tok + 3) / 4;
    thread_local std::vector<float> scores, invs;  // block j: [4, n_j] at scores + j * 4 * n_last; [4] at invs + 4j
    if (static_cast<int64_t>(scores.size()) < n_blk * 4 * n_last) scores.resize(n_blk * 4 * n_last);
    invs.resize(n_blk * 4);
    const KvRows k{b.k, b.k_stride}, v{b.v, b.v_stride};
    const int64_t tile = A::l1_rows(b.dv * 4);
    const float* q[4];
    float* out[4];
    auto n_of = [&](int64_t j) { return b.n_pos0 + std::min(4 * j + 3, b.n_tok - 1); };
    for (int64_t p0 = 0; p0 < n_last; p0 += kOuter) {
      for (int64_t j = 0; j < n_blk; ++j) {
        const int64_t n_j = n_of(j), p1 = std::min(n_j, p0 + kOuter);
        if (p0 >= n_j) continue;
        float* sc = scores.data() + j * 4 * n_last;
        switch (block_rows(b, j, q, out)) {
          case 1: A::template scores<1, kFmtF32>(q, k, p0, p1, n_j, b.dk, b.scale, sc); break;
          case 2: A::template scores<2, kFmtF32>(q, k, p0, p1, n_j, b.dk, b.scale, sc); break;
          case 3: A::template scores<3, kFmtF32>(q, k, p0, p1, n_j, b.dk, b.scale, sc); break;
          default: A::template scores<4, kFmtF32>(q, k, p0, p1, n_j, b.dk, b.scale, sc); break;
        }
      }
    }
    for (int64_t j = 0; j < n_blk; ++j) {
      const int64_t n_j = n_of(j);
      for (int64_t r = 0; r < std::min<int64_t>(4, b.n_tok - 4 * j); ++r) {
        float* sc = scores.data() + j * 4 * n_last + r * n_j;
        const int64_t n_r = b.n_pos0 + 4 * j + r;
        invs[4 * j + r] = static_cast<float>(1.0 / exp_shifted<V>(sc, n_r));
        std::fill(sc + n_r, sc + n_j, 0.0f);
      }
    }
    for (int64_t p0 = 0; p0 < n_last; p0 += kOuter) {
      for (int64_t j = 0; j < n_blk; ++j) {
        const int64_t n_j = n_of(j), p1 = std::min(n_j, p0 + kOuter);
        if (p0 >= n_j) continue;
        const float* sc = scores.data() + j * 4 * n_last;
        const float* inv = invs.data() + 4 * j;
        switch (block_rows(b, j, q, out)) {
          case 1: A::template values<1, kFmtF32>(sc, n_j, v, tile, b.dv, p0, p1, inv, out); break;
          case 2: A::template values<2, kFmtF32>(sc, n_j, v, tile, b.dv, p0, p1, inv, out); break;
          case 3: A::template values<3, kFmtF32>(sc, n_j, v, tile, b.dv, p0, p1, inv, out); break;
          default: A::template values<4, kFmtF32>(sc, n_j, v, tile, b.dv, p0, p1, inv, out); break;
        }
      }
    }
  }

  static void attend(const MlaBlock& b) {
    thread_local std::vector<float> sc, inv;  // [n_q, n_pos] scores, [n_q] 1 / sum
    inv.resize(b.n_q);
    for (int64_t t = 0; t < b.n_tok; ++t) {
      const int64_t n_pos = b.sel ? b.n_sel[t] : b.n_pos0 + t;
      if (static_cast<int64_t>(sc.size()) < b.n_q * n_pos) sc.resize(b.n_q * n_pos);
      if (b.f16) {
        token<true>(b, t, sc.data(), inv.data());
      } else {
        token<false>(b, t, sc.data(), inv.data());
      }
    }
  }
};

}  // namespace
}  // namespace tern::ops
