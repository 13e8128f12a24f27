// Shared helpers for the ops tests: seeded random inputs, NMSE against float64 references, and guarded
// output buffers (canary values after the end that must survive the op).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "isa_variant.h"

namespace tern::ops::test {

// Fixture for the per-ISA kernel tests (test_isa_*.cpp): parameterised by a SIMD kernel variant (tests/isa_variant.h:
// avx2, avx512_native, avx512_simde = the AVX-512 source through SIMDe), compared with Isa::kRef. A variant this
// build or CPU cannot run is reported SKIPPED, never passed.
class IsaTest : public ::testing::TestWithParam<tern::test::IsaVariant> {
 protected:
  void SetUp() override {
    if (const std::string why = tern::test::variant_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
    variant_.emplace(GetParam());
  }
  void TearDown() override { variant_.reset(); }
  Isa isa() const { return GetParam().isa; }

 private:
  std::optional<tern::test::ScopedIsaVariant> variant_;
};
inline std::string isa_param_name(const ::testing::TestParamInfo<tern::test::IsaVariant>& i) {
  return tern::test::variant_name(i.param);
}
#define TERN_INSTANTIATE_SIMD(suite)                                                                     \
  INSTANTIATE_TEST_SUITE_P(Simd, suite,                                                                  \
                           ::testing::Values(tern::test::IsaVariant{Isa::kAvx2, false},                   \
                                             tern::test::IsaVariant{Isa::kAvx512, false},                 \
                                             tern::test::IsaVariant{Isa::kAvx512, true}),                 \
                           isa_param_name)

// Element by element against a ref: NaN exactly where the ref is NaN, the same infinity where it is infinite,
// else |a - ref| <= rel |ref| + abs. Reports the first failure and the worst relative error seen.
inline ::testing::AssertionResult close_elementwise(const float* a, const float* ref, size_t n, double rel,
                                                    double abs) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double x = a[i], r = ref[i];
    if (std::isnan(r) || std::isnan(x) || std::isinf(r) || std::isinf(x)) {
      if ((std::isnan(r) && std::isnan(x)) || x == r) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs ref " << r;
    }
    const double err = std::fabs(x - r);
    if (err > rel * std::fabs(r) + abs)
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs ref " << r << " (rel "
                                           << err / std::fabs(r) << ")";
    if (std::fabs(r) > abs) worst = std::max(worst, err / std::fabs(r));
  }
  return ::testing::AssertionSuccess() << "worst relative error " << worst;
}

inline std::vector<float> rand_vec(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// NMSE = sum (a - ref)^2 / sum ref^2 (ggml test-backend-ops' metric). Also fails on NaN / Inf in a.
inline double nmse(const float* a, const double* ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    const double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? num / den : num;
}
inline double nmse(const std::vector<float>& a, const std::vector<double>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  return nmse(a.data(), ref.data(), std::min(a.size(), ref.size()));
}

// NMSE of a against a float reference b (two fp32 implementations of the same map).
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  return nmse(a, std::vector<double>(b.begin(), b.end()));
}

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // (empty vectors may hold null pointers, which memcmp must not see even for 0 bytes)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Output buffer of n floats followed by kGuard canaries; ok() checks the canaries.
class Guarded {
 public:
  static constexpr size_t kGuard = 16;
  static constexpr uint32_t kCanary = 0x7fc0dead;  // a quiet NaN payload no op produces
  explicit Guarded(size_t n, float fill = 0.0f) : n_(n), buf_(n + kGuard, fill) {
    for (size_t i = 0; i < kGuard; ++i) std::memcpy(&buf_[n + i], &kCanary, 4);
  }
  float* data() { return buf_.data(); }
  std::vector<float> values() const { return {buf_.begin(), buf_.begin() + n_}; }
  bool ok() const {
    for (size_t i = 0; i < kGuard; ++i) {
      uint32_t u;
      std::memcpy(&u, &buf_[n_ + i], 4);
      if (u != kCanary) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<float> buf_;
};

}  // namespace tern::ops::test
