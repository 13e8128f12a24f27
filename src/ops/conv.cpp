// Causal depthwise conv1d + SiLU with rolling state (see conv.h): scalar twin and the threaded dispatch.
#include "ops/conv.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/activation.h"
#include "ops/kernels.h"

namespace tern::ops {

constexpr int64_t kChannelBlock = 256;  // channels per parallel task (fixed: the split never changes a result)

// Outputs of channels [c0, c1) (the state is read, not updated).
void conv_silu_ref(const float* x, int64_t n_tokens, int64_t n_ch, int64_t kernel, const float* w,
                   const float* state, float* y, int64_t c0, int64_t c1) {
  const int64_t ns = kernel - 1;
  const int64_t nc = c1 - c0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* yr = y + t * n_ch + c0;
    std::fill(yr, yr + nc, 0.0f);
    // Tap i reads the input at time t - ns + i: from the state when negative, else from x.
    for (int64_t i = 0; i < kernel; ++i) {
      const int64_t src_t = t - ns + i;
      if (src_t < 0) {
        const int64_t si = ns + src_t;  // state column
        for (int64_t c = 0; c < nc; ++c) yr[c] += w[(c0 + c) * kernel + i] * state[(c0 + c) * ns + si];
      } else {
        const float* xr = x + src_t * n_ch + c0;
        for (int64_t c = 0; c < nc; ++c) yr[c] += w[(c0 + c) * kernel + i] * xr[c];
      }
    }
    for (int64_t c = 0; c < nc; ++c) yr[c] = silu(yr[c]);
  }
}

namespace {

// The state update of channels [c0, c1), after their outputs (a copy: the same for every ISA).
void conv_state_update(const float* x, int64_t n_tokens, int64_t n_ch, int64_t ns, float* state, int64_t c0,
                       int64_t c1) {
  // New state: the last ns entries of [state ; x], per channel, oldest first.
  for (int64_t c = c0; c < c1; ++c) {
    float* s = state + c * ns;
    for (int64_t j = 0; j < ns; ++j) {
      // Entry n_tokens + j of the concatenation [state(ns) ; x(n_tokens)]; reading s[src] with src > j
      // before it is overwritten makes the in-place shift safe.
      const int64_t src = n_tokens + j;
      s[j] = src < ns ? s[src] : x[(src - ns) * n_ch + c];
    }
  }
}

}  // namespace

void conv1d_causal_silu(const float* x, int64_t n_tokens, int64_t n_ch, int64_t kernel, const float* w,
                        float* state, float* y, Isa isa) {
  if (kernel < 1) fail("conv1d: kernel %lld must be >= 1", static_cast<long long>(kernel));
  const Kernels& k = kernels(isa);
  const int64_t n_blocks = (n_ch + kChannelBlock - 1) / kChannelBlock;
  parallel_for(n_blocks, [&](int64_t b) {
    const int64_t c0 = b * kChannelBlock, c1 = std::min(n_ch, c0 + kChannelBlock);
    k.conv_silu(x, n_tokens, n_ch, kernel, w, state, y, c0, c1);
    conv_state_update(x, n_tokens, n_ch, kernel - 1, state, c0, c1);
  });
}

}  // namespace tern::ops
