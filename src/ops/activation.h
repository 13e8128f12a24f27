// Element-wise activations and the row softmax, float32. Scalar, auto-vectorisable; the results of every
// function depend only on its inputs (no thread-count or batch dependence).
// Provenance of thresholds: softplus follows torch F.softplus(beta=1, threshold=20) and ggml op_softplus
// (x > 20 -> x); below the threshold we use log1p(exp(x)) (as torch) rather than ggml's log(1 + exp(x)),
// which loses all precision for x < about -17 — the two differ only there, by < 1e-7 absolute.
#pragma once
#include <cmath>
#include <cstdint>

namespace tern::ops {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// In place over n values.
void sigmoid_inplace(float* x, int64_t n);
void silu_inplace(float* x, int64_t n);
void softplus_inplace(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i]  (the SwiGLU of the expert / shared-expert MLPs).  out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// Softmax over each row of x [n_rows, n] in place: exp(x - max) / sum, sum accumulated in double
// (as ggml_vec_soft_max_f32's ggml_float sum). A row of all -inf gives NaN (no valid entry) — callers
// (attention) never produce one.
void softmax_rows(float* x, int64_t n_rows, int64_t n);

}  // namespace tern::ops
