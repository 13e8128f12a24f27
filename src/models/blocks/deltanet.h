// Gated DeltaNet mixer of Qwen3.5-MoE (contract section 8): qkv / z / beta / alpha projections, causal conv +
// SiLU with rolling state, l2-normalised q and k, the gated delta rule (chunked for prefill, recurrent for
// decode), gated RMSNorm with silu(z), out_proj. Heads in GGUF tiled order (value head p uses key head p % Hk).
#pragma once
#include <vector>

#include "models/blocks/batch.h"
#include "models/dump.h"
#include "models/blocks/linear.h"
#include "models/blocks/tensor_split.h"

namespace tern::models {

struct DeltaNetParams {
  int64_t n_embd = 0;
  int64_t conv_kernel = 0;   // causal conv taps
  int64_t head_k_dim = 0, n_k_heads = 0;
  int64_t n_v_heads = 0, head_v_dim = 0;
  float rms_eps = 1e-6f;     // q/k l2 norms and the gated output norm
  // Value-head order of the weights: tiled (value head p uses key head p % n_k_heads: qwen35/qwen35moe GGUFs, the
  // converter reorders them) or grouped (p uses key head p / (n_v_heads / n_k_heads): qwen3next GGUFs, as in HF).
  bool grouped_v_heads = false;
  int64_t conv_dim() const { return 2 * n_k_heads * head_k_dim + n_v_heads * head_v_dim; }
  int64_t value_dim() const { return n_v_heads * head_v_dim; }
};

struct DeltaNetWeights {
  Linear wqkv;             // {n_embd, conv_dim}: q | k | v (v heads in the params' order)
  Linear wgate;            // {n_embd, value_dim}: z
  Linear wbeta, walpha;    // {n_embd, n_v_heads}; or, when absent, ...
  Linear wba;              // ... {n_embd, 2 * n_v_heads} fused, per key head: its beta rows, then its alpha rows
  Linear wout;             // {value_dim, n_embd}
  backend::Floats conv;           // [conv_dim][conv_kernel] (GGUF ssm_conv1d ne = {kernel, conv_dim})
  backend::Floats dt_bias, a;     // [n_v_heads]; a = -exp(A_log)
  backend::Floats norm;           // [head_v_dim], plain (not 1 + w)
};


struct DeltaNetScratch {
  Scratch qkv, u, z, beta, g, o, ba, beta_all, g_all;
  TensorSplitScratch split;
};

void deltanet_block(backend::Backend& be, const DeltaNetParams& c, const DeltaNetWeights& w, int layer,
                    const std::vector<Segment>& segs, const float* x, int64_t n_rows, float* y,
                    DeltaNetScratch& s, const TensorDump& dump, const TensorSplit* split = nullptr);
// `split`: this rank runs the heads of `c` (its share), wout holds its rows, and wbeta / walpha / wba, dt_bias and a
// are whole (tensor_split.h); null: one process.

}  // namespace tern::models
