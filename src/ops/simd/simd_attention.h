// Causal attention for one task (AttnBlock: query tokens x up to 4 heads sharing a KV head), written once against a
// vector policy V (see simd_math.h). Per (token, head) row: scores q . K[p] (two accumulators over head_dim, order
// fixed by head_dim), softmax with a double sum, then sum_p w_p V[p] with per-lane accumulators in position order;
// K and V rows are loaded (f16: converted in registers) once for all heads of the token. The arithmetic of a row
// never depends on how many rows share the loads or how positions are tiled, so blocking never changes a result.
// The score and value steps read rows through KvRows (a row stride and an optional position list), so the MLA
// kernel (simd_mla.h: values = the first dv dims of the key rows, sparse key sets) runs the same arithmetic.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/kernels.h"
#include "ops/simd/simd_math.h"

namespace tern::ops {
namespace {

// Cache rows as the kernels read them: logical position p is row idx ? idx[p] : p of base, rows `stride` elements
// apart (f32, or f16 when F16).
struct KvRows {
  const void* base;
  int64_t stride;
  const int32_t* idx = nullptr;
  template <bool F16>
  const void* at(int64_t p) const {
    const int64_t row = idx ? idx[p] : p;
    return static_cast<const char*>(base) + row * stride * (F16 ? 2 : 4);
  }
};

template <class V>
struct AttnSimd {
  using R = typename V::R;
  static constexpr int64_t L = V::kL;

  template <bool F16>
  static R ld(const void* row, int64_t i) {
    if constexpr (F16) {
      return V::load_h(static_cast<const uint16_t*>(row) + i);
    } else {
      return V::load(static_cast<const float*>(row) + i);
    }
  }
  template <bool F16>
  static R ld_n(const void* row, int64_t i, int64_t m) {
    if constexpr (F16) {
      return V::load_h_n(static_cast<const uint16_t*>(row) + i, m);
    } else {
      return V::load_n(static_cast<const float*>(row) + i, m, 0.0f);
    }
  }
  // sc[r * n_pos + p] = scale * (q[r] . K[p][0, hd)) for rows r < NR, positions p in [p0, p1).
  template <int NR, bool F16>
  static void scores(const float* const* q, const KvRows& k, int64_t p0, int64_t p1, int64_t n_pos, int64_t hd,
                     float scale, float* sc) {
    for (int64_t p = p0; p < p1; ++p) {
      const void* kr = k.at<F16>(p);
      R a0[NR], a1[NR];
      for (int r = 0; r < NR; ++r) a0[r] = a1[r] = V::zero();
      int64_t i = 0;
      for (; i + 2 * L <= hd; i += 2 * L) {
        const R k0 = ld<F16>(kr, i), k1 = ld<F16>(kr, i + L);
        for (int r = 0; r < NR; ++r) {
          a0[r] = V::fma(V::load(q[r] + i), k0, a0[r]);
          a1[r] = V::fma(V::load(q[r] + i + L), k1, a1[r]);
        }
      }
      if (i + L <= hd) {
        const R k0 = ld<F16>(kr, i);
        for (int r = 0; r < NR; ++r) a0[r] = V::fma(V::load(q[r] + i), k0, a0[r]);
        i += L;
      }
      if (i < hd) {
        const R k1 = ld_n<F16>(kr, i, hd - i);
        for (int r = 0; r < NR; ++r) a1[r] = V::fma(V::load_n(q[r] + i, hd - i, 0.0f), k1, a1[r]);
      }
      for (int r = 0; r < NR; ++r) sc[r * n_pos + p] = V::hsum(V::add(a0[r], a1[r])) * scale;
    }
  }

