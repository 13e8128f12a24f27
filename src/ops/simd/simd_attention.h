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
#include <cstring>
#include <vector>

#include "core/fp16.h"

#include "ops/kernels.h"
#include "ops/simd/simd_math.h"

namespace tern::ops {
namespace {

// Row formats the kernels read (a template argument; `bool F16` converts to kFmtF32 / kFmtF16).
constexpr int kFmtF32 = 0, kFmtF16 = 1, kFmtQ8 = 2, kFmtQ4 = 3;
constexpr int fmt_of(KvType t) {
  return t == KvType::kF32 ? kFmtF32 : t == KvType::kF16 ? kFmtF16 : t == KvType::kQ8_0 ? kFmtQ8 : kFmtQ4;
}

// Cache rows as the kernels read them: logical position p is row idx ? idx[p] : p of base, rows `stride` elements
// apart (f32 / f16), or `stride` bytes apart (the block formats).
struct KvRows {
  const void* base;
  int64_t stride;
  const int32_t* idx = nullptr;
  int64_t first = 0;  // base holds rows from this one on (a decoded tile)
  template <int F>
  const void* at(int64_t p) const {
    const int64_t row = (idx ? idx[p] : p) - first;
    return static_cast<const char*>(base) + row * stride * (F == kFmtF32 ? 4 : F == kFmtF16 ? 2 : 1);
  }
};

template <class V>
struct AttnSimd {
  using R = typename V::R;
  static constexpr int64_t L = V::kL;

  // Elements [i, i + L) of an f32 / f16 row (the block formats are read by quantized<> below).
  template <int F>
  static R ld(const void* row, int64_t i) {
    static_assert(F == kFmtF32 || F == kFmtF16);
    if constexpr (F == kFmtF16) {
      return V::load_h(static_cast<const uint16_t*>(row) + i);
    } else {
      return V::load(static_cast<const float*>(row) + i);
    }
  }
  template <int F>
  static R ld_n(const void* row, int64_t i, int64_t m) {
    static_assert(F == kFmtF32 || F == kFmtF16);
    if constexpr (F == kFmtF16) {
      return V::load_h_n(static_cast<const uint16_t*>(row) + i, m);
    } else {
      return V::load_n(static_cast<const float*>(row) + i, m, 0.0f);
    }
  }
  // sc[r * n_pos + p] = scale * (q[r] . K[p][0, hd)) for rows r < NR, positions p in [p0, p1).
  template <int NR, int F16>
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
  template <int NR, int F16, bool Full>
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

  // Positions [p0, p1) of the value sums of all head_dim slices, in tiles of ~16 KiB of rows: each tile is read
  // from memory once and then from L1 for every slice (a long context's V does not fit in L2; slices over all
  // positions would stream it hd / 2L times).
  template <int NR, int F>
  static void values(const float* sc, int64_t n_pos, const KvRows& v, int64_t row_bytes, int64_t hd, int64_t p0,
                     int64_t p1, const float* inv, float* const* out) {
    const int64_t tile = std::max<int64_t>(8, 16384 / row_bytes);
    for (int64_t t0 = p0; t0 < p1; t0 += tile) {
      const int64_t t1 = std::min(p1, t0 + tile);
      const bool first = t0 == 0, last = t1 == n_pos;
      int64_t i = 0;
      for (; i + 2 * L <= hd; i += 2 * L) slice<NR, F, true>(sc, n_pos, v, i, L, L, t0, t1, first, last, inv, out);
      if (i < hd) {
        const int64_t rest = hd - i;
        slice<NR, F, false>(sc, n_pos, v, i, rest < L ? rest : L, rest > L ? rest - L : 0, t0, t1, first, last, inv,
                            out);
      }
    }
  }

  // The query rows' positions in order as runs of one store: [0, a) shadow, [a, c) main, [c, n_pos) shadow, where
  // a = min(sink, n_pos) and c = max(a, n_pos - window); all main without a shadow.
  struct Runs {
    int64_t a, c;
  };
  static Runs runs(const AttnBlock& b, const uint16_t* shadow, int64_t n_pos) {
    if (!shadow) return {0, n_pos};
    const int64_t a = std::min(b.sink, n_pos);
    return {a, std::max(a, n_pos - b.window)};
  }

