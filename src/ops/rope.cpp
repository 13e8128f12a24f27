// Partial NeoX RoPE (see rope.h for the angle-table provenance).
#include "ops/rope.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/kernels.h"

namespace tern::ops {

namespace {

void check_rope_args(int64_t head_dim, int64_t n_rot, float freq_base) {
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    fail("rope: n_rot = %lld must be even, positive and <= head_dim = %lld", static_cast<long long>(n_rot),
         static_cast<long long>(head_dim));
  }
  if (!(freq_base > 0.0f)) fail("rope: freq_base = %g must be positive", static_cast<double>(freq_base));
}

}  // namespace

void rope_cos_sin(const int32_t* pos, int64_t n_tokens, int64_t n_rot, float freq_base, float* cos_out,
                  float* sin_out) {
  check_rope_args(n_rot, n_rot, freq_base);
  const int64_t half = n_rot / 2;
  std::vector<float> inv_freq(half);
  for (int64_t j = 0; j < half; ++j) {
    const float p = static_cast<float>(std::pow(static_cast<double>(freq_base),
                                                static_cast<double>(2 * j) / static_cast<double>(n_rot)));
    inv_freq[j] = 1.0f / p;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float fpos = static_cast<float>(pos[t]);
    for (int64_t j = 0; j < half; ++j) {
      const double angle = static_cast<double>(fpos * inv_freq[j]);
      cos_out[t * half + j] = static_cast<float>(std::cos(angle));
      sin_out[t * half + j] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_neox_ref(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t half, const float* cs,
                   const float* sn) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cs + t * half;
    const float* s = sn + t * half;
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = x + (t * n_head + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * c[j] - b * s[j];
        v[j + half] = b * c[j] + a * s[j];
      }
    }
  }
}

void rope_neox(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot, const int32_t* pos,
               float freq_base, Isa isa) {
  check_rope_args(head_dim, n_rot, freq_base);
  const Kernels& k = kernels(isa);
  const int64_t half = n_rot / 2;
  thread_local std::vector<float> cs, sn;  // [n_tokens, half]: reused, no heap traffic per call once grown
  cs.resize(n_tokens * half);
  sn.resize(n_tokens * half);
  rope_cos_sin(pos, n_tokens, n_rot, freq_base, cs.data(), sn.data());
  k.rope_neox(x, n_tokens, n_head, head_dim, half, cs.data(), sn.data());
}

}  // namespace tern::ops
