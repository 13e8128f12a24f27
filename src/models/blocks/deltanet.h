// Gated DeltaNet mixer of Qwen3.5-MoE (contract section 8): qkv / z / beta / alpha projections, causal conv +
// SiLU with rolling state, l2-normalised q and k, the gated delta rule (chunked for prefill, recurrent for
// decode), gated RMSNorm with silu(z), out_proj. Heads in GGUF tiled order (value head p uses key head p % Hk).
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/dump.h"
#include "models/qwen35moe/weights.h"

namespace tern::models {

struct DeltaNetScratch {
  std::vector<float> qkv, u, z, beta, g, o;
};

void deltanet_block(const qwen35moe::Config& c, const qwen35moe::DeltaNetWeights& w, int layer,
                    const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y,
                    DeltaNetScratch& s, const TensorDump& dump);

}  // namespace tern::models