  // Block formats. Scores: per block of 32, the query times the block's codes (as floats, exact), then times the
  // block's scale d once; value sums: the weight w_p times d once per block and position, times the codes. The same
  // products as the scalar twin's d * q in another rounding order (tests/ops: NMSE ~1e-14 against it). A one-token
  // task converts codes as it reads them (direct); a task of several tokens converts a tile of kTile rows' codes
  // into f32 scratch once and reads them from there for all its tokens and heads (tiled). Both do the same
  // operations in the same order per (token, head), so a batch still equals its tokens one by one.
  static constexpr int64_t kTile = 128;
  static constexpr int64_t block_bytes(int F) { return F == kFmtQ8 ? 34 : 18; }
  static float scale_of(const uint8_t* blk) {
    uint16_t d;
    std::memcpy(&d, blk, 2);
    return V::h2f(d);
  }
  template <int F>
  static void block_codes(const uint8_t* blk, R* c) {  // the 32 codes (q8_0: q; q4_0: nibble - 8), 32 / L vectors
    if constexpr (F == kFmtQ8) {
      for (int64_t u = 0; u < 32 / L; ++u) c[u] = V::load_i8(reinterpret_cast<const int8_t*>(blk + 2 + u * L));
    } else {
      V::load_q4(blk + 2, c);
    }
  }
  // Where a kernel reads rows' codes and scales: straight from the blocks, or from a converted tile.
  template <int F>
  struct Direct {
    const KvRows& rows;
    const uint8_t* row(int64_t p) const { return static_cast<const uint8_t*>(rows.template at<F>(p)); }
    void codes(int64_t p, int64_t b, R* c) const { block_codes<F>(row(p) + b / 32 * block_bytes(F), c); }
    void codes2(int64_t p, int64_t b, int64_t u0, R* c) const {  // vectors u0, u0 + 1 of the block's codes
      const uint8_t* blk = row(p) + b / 32 * block_bytes(F);
      if constexpr (F == kFmtQ8) {
        c[0] = V::load_i8(reinterpret_cast<const int8_t*>(blk + 2 + u0 * L));
        c[1] = V::load_i8(reinterpret_cast<const int8_t*>(blk + 2 + (u0 + 1) * L));
      } else {
        V::load_q4_pair(blk + 2, u0, c);
      }
    }
    float scale(int64_t p, int64_t b) const { return scale_of(row(p) + b / 32 * block_bytes(F)); }
    // The scales of positions [p0, p1), block-major: [block][p - p0] at the returned pointer, rows *ld apart.
    const float* scale_rows(int64_t p0, int64_t p1, int64_t hd, std::vector<float>& buf, int64_t* ld) const {
      const int64_t n = p1 - p0;
      buf.resize(static_cast<size_t>(hd / 32 * n));
      for (int64_t p = p0; p < p1; ++p) {
        const uint8_t* blk = row(p);
        for (int64_t b = 0; b < hd / 32; ++b) buf[b * n + p - p0] = scale_of(blk + b * block_bytes(F));
      }
      *ld = n;
      return buf.data();
    }
  };
  struct Tiled {
    const uint16_t* codes_f;  // [p - p0][hd], as halves (the codes are small integers: exact)
    const float* scales;   // [block][p - p0], rows kTile apart
    int64_t p0, hd;
    void codes(int64_t p, int64_t b, R* c) const {
      const uint16_t* r = codes_f + (p - p0) * hd + b;
      for (int64_t u = 0; u < 32 / L; ++u) c[u] = V::load_h(r + u * L);
    }
    void codes2(int64_t p, int64_t b, int64_t u0, R* c) const {
      const uint16_t* r = codes_f + (p - p0) * hd + b + u0 * L;
      c[0] = V::load_h(r);
      c[1] = V::load_h(r + L);
    }
    float scale(int64_t p, int64_t b) const { return scales[b / 32 * kTile + p - p0]; }
    const float* scale_rows(int64_t s0, int64_t, int64_t, std::vector<float>&, int64_t* ld) const {
      *ld = kTile;
      return scales + (s0 - p0);
    }
  };
  template <int F>
  static void convert_tile(const KvRows& rows, int64_t p0, int64_t p1, int64_t hd, uint16_t* codes_f, float* scales) {
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* blk = static_cast<const uint8_t*>(rows.template at<F>(p));
      for (int64_t b = 0; b < hd; b += 32, blk += block_bytes(F)) {
        R c[32 / L];
        block_codes<F>(blk, c);
        for (int64_t u = 0; u < 32 / L; ++u) V::store_h(codes_f + b + u * L, c[u]);
        scales[b / 32 * kTile + p - p0] = scale_of(blk);
      }
      codes_f += hd;
    }
  }