  // Positions [p0, p1) of out[r][i0, i0 + 2L) += sc[r][p] V[p][i0, ...) (first: from 0; last: then times inv[r]);
  // m0, m1: valid lanes of the two vectors. Each element's sum runs over p in order however positions are tiled.
  template <int NR, bool F16, bool Full>
  static void slice(const float* sc, int64_t n_pos, const KvRows& v, int64_t i0, int64_t m0, int64_t m1, int64_t p0,
                    int64_t p1, bool first, bool last, const float* inv, float* const* out) {
    R acc[NR][2];
    for (int r = 0; r < NR; ++r) {
      if (first) {
        acc[r][0] = acc[r][1] = V::zero();
      } else if constexpr (Full) {
        acc[r][0] = V::load(out[r] + i0);
        acc[r][1] = V::load(out[r] + i0 + L);
      } else {
        acc[r][0] = V::load_n(out[r] + i0, m0, 0.0f);
        acc[r][1] = m1 > 0 ? V::load_n(out[r] + i0 + L, m1, 0.0f) : V::zero();
      }
    }
    for (int64_t p = p0; p < p1; ++p) {
      const void* vr = v.at<F16>(p);
      R v0, v1;
      if constexpr (Full) {
        v0 = ld<F16>(vr, i0);
        v1 = ld<F16>(vr, i0 + L);
      } else {
        v0 = ld_n<F16>(vr, i0, m0);
        v1 = m1 > 0 ? ld_n<F16>(vr, i0 + L, m1) : V::zero();
      }
      for (int r = 0; r < NR; ++r) {
        const R w = V::set1(sc[r * n_pos + p]);
        acc[r][0] = V::fma(w, v0, acc[r][0]);
        acc[r][1] = V::fma(w, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < NR; ++r) {
      const R s = V::set1(last ? inv[r] : 1.0f);
      R o0 = acc[r][0], o1 = acc[r][1];
      if (last) {
        o0 = V::mul(o0, s);
        o1 = V::mul(o1, s);
      }
      if constexpr (Full) {
        V::store(out[r] + i0, o0);
        V::store(out[r] + i0 + L, o1);
      } else {
        V::store_n(out[r] + i0, o0, m0);
        if (m1 > 0) V::store_n(out[r] + i0 + L, o1, m1);
      }
    }
  }

  template <int NR, bool F16>
  static void rows(const float* const* q, float* const* out, const AttnBlock& b, int64_t n_pos, float* sc) {
    const int64_t hd = b.head_dim;
    const KvRows k{b.k, hd}, v{b.v, hd};
    scores<NR, F16>(q, k, 0, n_pos, n_pos, hd, b.scale, sc);
    float inv[NR];
    for (int r = 0; r < NR; ++r) inv[r] = static_cast<float>(1.0 / exp_shifted<V>(sc + r * n_pos, n_pos));
    // V in tiles of ~16 KiB of rows, each tile read from memory once and then from L1 for every slice of
    // head_dim (a long context's V does not fit in L2; slices over all positions would stream it hd / 2L times).
    const int64_t tile = std::max<int64_t>(8, 16384 / (hd * (F16 ? 2 : 4)));
    for (int64_t p0 = 0; p0 < n_pos; p0 += tile) {
      const int64_t p1 = std::min(n_pos, p0 + tile);
      const bool first = p0 == 0, last = p1 == n_pos;
      int64_t i = 0;
      for (; i + 2 * L <= hd; i += 2 * L)
        slice<NR, F16, true>(sc, n_pos, v, i, L, L, p0, p1, first, last, inv, out);
      if (i < hd) {
        const int64_t rest = hd - i;
        slice<NR, F16, false>(sc, n_pos, v, i, rest < L ? rest : L, rest > L ? rest - L : 0, p0, p1, first, last,
                              inv, out);
      }
    }
  }

  template <bool F16>
  static void block(const AttnBlock& b) {
    thread_local std::vector<float> sc;
    for (int64_t t = 0; t < b.n_tok; ++t) {
      const int64_t n_pos = b.n_pos0 + t;
      if (static_cast<int64_t>(sc.size()) < 4 * n_pos) sc.resize(4 * n_pos);
      for (int64_t j0 = 0; j0 < b.n_q; j0 += 4) {
        const int64_t nr = b.n_q - j0 < 4 ? b.n_q - j0 : 4;
        const float* q[4];
        float* out[4];
        for (int64_t r = 0; r < nr; ++r) {
          q[r] = b.q + t * b.tok_stride + (j0 + r) * b.head_dim;
          out[r] = b.out + t * b.tok_stride + (j0 + r) * b.head_dim;
        }
        switch (nr) {
          case 1: rows<1, F16>(q, out, b, n_pos, sc.data()); break;
          case 2: rows<2, F16>(q, out, b, n_pos, sc.data()); break;
          case 3: rows<3, F16>(q, out, b, n_pos, sc.data()); break;
          default: rows<4, F16>(q, out, b, n_pos, sc.data()); break;
        }
      }
    }
  }

  static void attend(const AttnBlock& b) {
    if (b.f16) {
      block<true>(b);
    } else {
      block<false>(b);
    }
  }
};

}  // namespace
}  // namespace tern::ops
