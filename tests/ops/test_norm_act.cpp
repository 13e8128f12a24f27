// ops: activations, softmax, RMS / L2 / gated norms and partial NeoX RoPE vs float64 references written
// here from the contract's formulas (docs: /work/shared/spec/qwen35moe.md sections 4, 7.1, 8.3, 8.7).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ref.h"

using namespace tern;
using namespace tern::ops;
using namespace tern::ops::test;

namespace {

double silu_d(double x) { return x / (1.0 + std::exp(-x)); }
double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus_d(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// Relative error with an absolute floor, for element-wise functions.
double rel_err(double a, double ref) { return std::fabs(a - ref) / std::max(std::fabs(ref), 1e-30); }

}  // namespace

// Element-wise: a handful of fp32 ulps (exp + divide, each within ~1 ulp) -> relative error <= 1e-6.
TEST(Activation, ElementwiseVsDouble) {
  std::mt19937_64 rng(1);
  auto x = rand_vec(rng, 4096, -30.0f, 30.0f);
  x.push_back(0.0f);
  x.push_back(20.0f);      // softplus threshold: exactly x
  x.push_back(20.001f);
  x.push_back(-80.0f);     // exp(-x) overflows to inf in fp32 for silu/sigmoid; must give -0 / 0, not NaN
  for (float v : x) {
    EXPECT_LE(rel_err(sigmoid(v), sigmoid_d(v)), 1e-6) << v;
    EXPECT_LE(rel_err(silu(v), silu_d(v)), 1e-6) << v;
    EXPECT_LE(rel_err(softplus(v), softplus_d(v)), 1e-6) << v;
  }
  EXPECT_EQ(softplus(25.0f), 25.0f);  // torch / ggml threshold behaviour: identity above 20
  EXPECT_EQ(silu(-200.0f), 0.0f);
  EXPECT_EQ(sigmoid(-200.0f), 0.0f);
  // The ref array forms equal the scalar forms bit for bit (the SIMD ones are checked against them in test_isa_*).
  std::vector<float> a = x, b = x, c = x;
  silu_inplace(a.data(), a.size(), Isa::kRef);
  sigmoid_inplace(b.data(), b.size(), Isa::kRef);
  softplus_inplace(c.data(), c.size(), Isa::kRef);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(a[i], silu(x[i]));
    EXPECT_EQ(b[i], sigmoid(x[i]));
    EXPECT_EQ(c[i], softplus(x[i]));
  }
}

// SwiGLU: one silu and one product -> NMSE far below 1e-12; threshold 1e-12 catches swapped operands.
TEST(Activation, SwigluVsDouble) {
  std::mt19937_64 rng(2);
  const size_t n = 1037;  // odd length: no tail assumptions
  auto g = rand_vec(rng, n, -8.0f, 8.0f), u = rand_vec(rng, n, -4.0f, 4.0f);
  Guarded out(n);
  swiglu(g.data(), u.data(), out.data(), n);
  std::vector<double> ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = silu_d(g[i]) * u[i];
  EXPECT_LE(nmse(out.values(), ref), 1e-12);
  EXPECT_TRUE(out.ok());
}

// Softmax rows: exp + double sum, error a few ulp per entry -> NMSE <= 1e-12; includes huge logits that
// overflow without the max subtraction, and -inf entries (masked) that must become exact zeros.
TEST(Activation, SoftmaxVsDouble) {
  std::mt19937_64 rng(3);
  const int64_t rows = 7, n = 257;
  auto x = rand_vec(rng, rows * n, -15.0f, 15.0f);
  x[5] = 1000.0f;
  x[n + 3] = -INFINITY;
  std::vector<double> ref(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[r * n + i]));
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[r * n + i] - mx);
    for (int64_t i = 0; i < n; ++i) ref[r * n + i] = std::exp(x[r * n + i] - mx) / sum;
  }
  softmax_rows(x.data(), rows, n);
  EXPECT_LE(nmse(x, ref), 1e-12);
  EXPECT_EQ(x[n + 3], 0.0f);
}

