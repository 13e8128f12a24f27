// Causal GQA self-attention of T new tokens against one sequence's KV cache (Qwen3.5-MoE gated full
// attention, contract section 7), plus the q/gate split and the sigmoid output gate. Scalar float32.
// Each (token, head) output is a pure function of its query and the cache rows 0..pos, so a batch gives
// bit-identical results to feeding the same tokens one by one, for any thread count.
// Non-goals: masks other than causal, sliding windows, paged caches, sinks, ALiBi.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

enum class KvType { kF32, kF16 };

// One layer's KV cache for one sequence (non-owning). Layout (docs/STATE_LAYOUT.md):
//   k: [n_head_kv, n_ctx, head_dim], v: [n_head_kv, n_ctx, head_dim], element type `type` (f32 = float,
//   f16 = IEEE half as uint16_t). Row (h, p) holds the post-norm, post-RoPE key / the value of position p.
// Head-major so that the rows one query head reads are contiguous in position.
struct KvCacheView {
  KvType type = KvType::kF32;
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_head_kv = 0;
  int64_t n_ctx = 0;
  int64_t head_dim = 0;
};

// Writes k, v [n_tokens, n_head_kv, head_dim] (f32) into cache positions pos0 .. pos0 + n_tokens - 1,
// rounding to half (nearest-even; the same bits on every ISA) for an f16 cache. Throws tern::Error if the range
// exceeds n_ctx.
void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t n_tokens, int64_t pos0,
              Isa isa = engine_isa());

// out[t, h, :] = sum_{p <= pos0 + t} softmax_p(scale * q[t, h, :] . K[g, p, :]) V[g, p, :], g = h / (n_head /
// n_head_kv) (HF repeat_kv / ggml broadcast: consecutive query heads share a KV head). q, out
// [n_tokens, n_head, head_dim] f32, must not alias. Positions pos0 .. pos0 + n_tokens - 1 must already be
// stored (kv_store). scale is 1/sqrt(head_dim) for Qwen3.5-MoE. Softmax in fp32 with a double sum. Work is split
// into tasks of up to 16 query tokens x 4 query heads of one KV head (f16 rows are converted in registers).
// Throws tern::Error on inconsistent shapes or a position range outside the cache.
void attention_causal(const float* q, int64_t n_tokens, int64_t n_head, const KvCacheView& kv, int64_t pos0,
                      float scale, float* out, Isa isa = engine_isa());

// Splits the q_proj output qg [n_tokens, n_head, 2 * head_dim] (per head: head_dim query values, then
// head_dim gate values — contract 7.1) into q and gate, each [n_tokens, n_head, head_dim]. A copy (memcpy per
// row): no per-ISA kernel.
void split_q_gate(const float* qg, int64_t n_tokens, int64_t n_head, int64_t head_dim, float* q, float* gate);

// o[i] *= sigmoid(gate[i]) over n values: the attention output gate (contract 7, step 7).
void apply_sigmoid_gate(float* o, const float* gate, int64_t n, Isa isa = engine_isa());

}  // namespace tern::ops
