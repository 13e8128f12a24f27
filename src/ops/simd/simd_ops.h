// Element-wise activations, softmax, norms, RoPE, the short convolution and f32 -> f16 rows, written once against
// a vector policy V (see simd_math.h). Tails are the same vector code on a partial (masked) vector, so an element's
// result never depends on where it falls in the array: a token's values are the same alone or in a batch.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/simd/simd_math.h"

namespace tern::ops {
namespace {

template <class V>
struct Elementwise {
  using R = typename V::R;
  using M = Math<V>;
  static constexpr int64_t L = V::kL;

  // x[i] = f(x[i]) / out[i] = f(a[i], b[i]) over n values; out may alias a or b.
  template <class F>
  static void map1(float* x, int64_t n, F f) {
    int64_t i = 0;
    for (; i + L <= n; i += L) V::store(x + i, f(V::load(x + i)));
    if (i < n) V::store_n(x + i, f(V::load_n(x + i, n - i, 0.0f)), n - i);
  }
  template <class F>
  static void map2(const float* a, const float* b, float* out, int64_t n, F f) {
    int64_t i = 0;
    for (; i + L <= n; i += L) V::store(out + i, f(V::load(a + i), V::load(b + i)));
    if (i < n) V::store_n(out + i, f(V::load_n(a + i, n - i, 0.0f), V::load_n(b + i, n - i, 0.0f)), n - i);
  }

  static void sigmoid(float* x, int64_t n) { map1(x, n, [](R v) { return M::sigmoid(v); }); }
  static void silu(float* x, int64_t n) { map1(x, n, [](R v) { return M::silu(v); }); }
  static void softplus(float* x, int64_t n) { map1(x, n, [](R v) { return M::softplus(v); }); }
  static void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    map2(gate, up, out, n, [](R g, R u) { return V::mul(M::silu(g), u); });
  }
  static void sigmoid_gate(float* o, const float* gate, int64_t n) {
    map2(o, gate, o, n, [](R a, R g) { return V::mul(a, M::sigmoid(g)); });
  }

  // The ref's softmax: max, exp(x - max) stored, sum in double (per lane, in order), times float(1 / sum).
  static void softmax_rows(float* x, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) {
      float* row = x + r * n;
      const R inv = V::set1(static_cast<float>(1.0 / exp_shifted<V>(row, n)));
      map1(row, n, [&](R v) { return V::mul(v, inv); });
    }
  }
};

template <class V>
struct Norms {
  using R = typename V::R;
  static constexpr int64_t L = V::kL;

  static float rms_scale(const float* x, int64_t n, float eps) {
    const float mean = static_cast<float>(sum_squares<V>(x, n) / static_cast<double>(n));
    return 1.0f / std::sqrt(mean + eps);
  }

  static void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      const R s = V::set1(rms_scale(xr, n, eps));
      if (w) {
        Elementwise<V>::map2(xr, w, yr, n, [&](R a, R b) { return V::mul(V::mul(a, s), b); });
      } else {
        Elementwise<V>::map2(xr, xr, yr, n, [&](R a, R) { return V::mul(a, s); });
      }
    }
  }

  static void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * n;
      const float norm = std::sqrt(static_cast<float>(sum_squares<V>(xr, n)));
      const R s = V::set1(1.0f / std::fmax(norm, eps));
      Elementwise<V>::map2(xr, xr, y + r * n, n, [&](R a, R) { return V::mul(a, s); });
    }
  }

  static void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                             float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * n;
      const float* zr = z + r * n;
      float* yr = y + r * n;
      const R s = V::set1(rms_scale(xr, n, eps));
      int64_t i = 0;
      auto one = [&](R a, R zz, R ww) { return V::mul(V::mul(V::mul(a, s), ww), Math<V>::silu(zz)); };
      for (; i + L <= n; i += L) V::store(yr + i, one(V::load(xr + i), V::load(zr + i), V::load(w + i)));
      if (i < n) {
        const int64_t m = n - i;
        V::store_n(yr + i, one(V::load_n(xr + i, m, 0.0f), V::load_n(zr + i, m, 0.0f), V::load_n(w + i, m, 0.0f)),
                   m);
      }
    }
  }
};