  template <int NR, class Src>
  static void scores_q(const float* const* q, const Src& src, int64_t p0, int64_t p1, int64_t n_pos, int64_t hd,
                       float scale, float* sc) {
    for (int64_t p = p0; p < p1; ++p) {
      R acc[NR];
      for (int r = 0; r < NR; ++r) acc[r] = V::zero();
      for (int64_t b = 0; b < hd; b += 32) {
        R c[32 / L];
        src.codes(p, b, c);
        R s0[NR], s1[NR];
        for (int r = 0; r < NR; ++r) s0[r] = s1[r] = V::zero();
        for (int64_t u = 0; u < 32 / L; u += 2) {
          for (int r = 0; r < NR; ++r) {
            s0[r] = V::fma(V::load(q[r] + b + u * L), c[u], s0[r]);
            s1[r] = V::fma(V::load(q[r] + b + (u + 1) * L), c[u + 1], s1[r]);
          }
        }
        const R d = V::set1(src.scale(p, b));
        for (int r = 0; r < NR; ++r) acc[r] = V::fma(d, V::add(s0[r], s1[r]), acc[r]);
      }
      for (int r = 0; r < NR; ++r) sc[r * n_pos + p] = V::hsum(acc[r]) * scale;
    }
  }

  // Positions [p0, p1) of the value sums (first: from 0; last: then times inv), per block of 32 columns: the
  // weights times the rows' block scales first (wd = w_p * d, one product each), then wd times the codes.
  template <int NR, class Src>
  static void values_q(const float* sc, int64_t n_pos, const Src& src, int64_t hd, int64_t p0, int64_t p1,
                       bool first, bool last, const float* inv, float* const* out) {
    constexpr int64_t U = 32 / L;
    const int64_t nb = hd / 32, n = p1 - p0;
    thread_local std::vector<float> wd, dbuf;  // wd: [block][row][position]
    int64_t ld = 0;
    const float* dt = src.scale_rows(p0, p1, hd, dbuf, &ld);
    wd.resize(static_cast<size_t>(nb * NR * n));
    for (int64_t b = 0; b < nb; ++b)
      for (int r = 0; r < NR; ++r) {
        const float* w = sc + r * n_pos + p0;
        const float* d = dt + b * ld;
        float* o = wd.data() + (b * NR + r) * n;
        int64_t i = 0;
        for (; i + L <= n; i += L) V::store(o + i, V::mul(V::load(w + i), V::load(d + i)));
        for (; i < n; ++i) o[i] = w[i] * d[i];
      }
    for (int64_t b = 0; b < hd; b += 32) {
      const float* wb = wd.data() + b / 32 * NR * n;
      for (int64_t u0 = 0; u0 < U; u0 += 2) {  // two vectors of accumulators per row at a time
        R acc[NR][2];
        for (int r = 0; r < NR; ++r) {
          if (first) {
            acc[r][0] = acc[r][1] = V::zero();
          } else {
            acc[r][0] = V::load(out[r] + b + u0 * L);
            acc[r][1] = V::load(out[r] + b + (u0 + 1) * L);
          }
        }
        for (int64_t p = p0; p < p1; ++p) {
          R c[2];
          src.codes2(p, b, u0, c);
          for (int r = 0; r < NR; ++r) {
            const R wr = V::set1(wb[r * n + p - p0]);
            acc[r][0] = V::fma(wr, c[0], acc[r][0]);
            acc[r][1] = V::fma(wr, c[1], acc[r][1]);
          }
        }
        for (int r = 0; r < NR; ++r) {
          R o0 = acc[r][0], o1 = acc[r][1];
          if (last) {
            o0 = V::mul(o0, V::set1(inv[r]));
            o1 = V::mul(o1, V::set1(inv[r]));
          }
          V::store(out[r] + b + u0 * L, o0);
          V::store(out[r] + b + (u0 + 1) * L, o1);
        }
      }
    }
  }

  // The runs [s0, s1) of positions [p0, p1) a query reads from one store (Runs): fn(s0, s1, from_shadow).
  template <class Fn>
  static void split(int64_t p0, int64_t p1, const Runs& r, bool has_shadow, Fn&& fn) {
    if (!has_shadow) {
      if (p0 < p1) fn(p0, p1, false);
      return;
    }
    const int64_t cut[4] = {0, r.a, r.c, INT64_MAX};
    for (int i = 0; i < 3; ++i) {
      const int64_t s0 = std::max(p0, cut[i]), s1 = std::min(p1, cut[i + 1]);
      if (s0 < s1) fn(s0, s1, i != 1);
    }
  }