namespace {

std::vector<double> rms_norm_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t n,
                                 double eps) {
  std::vector<double> y(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double s = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * s * (w.empty() ? 1.0 : w[i]);
  }
  return y;
}

}  // namespace

// RMSNorm (GGUF form, weight = folded 1 + w): fp32 scale and two products per element -> NMSE ~1e-14;
// the contract's op-level bound 1e-7 (ggml test-backend-ops) is asserted, plus 1e-11 to catch a wrong eps
// placement or a missing weight, which a 1e-7 bound would not always see.
TEST(Norm, RmsNormVsDouble) {
  std::mt19937_64 rng(4);
  const int64_t rows = 5, n = 2048;
  auto x = rand_vec(rng, rows * n, -3.0f, 3.0f);
  for (int64_t i = 0; i < n; ++i) x[2 * n + i] *= 1e-4f;  // a row where eps matters (mean(x^2) ~ 3e-8)
  auto w = rand_vec(rng, n, 0.5f, 1.5f);
  Guarded y(rows * n);
  rms_norm(x.data(), w.data(), y.data(), rows, n, 1e-6f);
  const auto ref = rms_norm_ref(x, w, rows, n, 1e-6);
  EXPECT_LE(nmse(y.values(), ref), 1e-11);
  EXPECT_TRUE(y.ok());
  // No weight, in place.
  std::vector<float> xi = x;
  rms_norm(xi.data(), nullptr, xi.data(), rows, n, 1e-6f);
  EXPECT_LE(nmse(xi, rms_norm_ref(x, {}, rows, n, 1e-6)), 1e-11);
}

// L2 norm, ggml form x / max(||x||, eps): per-element relative error ~1e-7 -> NMSE <= 1e-12. Also the
// clamp: a vector with norm below eps is scaled by 1/eps exactly (HF's rsqrt(sum + eps) differs there).
TEST(Norm, L2NormVsDouble) {
  std::mt19937_64 rng(5);
  const int64_t rows = 16, n = 128;
  auto x = rand_vec(rng, rows * n, -2.0f, 2.0f);
  for (int64_t i = 0; i < n; ++i) x[3 * n + i] = 1e-9f * (i % 3);  // ||x|| ~ 9e-9 < eps
  std::vector<double> ref(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double d = std::max(std::sqrt(ss), 1e-6);
    for (int64_t i = 0; i < n; ++i) ref[r * n + i] = x[r * n + i] / d;
  }
  Guarded y(rows * n);
  l2_norm(x.data(), y.data(), rows, n, 1e-6f);
  EXPECT_LE(nmse(y.values(), ref), 1e-12);
  EXPECT_TRUE(y.ok());
  const auto yv = y.values();
  EXPECT_NEAR(yv[3 * n + 1], 1e-9 / 1e-6, 1e-9);
}

// Gated RMSNorm w * x_hat * silu(z) per head row: NMSE ~1e-14, asserted <= 1e-11 (as RmsNorm).
TEST(Norm, GatedRmsNormVsDouble) {
  std::mt19937_64 rng(6);
  const int64_t rows = 3 * 32, n = 128;  // 3 tokens x 32 value heads
  auto x = rand_vec(rng, rows * n, -1.0f, 1.0f), z = rand_vec(rng, rows * n, -6.0f, 6.0f);
  auto w = rand_vec(rng, n, 0.2f, 2.0f);
  auto ref = rms_norm_ref(x, w, rows, n, 1e-6);
  for (int64_t i = 0; i < rows * n; ++i) ref[i] *= silu_d(z[i]);
  Guarded y(rows * n);
  rms_norm_gated(x.data(), z.data(), w.data(), y.data(), rows, n, 1e-6f);
  EXPECT_LE(nmse(y.values(), ref), 1e-11);
  EXPECT_TRUE(y.ok());
}

