// Element-wise activations and the row softmax, float32. The array forms run the kernels of `isa` (ops/kernels.h;
// default: the engine's ISA); within an ISA an element's result depends only on its input, never on its position,
// the array length or the thread count. The inline scalar forms below are the specification (the _ref kernels).
// Provenance of thresholds: softplus follows torch F.softplus(beta=1, threshold=20) and ggml op_softplus
// (x > 20 -> x); below the threshold we use log1p(exp(x)) (as torch) rather than ggml's log(1 + exp(x)),
// which loses all precision for x < about -17 — the two differ only there, by < 1e-7 absolute.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// In place over n values.
void sigmoid_inplace(float* x, int64_t n, Isa isa = engine_isa());
void silu_inplace(float* x, int64_t n, Isa isa = engine_isa());
void softplus_inplace(float* x, int64_t n, Isa isa = engine_isa());

// out[i] = silu(gate[i]) * up[i]  (the SwiGLU of the expert / shared-expert MLPs).  out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n, Isa isa = engine_isa());

// Softmax over each row of x [n_rows, n] in place: exp(x - max) / sum, sum accumulated in double
// (as ggml_vec_soft_max_f32's ggml_float sum). A row of all -inf gives NaN (no valid entry) — callers
// (attention) never produce one.
void softmax_rows(float* x, int64_t n_rows, int64_t n, Isa isa = engine_isa());

}  // namespace tern::ops
