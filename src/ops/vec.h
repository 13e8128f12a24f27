// Small float32 vector kernels shared by the ops (internal). Reductions use 8 interleaved partial sums
// combined in a fixed order, so the compiler can vectorise them without -ffast-math and the result is a
// pure function of the inputs (no dependence on threads, batch or call site).
#pragma once
#include <cstdint>

namespace tern::ops::vec {

inline float reduce8(const float* acc) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return reduce8(acc);
}

// y += a * x
inline void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

inline void scale(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

}  // namespace tern::ops::vec
