// Shared helpers for the ops tests: seeded random inputs, NMSE against float64 references, and guarded
// output buffers (canary values after the end that must survive the op).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace tern::ops::test {

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
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
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
