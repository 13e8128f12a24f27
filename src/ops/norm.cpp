// Row normalisations (see norm.h): scalar twins and the dispatch.
#include "ops/norm.h"

#include <cmath>

#include "ops/activation.h"
#include "ops/kernels.h"
#include "ops/split.h"

namespace tern::ops {

namespace {

double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// 1 / sqrt(mean(x^2) + eps), in float as ggml (mean from the double sum, then float).
float rms_scale(const float* x, int64_t n, float eps) {
  const float mean = static_cast<float>(sum_squares(x, n) / static_cast<double>(n));
  return 1.0f / std::sqrt(mean + eps);
}

}  // namespace

void rms_norm_ref(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float scale = rms_scale(xr, n, eps);
    if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * scale) * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
    }
  }
}

void l2_norm_ref(const float* x, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float norm = std::sqrt(static_cast<float>(sum_squares(xr, n)));
    const float scale = 1.0f / std::fmax(norm, eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
  }
}

void rms_norm_gated_ref(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                    float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    const float* zr = z + r * n;
    float* yr = y + r * n;
    const float scale = rms_scale(xr, n, eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * scale) * w[i] * silu(zr[i]);
  }
}

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, Isa isa) {
  const Kernels& k = kernels(isa);
  split::rows(n_rows, n, [&](int64_t r0, int64_t r1) { k.rms_norm(x + r0 * n, w, y + r0 * n, r1 - r0, n, eps); });
}

void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps, Isa isa) {
  const Kernels& k = kernels(isa);
  split::rows(n_rows, n, [&](int64_t r0, int64_t r1) { k.l2_norm(x + r0 * n, y + r0 * n, r1 - r0, n, eps); });
}

void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n, float eps,
                    Isa isa) {
  const Kernels& k = kernels(isa);
  split::rows(n_rows, n, [&](int64_t r0, int64_t r1) {
    k.rms_norm_gated(x + r0 * n, z + r0 * n, w, y + r0 * n, r1 - r0, n, eps);
  });
}

}  // namespace tern::ops