  // One store's share of a query's scores / value sums over [s0, s1): the shadow (f16), a plain store, or blocks.
  template <int NR, int F, class Src>
  static void score_run(const float* const* q, const KvRows& rows, const Src& src, int64_t s0, int64_t s1,
                        int64_t stride, int64_t hd, float scale, float* sc) {
    if constexpr (F >= kFmtQ8) scores_q<NR>(q, src, s0, s1, stride, hd, scale, sc);
    else scores<NR, F>(q, rows, s0, s1, stride, hd, scale, sc);
  }
  template <int NR, int F, class Src>
  static void value_run(const float* sc, int64_t stride, const KvRows& rows, const Src& src, int64_t hd, int64_t s0,
                        int64_t s1, bool first, bool last, const float* inv, float* const* out) {
    if constexpr (F >= kFmtQ8) {
      values_q<NR>(sc, stride, src, hd, s0, s1, first, last, inv, out);
    } else {
      for (int64_t i = 0; i < hd; i += 2 * L) slice<NR, F, true>(sc, stride, rows, i, L, L, s0, s1, first, last, inv, out);
    }
  }

  // A task of one or more tokens over caches with at least one block format (head_dim % 32 == 0).
  template <int NR, int FK, int FV>
  static void quantized(const AttnBlock& b) {
    const int64_t hd = b.head_dim, n_max = b.n_pos0 + b.n_tok - 1;
    const bool tile = b.n_tok > 1;
    thread_local std::vector<float> sc, scales, inv;
    thread_local std::vector<uint16_t> codes_f;
    sc.resize(static_cast<size_t>(b.n_tok * NR * n_max));
    inv.resize(static_cast<size_t>(b.n_tok * NR));
    if (tile) {
      codes_f.resize(static_cast<size_t>(kTile * hd));
      scales.resize(static_cast<size_t>(kTile * hd / 32));
    }
    const KvRows k{b.k, FK >= kFmtQ8 ? kv_row_bytes(b.k_type, hd) : hd},
        v{b.v, FV >= kFmtQ8 ? kv_row_bytes(b.v_type, hd) : hd}, k16{b.k16, hd}, v16{b.v16, hd};
    const Direct<FK> dk{k};
    const Direct<FV> dv{v};
    auto rows_of = [&](int64_t t, const float** q, float** out) {
      for (int r = 0; r < NR; ++r) {
        q[r] = b.q + t * b.tok_stride + r * hd;
        out[r] = b.out + t * b.tok_stride + r * hd;
      }
    };
    // Scores of every token, tile by tile of positions.
    const int64_t step = tile ? kTile : std::max<int64_t>(n_max, 1);
    for (int64_t p0 = 0; p0 < n_max; p0 += step) {
      const int64_t p1 = std::min(n_max, p0 + step);
      if constexpr (FK >= kFmtQ8)
        if (tile) convert_tile<FK>(k, p0, p1, hd, codes_f.data(), scales.data());
      const Tiled tk{codes_f.data(), scales.data(), p0, hd};
      for (int64_t t = 0; t < b.n_tok; ++t) {
        const int64_t n_pos = b.n_pos0 + t;
        if (p0 >= n_pos) continue;
        const float* q[NR];
        float* out[NR];
        rows_of(t, q, out);
        float* st = sc.data() + t * NR * n_max;
        split(p0, std::min(p1, n_pos), runs(b, b.k16, n_pos), b.k16 != nullptr, [&](int64_t s0, int64_t s1, bool sh) {
          if (sh) scores<NR, kFmtF16>(q, k16, s0, s1, n_max, hd, b.scale, st);
          else if (tile) score_run<NR, FK>(q, k, tk, s0, s1, n_max, hd, b.scale, st);
          else score_run<NR, FK>(q, k, dk, s0, s1, n_max, hd, b.scale, st);
        });
      }
    }
    for (int64_t t = 0; t < b.n_tok; ++t)
      for (int r = 0; r < NR; ++r)
        inv[t * NR + r] = static_cast<float>(1.0 / exp_shifted<V>(sc.data() + (t * NR + r) * n_max, b.n_pos0 + t));
    // Value sums, tile by tile of positions (each element's sum runs over the positions in order); direct, in tiles
    // of ~16 KiB of rows, read from memory once and then from L1 for every block of columns.
    const int64_t vstep = tile ? kTile : std::max<int64_t>(8, 16384 / kv_row_bytes(b.v_type, hd));
    for (int64_t p0 = 0; p0 < n_max; p0 += vstep) {
      const int64_t p1 = std::min(n_max, p0 + vstep);
      if constexpr (FV >= kFmtQ8)
        if (tile) convert_tile<FV>(v, p0, p1, hd, codes_f.data(), scales.data());
      const Tiled tv{codes_f.data(), scales.data(), p0, hd};
      for (int64_t t = 0; t < b.n_tok; ++t) {
        const int64_t n_pos = b.n_pos0 + t;
        if (p0 >= n_pos) continue;
        const float* q[NR];
        float* out[NR];
        rows_of(t, q, out);
        const float* st = sc.data() + t * NR * n_max;
        const float* in = &inv[t * NR];
        split(p0, std::min(p1, n_pos), runs(b, b.v16, n_pos), b.v16 != nullptr, [&](int64_t s0, int64_t s1, bool sh) {
          const bool first = s0 == 0, last = s1 == n_pos;
          if (sh) value_run<NR, kFmtF16>(st, n_max, v16, dv, hd, s0, s1, first, last, in, out);
          else if (tile) value_run<NR, FV>(st, n_max, v, tv, hd, s0, s1, first, last, in, out);
          else value_run<NR, FV>(st, n_max, v, dv, hd, s0, s1, first, last, in, out);
        });
      }
    }
  }