namespace {

// Float64 NeoX rotation of the first n_rot dims with the given per-(token, pair) angles.
std::vector<double> rope_ref(const std::vector<float>& x, int64_t T, int64_t nh, int64_t hd, int64_t n_rot,
                             const std::vector<double>& angle) {
  std::vector<double> y(x.begin(), x.end());
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t b = (t * nh + h) * hd;
      for (int64_t j = 0; j < half; ++j) {
        const double c = std::cos(angle[t * half + j]), s = std::sin(angle[t * half + j]);
        y[b + j] = x[b + j] * c - static_cast<double>(x[b + j + half]) * s;
        y[b + j + half] = x[b + j + half] * c + static_cast<double>(x[b + j]) * s;
      }
    }
  }
  return y;
}

}  // namespace

// RoPE at positions < 2048 vs exact float64 angles pos * base^(-2j/n_rot): the fp32 angle (HF recipe) is off
// by <= pos * 2^-24 rad ~ 1.2e-4, so NMSE stays below the contract's 1e-7 but not much lower.
TEST(Rope, NeoxPartialVsExactAngles) {
  std::mt19937_64 rng(7);
  const int64_t T = 9, nh = 3, hd = 256, n_rot = 64;
  const double base = 1e7;
  std::vector<int32_t> pos = {0, 1, 2, 17, 100, 511, 1000, 1500, 2047};
  auto x = rand_vec(rng, T * nh * hd, -2.0f, 2.0f);
  std::vector<double> angle(T * n_rot / 2);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n_rot / 2; ++j) angle[t * n_rot / 2 + j] = pos[t] * std::pow(base, -2.0 * j / n_rot);
  const auto ref = rope_ref(x, T, nh, hd, n_rot, angle);
  std::vector<float> y = x;
  rope_neox(y.data(), T, nh, hd, n_rot, pos.data(), static_cast<float>(base));
  EXPECT_LE(nmse(y, ref), 1e-7);
  for (int64_t r = 0; r < T * nh; ++r)  // dims past n_rot are untouched, bit for bit
    for (int64_t i = n_rot; i < hd; ++i) ASSERT_EQ(y[r * hd + i], x[r * hd + i]);
  for (int64_t i = 0; i < nh * hd; ++i) ASSERT_EQ(y[i], x[i]);  // position 0 is the identity
}

// RoPE at large positions vs a float64 rotation by the documented HF fp32 angle (fl32(fl32(pos) *
// fl32(1 / fl32(base^(2j/d))))): only the final rotation rounds -> NMSE <= 1e-12.
TEST(Rope, NeoxMatchesHfFp32AngleAtLargePositions) {
  std::mt19937_64 rng(8);
  const int64_t T = 4, nh = 2, hd = 128, n_rot = 64;
  const float base = 1e7f;
  std::vector<int32_t> pos = {4096, 65535, 131072, 262143};
  auto x = rand_vec(rng, T * nh * hd, -2.0f, 2.0f);
  std::vector<double> angle(T * n_rot / 2);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < n_rot / 2; ++j) {
      const float p = static_cast<float>(std::pow(static_cast<double>(base), 2.0 * j / n_rot));
      const float inv = 1.0f / p;
      angle[t * n_rot / 2 + j] = static_cast<float>(static_cast<float>(pos[t]) * inv);
    }
  }
  const auto ref = rope_ref(x, T, nh, hd, n_rot, angle);
  std::vector<float> y = x;
  rope_neox(y.data(), T, nh, hd, n_rot, pos.data(), base);
  EXPECT_LE(nmse(y, ref), 1e-12);
}

TEST(Rope, RejectsBadRotaryDims) {
  std::vector<float> x(256);
  int32_t pos = 0;
  EXPECT_THROW(rope_neox(x.data(), 1, 1, 256, 63, &pos, 1e7f), Error);
  EXPECT_THROW(rope_neox(x.data(), 1, 1, 256, 258, &pos, 1e7f), Error);
  EXPECT_THROW(rope_neox(x.data(), 1, 1, 256, 64, &pos, 0.0f), Error);
}
