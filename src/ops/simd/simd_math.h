// Vector math shared by the AVX2 and AVX-512 op kernels, written once against a vector policy V (V8 in
// ops/avx2/ops_avx2.cpp, V16 in ops/avx512/ops_avx512.cpp; both list the members used here). Included only by those
// translation units, everything in an anonymous namespace: each ISA keeps its own copy, so no inline function
// compiled with AVX-512 flags can be picked by the linker for other code.
// exp and log are Cephes' single-precision polynomials (S. Moshier, cephes/single/expf.c, logf.c; ~1 ulp on
// their reduced ranges); exp covers the whole float range (subnormal results, inf above ~88.72, NaN passes).
#pragma once
#include <cmath>
#include <cstdint>

namespace tern::ops {
namespace {

template <class V>
struct Math {
  using R = typename V::R;

  static R exp(R x) {
    // Clamp (NaN passes through, see V::clamp); n = round(x / ln2), r = x - n ln2 in two FMA steps (exact
    // enough for |n| <= 159), exp(r) by the Cephes polynomial, times 2^n applied as 2^n1 * 2^n2 (each a normal
    // float) so that results below 2^-126 round once into the subnormals instead of flushing to zero.
    x = V::clamp(x, -110.0f, 89.0f);
    const R n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
    R r = V::fnma(n, V::set1(0.693145751953125f), x);
    r = V::fnma(n, V::set1(1.428606765330187045e-06f), r);
    R p = V::set1(1.9875691500e-4f);
    p = V::fma(p, r, V::set1(1.3981999507e-3f));
    p = V::fma(p, r, V::set1(8.3334519073e-3f));
    p = V::fma(p, r, V::set1(4.1665795894e-2f));
    p = V::fma(p, r, V::set1(1.6666665459e-1f));
    p = V::fma(p, r, V::set1(5.0000001201e-1f));
    R y = V::fma(p, V::mul(r, r), r);
    y = V::add(y, V::set1(1.0f));
    // n1 = floor(n / 2) as round(n / 2 - 1/4), exact for integral n (no round-down mode: Debian 12's SIMDe ignores
    // roundscale's, and the SIMDe twin of the AVX-512 unit must compute what the native one does)
    const R n1 = V::round(V::sub(V::mul(n, V::set1(0.5f)), V::set1(0.25f)));
    return V::mul(V::mul(y, V::pow2i(n1)), V::pow2i(V::sub(n, n1)));
  }

  // Natural log of x >= 1 (finite): x = m 2^e with m in [sqrt(1/2), sqrt(2)), Cephes logf polynomial.
  static R log_ge1(R x) {
    R e;
    R m = V::frexp(x, &e);  // m in [0.5, 1)
    const auto small = V::lt(m, V::set1(0.707106781186547524f));
    e = V::sub(e, V::select(small, V::set1(1.0f), V::zero()));
    m = V::add(V::sub(m, V::set1(1.0f)), V::select(small, m, V::zero()));
    const R z = V::mul(m, m);
    R p = V::set1(7.0376836292e-2f);
    p = V::fma(p, m, V::set1(-1.1514610310e-1f));
    p = V::fma(p, m, V::set1(1.1676998740e-1f));
    p = V::fma(p, m, V::set1(-1.2420140846e-1f));
    p = V::fma(p, m, V::set1(1.4249322787e-1f));
    p = V::fma(p, m, V::set1(-1.6668057665e-1f));
    p = V::fma(p, m, V::set1(2.0000714765e-1f));
    p = V::fma(p, m, V::set1(-2.4999993993e-1f));
    p = V::fma(p, m, V::set1(3.3333331174e-1f));
    R y = V::mul(V::mul(p, m), z);
    y = V::fma(e, V::set1(-2.12194440e-4f), y);
    y = V::fnma(z, V::set1(0.5f), y);
    R r = V::add(m, y);
    return V::fma(e, V::set1(0.693359375f), r);
  }

