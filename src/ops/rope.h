// Partial rotary position embedding with NeoX pairing (Qwen3.5-MoE full attention: the first n_rot = 64 of
// 256 head dims; for text tokens the interleaved M-RoPE of the checkpoint collapses to exactly this, see the
// contract section 7.1). Non-goals: YaRN / frequency scaling, multi-axis (vision) positions.
//
// Angle table, chosen to reproduce HF fp32 (Qwen3_5MoeTextRotaryEmbedding) to within an ulp of the angle:
//   inv_freq[j] = fl32(1 / fl32(freq_base ^ (2j / n_rot)))   (torch: base ** (arange(0, d, 2) / d), fp32)
//   angle       = fl32(fl32(pos) * inv_freq[j])               (torch: the fp32 inv_freq x position product)
//   cos, sin    = correctly rounded cos/sin of that fp32 angle (computed in double, rounded once)
// llama.cpp instead builds the angle as pos * theta_scale^j by repeated fp32 multiplication
// (ggml_rope_cache_init); that differs from the above by a few ulp of the angle, i.e. < 1e-6 relative at
// small positions and up to ~pos * 2^-20 radians at large ones — within both references' own fp32 error.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

// cos_out, sin_out [n_tokens, n_rot / 2]: the table above for positions pos [n_tokens].
void rope_cos_sin(const int32_t* pos, int64_t n_tokens, int64_t n_rot, float freq_base, float* cos_out,
                  float* sin_out);

// In place on x [n_tokens, n_head, head_dim]: for every head, for j in [0, n_rot/2), the pair
// (x[j], x[j + n_rot/2]) is rotated by angle(pos[t], j):
//   x'[j]           = x[j] cos - x[j + n_rot/2] sin
//   x'[j + n_rot/2] = x[j + n_rot/2] cos + x[j] sin
// Dims n_rot..head_dim-1 are untouched. Throws tern::Error if n_rot is odd, not positive or > head_dim,
// or freq_base is not positive. The table is shared scalar code; the rotation runs the kernels of `isa`
// (ops/kernels.h), which all compute the two products and the difference / sum above without fusing them, so every
// ISA gives the ref's bits.
void rope_neox(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t n_rot,
               const int32_t* pos, float freq_base, Isa isa = engine_isa());

}  // namespace tern::ops
