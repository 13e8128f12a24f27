// Row normalisations of the Qwen3.5-MoE forward, float32, sums accumulated in double (as ggml's ggml_float
// sums; the SIMD kernels too, in their own order), one row at a time so results never depend on batch size or
// thread count. `isa` selects the kernels (ops/kernels.h; default: the engine's ISA).
// Non-goals: the HF zero-centred (1 + w) form — GGUF already stores 1 + w, so callers holding HF weights
// must fold the +1 at load time.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

// y = x / sqrt(mean(x^2) + eps) * w over each row of x [n_rows, n]; w [n] (nullptr = no weight).
// ggml rms_norm followed by ggml_mul, i.e. HF Qwen3_5MoeRMSNorm with the folded (1 + w). y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps,
              Isa isa = engine_isa());

// y = x / max(||x||_2, eps) over each row of x [n_rows, n] (ggml l2_norm). llama.cpp's qwen35moe applies
// this to the DeltaNet q and k heads (rows of dk = 128) with eps = rms_norm_eps = 1e-6; HF instead uses
// x * rsqrt(sum(x^2) + 1e-6). The two agree to < 1e-6 relative unless ||x|| is below ~1e-3. y may alias x.
void l2_norm(const float* x, float* y, int64_t n_rows, int64_t n, float eps, Isa isa = engine_isa());

// y = w * (x / sqrt(mean(x^2) + eps)) * silu(z) per row (one DeltaNet value head of n = dv values):
// HF Qwen3_5MoeRMSNormGated / llama.cpp build_norm_gated. x, z, y [n_rows, n]; w [n] shared by all rows
// (plain weight, not 1 + w). y may alias x or z.
void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                    float eps, Isa isa = engine_isa());

}  // namespace tern::ops