  static R sigmoid(R x) {
    const R one = V::set1(1.0f);
    return V::div(one, V::add(one, exp(V::neg(x))));
  }
  static R silu(R x) { return V::div(x, V::add(V::set1(1.0f), exp(V::neg(x)))); }
  // x > 20 ? x : log1p(exp(x)), log1p(e) = log(1 + e) * e / ((1 + e) - 1) (exact compensation of the rounding
  // of 1 + e; e itself where 1 + e rounds to 1).
  static R softplus(R x) {
    const R e = exp(x);
    const R u = V::add(V::set1(1.0f), e);
    const R d = V::sub(u, V::set1(1.0f));
    const auto tiny = V::eq(d, V::zero());
    const R l = V::mul(log_ge1(u), V::div(e, V::select(tiny, V::set1(1.0f), d)));
    return V::select(V::gt(x, V::set1(20.0f)), x, V::select(tiny, e, l));
  }
};

// m <= kL lanes at p: a plain vector access when m is the full width, masked otherwise (only m floats touched).
template <class V>
typename V::R load_m(const float* p, int64_t m) {
  return m == V::kL ? V::load(p) : V::load_n(p, m, 0.0f);
}
template <class V>
void store_m(float* p, typename V::R x, int64_t m) {
  if (m == V::kL) {
    V::store(p, x);
  } else {
    V::store_n(p, x, m);
  }
}

// Sum of x[i]^2 in double (as the ref): per lane, vectors in order, 2 vectors per step into 4 accumulators; the
// order depends on n alone.
template <class V>
double sum_squares(const float* x, int64_t n) {
  constexpr int64_t L = V::kL;
  auto a0 = V::dzero(), a1 = V::dzero(), a2 = V::dzero(), a3 = V::dzero();
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const auto v0 = V::load(x + i), v1 = V::load(x + i + L);
    const auto l0 = V::cvt_lo(v0), h0 = V::cvt_hi(v0), l1 = V::cvt_lo(v1), h1 = V::cvt_hi(v1);
    a0 = V::dfma(l0, l0, a0);
    a1 = V::dfma(h0, h0, a1);
    a2 = V::dfma(l1, l1, a2);
    a3 = V::dfma(h1, h1, a3);
  }
  for (; i < n; i += L) {
    const auto v = i + L <= n ? V::load(x + i) : V::load_n(x + i, n - i, 0.0f);
    const auto l = V::cvt_lo(v), h = V::cvt_hi(v);
    a0 = V::dfma(l, l, a0);
    a1 = V::dfma(h, h, a1);
  }
  return V::dhsum(V::dadd(V::dadd(a0, a2), V::dadd(a1, a3)));
}

// exp(x - max(x)) in place over a row of n values (as the ref's softmax: max ignoring NaN, the exps stored, their
// sum in double per lane then reduced); returns the sum. Padding lanes hold exp(-inf) = 0.
template <class V>
double exp_shifted(float* row, int64_t n) {
  constexpr int64_t L = V::kL;
  auto mv = V::set1(-INFINITY);
  int64_t i = 0;
  for (; i + L <= n; i += L) mv = V::max_keep(mv, V::load(row + i));
  if (i < n) mv = V::max_keep(mv, V::load_n(row + i, n - i, -INFINITY));
  const auto mx = V::set1(V::hmax(mv));
  auto s0 = V::dzero(), s1 = V::dzero();
  for (i = 0; i < n; i += L) {
    const int64_t m = n - i < L ? n - i : L;
    const auto e = Math<V>::exp(V::sub(m == L ? V::load(row + i) : V::load_n(row + i, m, -INFINITY), mx));
    if (m == L) {
      V::store(row + i, e);
    } else {
      V::store_n(row + i, e, m);
    }
    s0 = V::dadd(s0, V::cvt_lo(e));
    s1 = V::dadd(s1, V::cvt_hi(e));
  }
  return V::dhsum(V::dadd(s0, s1));
}

}  // namespace
}  // namespace tern::ops