// RoPE rotation: a*c - b*s and b*c + a*s as separate products and one add / sub (no FMA), as the ref.
template <class V>
void rope_neox_simd(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t half, const float* cs,
                    const float* sn) {
  using R = typename V::R;
  constexpr int64_t L = V::kL;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cs + t * half;
    const float* s = sn + t * half;
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = x + (t * n_head + h) * head_dim;
      for (int64_t j = 0; j < half; j += L) {
        const int64_t m = half - j < L ? half - j : L;
        const R a = load_m<V>(v + j, m), b = load_m<V>(v + half + j, m);
        const R cc = load_m<V>(c + j, m), ss = load_m<V>(s + j, m);
        store_m<V>(v + j, V::sub(V::mul(a, cc), V::mul(b, ss)), m);
        store_m<V>(v + half + j, V::add(V::mul(b, cc), V::mul(a, ss)), m);
      }
    }
  }
}

// Short convolution outputs of channels [c0, c1), vectorised over channels: taps and state transposed to
// [tap][channel] once per call; per output one FMA per tap in tap order, then silu.
template <class V>
void conv_silu_simd(const float* x, int64_t n_tokens, int64_t n_ch, int64_t kernel, const float* w,
                    const float* state, float* y, int64_t c0, int64_t c1) {
  using R = typename V::R;
  constexpr int64_t L = V::kL;
  const int64_t ns = kernel - 1, nc = c1 - c0;
  thread_local std::vector<float> wt, st;  // [kernel, nc], [ns, nc]
  wt.resize(kernel * nc);
  st.resize(ns * nc);
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t i = 0; i < kernel; ++i) wt[i * nc + c] = w[(c0 + c) * kernel + i];
    for (int64_t j = 0; j < ns; ++j) st[j * nc + c] = state[(c0 + c) * ns + j];
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* yr = y + t * n_ch + c0;
    for (int64_t c = 0; c < nc; c += L) {
      const int64_t m = nc - c < L ? nc - c : L;
      R acc = V::zero();
      for (int64_t i = 0; i < kernel; ++i) {
        const int64_t src_t = t - ns + i;  // < 0: from the state
        const float* src = src_t < 0 ? st.data() + (ns + src_t) * nc + c : x + src_t * n_ch + c0 + c;
        const R xs = m == L ? V::load(src) : V::load_n(src, m, 0.0f);
        const R ws = m == L ? V::load(wt.data() + i * nc + c) : V::load_n(wt.data() + i * nc + c, m, 0.0f);
        acc = V::fma(ws, xs, acc);
      }
      if (m == L) {
        V::store(yr + c, Math<V>::silu(acc));
      } else {
        V::store_n(yr + c, Math<V>::silu(acc), m);
      }
    }
  }
}

// f32 -> f16, round to nearest even (F16C / AVX-512F conversion: the ref's bits for every non-NaN input).
template <class V>
void f32_to_f16_simd(const float* x, uint16_t* y, int64_t n) {
  constexpr int64_t L = V::kL;
  int64_t i = 0;
  for (; i + L <= n; i += L) V::store_h(y + i, V::load(x + i));
  if (i < n) V::store_h_n(y + i, V::load_n(x + i, n - i, 0.0f), n - i);
}

// f16 -> f32 (exact on every ISA).
template <class V>
void f16_to_f32_simd(const uint16_t* x, float* y, int64_t n) {
  constexpr int64_t L = V::kL;
  int64_t i = 0;
  for (; i + L <= n; i += L) V::store(y + i, V::load_h(x + i));
  if (i < n) V::store_n(y + i, V::load_h_n(x + i, n - i), n - i);
}

}  // namespace
}  // namespace tern::ops