  template <int NR, int FK, int FV>
  static void rows(const float* const* q, float* const* out, const AttnBlock& b, int64_t n_pos, float* sc) {
    // f32 / f16 rows only (block formats go through quantized<>), so there is no shadow here.
    const int64_t hd = b.head_dim;
    const KvRows k{b.k, hd}, v{b.v, hd};
    scores<NR, FK>(q, k, 0, n_pos, n_pos, hd, b.scale, sc);
    float inv[NR];
    for (int r = 0; r < NR; ++r) inv[r] = static_cast<float>(1.0 / exp_shifted<V>(sc + r * n_pos, n_pos));
    values<NR, FV>(sc, n_pos, v, kv_row_bytes(b.v_type, hd), hd, 0, n_pos, inv, out);
  }

  template <int FK, int FV>
  static void block(const AttnBlock& b) {
    if constexpr (FK >= kFmtQ8 || FV >= kFmtQ8) {
      switch (b.n_q) {
        case 1: quantized<1, FK, FV>(b); break;
        case 2: quantized<2, FK, FV>(b); break;
        case 3: quantized<3, FK, FV>(b); break;
        default: quantized<4, FK, FV>(b); break;  // a task has at most 4 heads (attention.cpp)
      }
    } else {
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
            case 1: rows<1, FK, FV>(q, out, b, n_pos, sc.data()); break;
            case 2: rows<2, FK, FV>(q, out, b, n_pos, sc.data()); break;
            case 3: rows<3, FK, FV>(q, out, b, n_pos, sc.data()); break;
            default: rows<4, FK, FV>(q, out, b, n_pos, sc.data()); break;
          }
        }
      }
    }
  }

  template <int FK>
  static void attend_k(const AttnBlock& b) {
    switch (fmt_of(b.v_type)) {
      case kFmtF32: block<FK, kFmtF32>(b); break;
      case kFmtF16: block<FK, kFmtF16>(b); break;
      case kFmtQ8: block<FK, kFmtQ8>(b); break;
      default: block<FK, kFmtQ4>(b); break;
    }
  }

  static void attend(const AttnBlock& b) {
    switch (fmt_of(b.k_type)) {
      case kFmtF32: attend_k<kFmtF32>(b); break;
      case kFmtF16: attend_k<kFmtF16>(b); break;
      case kFmtQ8: attend_k<kFmtQ8>(b); break;
      default: attend_k<kFmtQ4>(b); break;
    }
  }

  // Rows of x [n_rows, n] times the orthonormal Walsh-Hadamard matrix: the scalar twin's butterflies, each element
  // the same a + c / a - c and final product, so the result is the twin's bit for bit.
  static void hadamard(float* x, int64_t n_rows, int64_t n) {
    const float norm = 1.0f / std::sqrt(static_cast<float>(n));
    for (int64_t r = 0; r < n_rows; ++r, x += n) {
      for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h) {
          if (h >= L) {
            for (int64_t j = i; j < i + h; j += L) {
              const R a = V::load(x + j), c = V::load(x + j + h);
              V::store(x + j, V::add(a, c));
              V::store(x + j + h, V::sub(a, c));
            }
          } else {
            for (int64_t j = i; j < i + h; ++j) {
              const float a = x[j], c = x[j + h];
              x[j] = a + c;
              x[j + h] = a - c;
            }
          }
        }
      int64_t i = 0;
      for (; i + L <= n; i += L) V::store(x + i, V::mul(V::load(x + i), V::set1(norm)));
      for (; i < n; ++i) x[i] *= norm;
    }
  }
};

}  // namespace
}  // namespace tern::ops
