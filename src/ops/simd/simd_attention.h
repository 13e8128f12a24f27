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
  bool decoded = false;  // a decoded tile (no rows beyond it to ask for)
  template <int F>
  static constexpr int64_t unit() {  // bytes of one unit of stride
    return F == kFmtF32 ? 4 : F == kFmtF16 ? 2 : 1;
  }
  template <int F>
  static int64_t row_bytes(int64_t hd) {  // bytes of one row of hd elements
    if constexpr (F == kFmtF32 || F == kFmtF16) return hd * unit<F>();
    return kv_row_bytes(F == kFmtQ8 ? KvType::kQ8_0 : KvType::kQ4_0, hd);
  }
  template <int F>
  const void* at(int64_t p) const {
    const int64_t row = (idx ? idx[p] : p) - first;
    return static_cast<const char*>(base) + row * stride * unit<F>();
  }
  // Asks for the cache lines of row p + kAhead (into L2) when it exists (p + kAhead < n_pos) and the rows are the
  // cache's own in position order (not a decoded tile or a list of positions): a long context's rows come from
  // memory, a tile of them is read for several groups of query heads in turn, and without this the memory sits idle
  // while the later groups run (micro-benchmark, rows from DRAM: ~10-20% less time than 12 rows ahead or none).
  // Never changes a result.
  static constexpr int64_t kAhead = 64;
  template <int F>
  void prefetch(int64_t p, int64_t n_pos, int64_t row_bytes) const {
    if (idx || decoded || p + kAhead >= n_pos) return;
    const char* r = static_cast<const char*>(at<F>(p + kAhead));
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(r + b, 0, 2);
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
  // Block formats (q8_0 / q4_0, blocks of 32): elements [i, i + 2L) of a row as floats d * q, exact in f32 (an
  // f16 scale times a code of at most 8 bits), so the arithmetic downstream is the f32 path's on the twin's
  // decoded row. 2L divides 32, so a pair never straddles two blocks.
  static float scale_of(const uint8_t* blk) {
    uint16_t d;
    std::memcpy(&d, blk, 2);
    return V::h2f(d);
  }
  template <int F>
  static void ld2(const void* row, int64_t i, R* k) {
    if constexpr (F == kFmtF32 || F == kFmtF16) {
      k[0] = ld<F>(row, i);
      k[1] = ld<F>(row, i + L);
    } else {
      const uint8_t* blk = static_cast<const uint8_t*>(row) + i / 32 * (F == kFmtQ8 ? 34 : 18);
      const int64_t u0 = i % 32 / L;
      const R d = V::set1(scale_of(blk));
      if constexpr (F == kFmtQ8) {
        k[0] = V::load_i8(reinterpret_cast<const int8_t*>(blk + 2 + u0 * L));
        k[1] = V::load_i8(reinterpret_cast<const int8_t*>(blk + 2 + (u0 + 1) * L));
      } else {
        V::load_q4_pair(blk + 2, u0, k);
      }
      k[0] = V::mul(k[0], d);
      k[1] = V::mul(k[1], d);
    }
  }

  // sc[r * n_pos + p] = scale * (q[r] . K[p][0, hd)) for rows r < NR, positions p in [p0, p1).
  template <int NR, int F16>
  static void scores(const float* const* q, const KvRows& k, int64_t p0, int64_t p1, int64_t n_pos, int64_t hd,
                     float scale, float* sc) {
    const int64_t rb = KvRows::row_bytes<F16>(hd);
    for (int64_t p = p0; p < p1; ++p) {
      k.prefetch<F16>(p, n_pos, rb);
      const void* kr = k.at<F16>(p);
      R a0[NR], a1[NR];
      for (int r = 0; r < NR; ++r) a0[r] = a1[r] = V::zero();
      int64_t i = 0;
      for (; i + 2 * L <= hd; i += 2 * L) {
        R kk[2];
        ld2<F16>(kr, i, kk);
        for (int r = 0; r < NR; ++r) {
          a0[r] = V::fma(V::load(q[r] + i), kk[0], a0[r]);
          a1[r] = V::fma(V::load(q[r] + i + L), kk[1], a1[r]);
        }
      }
      if constexpr (F16 < kFmtQ8) {  // block formats: hd is a multiple of 32, no tail
        if (i + L <= hd) {
          const R k0 = ld<F16>(kr, i);
          for (int r = 0; r < NR; ++r) a0[r] = V::fma(V::load(q[r] + i), k0, a0[r]);
          i += L;
        }
        if (i < hd) {
          const R k1 = ld_n<F16>(kr, i, hd - i);
          for (int r = 0; r < NR; ++r) a1[r] = V::fma(V::load_n(q[r] + i, hd - i, 0.0f), k1, a1[r]);
        }
      }
      for (int r = 0; r < NR; ++r) sc[r * n_pos + p] = V::hsum(V::add(a0[r], a1[r])) * scale;
    }
  }

  // Positions [p0, p1) of out[r][i0, i0 + 2L) += sc[r][p] V[p][i0, ...) (first: from 0; last: then times inv[r]);
  // m0, m1: valid lanes of the two vectors. Each element's sum runs over p in order however positions are tiled.
  template <int NR, int F16, bool Full>
  [[gnu::always_inline]] static void slice(const float* sc, int64_t n_pos, const KvRows& v, int64_t i0, int64_t m0,
                                           int64_t m1, int64_t p0, int64_t p1, bool first, bool last, const float* inv,
                                           float* const* out, int64_t ahead_bytes = 0) {
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
    const float* w[NR];
    for (int r = 0; r < NR; ++r) w[r] = sc + r * n_pos;
#if defined(__clang__)  // clang takes the GNU spelling here (the [[...]] one would apply to the lambda's type)
    const auto step = [&](const void* vr, int64_t p) __attribute__((always_inline)) {
#else
    const auto step = [&](const void* vr, int64_t p) [[gnu::always_inline]] {
#endif
      R v0, v1;
      if constexpr (Full) {
        R vv[2];
        ld2<F16>(vr, i0, vv);
        v0 = vv[0];
        v1 = vv[1];
      } else {
        static_assert(F16 < kFmtQ8, "block formats have no partial slices");
        v0 = ld_n<F16>(vr, i0, m0);
        v1 = m1 > 0 ? ld_n<F16>(vr, i0 + L, m1) : V::zero();
      }
      for (int r = 0; r < NR; ++r) {
        const R wr = V::set1(w[r][p]);
        acc[r][0] = V::fma(wr, v0, acc[r][0]);
        acc[r][1] = V::fma(wr, v1, acc[r][1]);
      }
    };
    if (v.idx || ahead_bytes > 0) {
      for (int64_t p = p0; p < p1; ++p) {
        if (ahead_bytes > 0) v.prefetch<F16>(p, n_pos, ahead_bytes);
        step(v.at<F16>(p), p);
      }
    } else if (p0 < p1) {  // rows in position order: a pointer that steps (the same rows as at<>)
      const char* vr = static_cast<const char*>(v.at<F16>(p0));
      for (int64_t p = p0; p < p1; ++p, vr += v.stride * KvRows::unit<F16>()) step(vr, p);
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

  // Rows of row_bytes in ~16 KiB: a tile that stays in L1.
  static int64_t l1_rows(int64_t row_bytes) { return std::max<int64_t>(8, 16384 / row_bytes); }
  // Positions [p0, p1) of the value sums of all head_dim slices, in tiles of `tile` rows (l1_rows for rows read
  // from memory: each tile is read once and then from L1 for every slice; a long context's V does not fit in L2, and
  // slices over all positions would stream it hd / 2L times).
  template <int NR, int F>
  static void values(const float* sc, int64_t n_pos, const KvRows& v, int64_t tile, int64_t hd, int64_t p0,
                     int64_t p1, const float* inv, float* const* out) {
    for (int64_t t0 = p0; t0 < p1; t0 += tile) {
      const int64_t t1 = std::min(p1, t0 + tile);
      const bool first = t0 == 0, last = t1 == n_pos;
      // The first slice asks for the rows ahead (a slice reads the tile's rows; the others find them in L1).
      const int64_t rb = KvRows::row_bytes<F>(hd);
      int64_t i = 0;
      for (; i + 2 * L <= hd; i += 2 * L)
        slice<NR, F, true>(sc, n_pos, v, i, L, L, t0, t1, first, last, inv, out, i == 0 ? rb : 0);
      if constexpr (F < kFmtQ8) {  // block formats: hd is a multiple of 32, no tail
        if (i < hd) {
          const int64_t rest = hd - i;
          slice<NR, F, false>(sc, n_pos, v, i, rest < L ? rest : L, rest > L ? rest - L : 0, t0, t1, first, last,
                              inv, out);
        }
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

  // One token's NR query rows over positions [0, n_pos): scores, softmax, value sums. With a shadow (block formats
  // with sink / window) each store's run of positions is read from its own rows; an element's value sum still runs
  // over the positions in order, so the runs never change a result.
  template <int NR, int FK, int FV>
  static void rows(const float* const* q, float* const* out, const AttnBlock& b, int64_t n_pos, float* sc) {
    const int64_t hd = b.head_dim;
    const int64_t kb = kv_row_bytes(b.k_type, hd), vb = kv_row_bytes(b.v_type, hd);
    const KvRows k{b.k, FK >= kFmtQ8 ? kb : hd}, v{b.v, FV >= kFmtQ8 ? vb : hd}, k16{b.k16, hd}, v16{b.v16, hd};
    split(0, n_pos, runs(b, b.k16, n_pos), b.k16 != nullptr, [&](int64_t s0, int64_t s1, bool sh) {
      if (sh) scores<NR, kFmtF16>(q, k16, s0, s1, n_pos, hd, b.scale, sc);
      else scores<NR, FK>(q, k, s0, s1, n_pos, hd, b.scale, sc);
    });
    float inv[NR];
    for (int r = 0; r < NR; ++r) inv[r] = static_cast<float>(1.0 / exp_shifted<V>(sc + r * n_pos, n_pos));
    split(0, n_pos, runs(b, b.v16, n_pos), b.v16 != nullptr, [&](int64_t s0, int64_t s1, bool sh) {
      if (sh) values<NR, kFmtF16>(sc, n_pos, v16, l1_rows(2 * hd), hd, s0, s1, inv, out);
      else values<NR, FV>(sc, n_pos, v, l1_rows(vb), hd, s0, s1, inv, out);
    });
  }

  // A task of several tokens with block-format rows (any number of heads): tile by tile of positions, the rows are
  // decoded once into f32 (the values ld2 gives: d * q, exact) and every token and head reads them from there with
  // the f32 kernels, four heads at a time: the same values and the same operations per (token, head) as rows<> on
  // the blocks, so a batch still equals its tokens one by one, and the decoding is paid once per tile and task
  // instead of once per token and four heads.
  template <int F>
  static void decode_rows(const KvRows& rows, int64_t p0, int64_t p1, int64_t n_pos, int64_t hd, float* out) {
    for (int64_t p = p0; p < p1; ++p, out += hd) {
      rows.prefetch<F>(p, n_pos, KvRows::row_bytes<F>(hd));
      const void* r = rows.at<F>(p);
      for (int64_t i = 0; i < hd; i += 2 * L) {
        R x[2];
        ld2<F>(r, i, x);
        V::store(out + i, x[0]);
        V::store(out + i + L, x[1]);
      }
    }
  }
  // Heads [j0, j0 + NR) of token t (n_pos positions, scores st [n_q][n_pos]) over the tile [p0, p1) of positions:
  // scores (Values false) or value sums (true), from the shadow, the decoded tile or plain rows.
  template <int NR, int F, bool Values>
  static void tile_heads(const AttnBlock& b, int64_t t, int64_t j0, int64_t p0, int64_t p1, const KvRows& plain,
                         const KvRows& dec, float* st, const float* in) {
    const int64_t hd = b.head_dim, n_pos = b.n_pos0 + t;
    const float* q[NR];
    float* out[NR];
    for (int r = 0; r < NR; ++r) {
      q[r] = b.q + t * b.tok_stride + (j0 + r) * hd;
      out[r] = b.out + t * b.tok_stride + (j0 + r) * hd;
    }
    float* s = st + j0 * n_pos;
    const uint16_t* shadow = Values ? b.v16 : b.k16;
    const KvRows sh16{shadow, hd};
    split(p0, std::min(p1, n_pos), runs(b, shadow, n_pos), shadow != nullptr, [&](int64_t s0, int64_t s1, bool sh) {
      if constexpr (Values) {
        if (sh) values<NR, kFmtF16>(s, n_pos, sh16, l1_rows(2 * hd), hd, s0, s1, in + j0, out);
        else if constexpr (F >= kFmtQ8) values<NR, kFmtF32>(s, n_pos, dec, p1 - p0, hd, s0, s1, in + j0, out);
        else values<NR, F>(s, n_pos, plain, l1_rows(kv_row_bytes(b.v_type, hd)), hd, s0, s1, in + j0, out);
      } else {
        if (sh) scores<NR, kFmtF16>(q, sh16, s0, s1, n_pos, hd, b.scale, s);
        else if constexpr (F >= kFmtQ8) scores<NR, kFmtF32>(q, dec, s0, s1, n_pos, hd, b.scale, s);
        else scores<NR, F>(q, plain, s0, s1, n_pos, hd, b.scale, s);
      }
    });
  }
  template <int F, bool Values>
  static void tile_pass(const AttnBlock& b, const KvRows& plain, std::vector<float>& dec, std::vector<float>& sc,
                        const std::vector<float>& inv, int64_t tile) {
    const int64_t hd = b.head_dim, n_max = b.n_pos0 + b.n_tok - 1;
    for (int64_t p0 = 0; p0 < n_max; p0 += tile) {
      const int64_t p1 = std::min(n_max, p0 + tile);
      if constexpr (F >= kFmtQ8) decode_rows<F>(plain, p0, p1, n_max, hd, dec.data());
      const KvRows kt{dec.data(), hd, nullptr, p0, true};
      for (int64_t t = 0; t < b.n_tok; ++t) {
        if (p0 >= b.n_pos0 + t) continue;
        float* st = sc.data() + b.n_q * (t * b.n_pos0 + t * (t - 1) / 2);
        const float* in = inv.data() + t * b.n_q;
        for (int64_t j0 = 0; j0 < b.n_q; j0 += 4) {
          switch (std::min<int64_t>(4, b.n_q - j0)) {
            case 1: tile_heads<1, F, Values>(b, t, j0, p0, p1, plain, kt, st, in); break;
            case 2: tile_heads<2, F, Values>(b, t, j0, p0, p1, plain, kt, st, in); break;
            case 3: tile_heads<3, F, Values>(b, t, j0, p0, p1, plain, kt, st, in); break;
            default: tile_heads<4, F, Values>(b, t, j0, p0, p1, plain, kt, st, in); break;
          }
        }
      }
    }
  }
  template <int FK, int FV>
  static void tiled(const AttnBlock& b) {
    const int64_t hd = b.head_dim;
    const int64_t tile = std::max<int64_t>(16, 65536 / (4 * hd));  // 64 KiB of decoded rows
    thread_local std::vector<float> sc, inv, dec;
    sc.resize(static_cast<size_t>(b.n_q * (b.n_tok * b.n_pos0 + b.n_tok * (b.n_tok - 1) / 2)));
    inv.resize(static_cast<size_t>(b.n_tok * b.n_q));
    dec.resize(static_cast<size_t>(tile * hd));
    const KvRows k{b.k, FK >= kFmtQ8 ? kv_row_bytes(b.k_type, hd) : hd};
    const KvRows v{b.v, FV >= kFmtQ8 ? kv_row_bytes(b.v_type, hd) : hd};
    tile_pass<FK, false>(b, k, dec, sc, inv, tile);
    for (int64_t t = 0; t < b.n_tok; ++t) {
      const int64_t n_pos = b.n_pos0 + t;
      float* st = sc.data() + b.n_q * (t * b.n_pos0 + t * (t - 1) / 2);
      for (int64_t j = 0; j < b.n_q; ++j)
        inv[t * b.n_q + j] = static_cast<float>(1.0 / exp_shifted<V>(st + j * n_pos, n_pos));
    }
    tile_pass<FV, true>(b, v, dec, sc, inv, tile);
  }

  template <int FK, int FV>
  static void block(const AttnBlock& b) {
    if (b.n_q > 4 || ((FK >= kFmtQ8 || FV >= kFmtQ8) && b.n_tok > 1)) {
      tiled<FK, FV>(b);
      return;
    }
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
      for (int64_t h = 1; h < n; h *= 2) {
        if (h >= L) {
          for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; j += L) {
              const R a = V::load(x + j), c = V::load(x + j + h);
              V::store(x + j, V::add(a, c));
              V::store(x + j + h, V::sub(a, c));
            }
        } else if (n % L == 0) {  // the stage inside each vector
          for (int64_t j = 0; j < n; j += L) V::store(x + j, V::butterfly(V::load(x + j), h));
        } else {
          for (int64_t i = 0; i < n; i += 2 * h)
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
