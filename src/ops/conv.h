// Causal depthwise conv1d + SiLU with a rolling per-sequence state: the Gated DeltaNet short convolution
// (kernel 4 over the 8192 q|k|v channels; contract 8.2). The same code serves prefill (T tokens) and decode
// (T = 1); every output is the same fixed-order sum of the same products, so feeding tokens one by one or in
// any split gives bit-identical outputs and state. Non-goals: bias (Qwen3.5 has none), other activations.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

// x      [n_tokens, n_ch]   pre-conv inputs (the in_proj_qkv output rows), f32
// w      [n_ch, kernel]     taps per channel, w[c][kernel-1] multiplies the current token (GGUF ssm_conv1d,
//                           ne = {kernel, n_ch}; HF conv1d.weight [n_ch, 1, kernel] squeezed)
// state  [n_ch, kernel-1]   the last kernel-1 inputs per channel, oldest first (llama.cpp's {3, 8192}
//                           layout); all zeros for a fresh sequence. Updated in place to the last kernel-1
//                           inputs of [state ; x].
// y      [n_tokens, n_ch]   y[t][c] = silu(sum_{i<kernel} w[c][i] * m[t - kernel + 1 + i][c]) where m is x
//                           continued backwards by the state. Must not alias x or state.
// Throws tern::Error if kernel < 1. `isa` selects the kernels (ops/kernels.h); the equalities above hold per ISA.
void conv1d_causal_silu(const float* x, int64_t n_tokens, int64_t n_ch, int64_t kernel, const float* w,
                        float* state, float* y, Isa isa = engine_isa());

}  // namespace tern::ops
