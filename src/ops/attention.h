// Causal GQA self-attention of T new tokens against one sequence's KV cache (Qwen3.5-MoE gated full
// attention, contract section 7), plus the q/gate split and the sigmoid output gate. Scalar float32.
// Each (token, head) output is a pure function of its query and the cache rows 0..pos, so a batch gives
// bit-identical results to feeding the same tokens one by one, for any thread count.
// Non-goals: masks other than causal, sliding-window attention, paged caches, ALiBi.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

// KV cache element types. q8_0 / q4_0 rows are ggml's blocks of 32 (an f16 scale, then 32 int8 / 16 bytes of
// nibbles, value = d * q resp. d * (nibble - 8)), written by kv_store as a row is appended and read by the attention
// kernels block by block (no dequantized copy of the cache). Their head_dim must be a multiple of 32.
enum class KvType { kF32, kF16, kQ8_0, kQ4_0 };

const char* kv_type_name(KvType t);          // "f32", "f16", "q8_0", "q4_0"
bool parse_kv_type(const char* s, KvType* t);  // false for an unknown name
inline bool kv_quantized(KvType t) { return t == KvType::kQ8_0 || t == KvType::kQ4_0; }
int64_t kv_row_bytes(KvType t, int64_t dim);  // bytes of one row of dim elements (dim % 32 == 0 when quantized)

// How a sequence's KV cache is kept (SequenceState builds the views from it):
//   k, v: element types of the K and V rows;
//   rotate: K, V and Q are multiplied by an orthonormal Hadamard matrix (blocks of the largest power of two that
//     divides head_dim) before K and V are stored, and the attention output by its inverse (the same matrix): the
//     same attention in exact arithmetic, with outliers spread over the row so that a quantized row loses less;
//   sink, window: for a quantized type, the first `sink` positions and, for a query at position P, the positions
//     P - window + 1 .. P are read from an f16 copy of the rows (the "shadow": written with every row, its pages
//     given back once a row leaves the window; SequenceState). A query's reads depend on its own position only,
//     so a batch still gives the results of feeding its tokens one by one.
struct KvConfig {
  KvType k = KvType::kF16, v = KvType::kF16;
  bool rotate = false;
  int64_t sink = 0, window = 0;
  KvConfig() = default;
  KvConfig(KvType t) : k(t), v(t) {}  // NOLINT: one type for K and V, no rotation, no shadow
  bool shadow_k() const { return kv_quantized(k) && (sink > 0 || window > 0); }
  bool shadow_v() const { return kv_quantized(v) && (sink > 0 || window > 0); }
};

// One layer's KV cache for one sequence (non-owning). Layout (docs/STATE_LAYOUT.md):
//   k: [n_head_kv, n_ctx, row(k_type, head_dim)], v: [n_head_kv, n_ctx, row(v_type, head_dim)] (f32 = float,
//   f16 = IEEE half as uint16_t, q8_0 / q4_0 = blocks); k16 / v16 (the shadow, or null): [n_head_kv, n_ctx,
//   head_dim] f16. Row (h, p) holds the post-norm, post-RoPE (and, with rotate, rotated) key / value of position p.
// Head-major so that the rows one query head reads are contiguous in position.
struct KvCacheView {
  KvType k_type = KvType::kF32, v_type = KvType::kF32;
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_head_kv = 0;
  int64_t n_ctx = 0;
  int64_t head_dim = 0;
  uint16_t* k16 = nullptr;
  uint16_t* v16 = nullptr;
  int64_t sink = 0, window = 0;  // used where k16 / v16 are set
  bool rotate = false;
};

// The Hadamard block kv rotation uses for head_dim: the largest power of two that divides it.
int64_t hadamard_block(int64_t head_dim);
// x [n_rows, n] (n a multiple of block, block a power of two): each consecutive block of n is multiplied by the
// orthonormal Walsh-Hadamard matrix of that size (symmetric: applying it twice gives x back up to rounding).
void hadamard_rows(float* x, int64_t n_rows, int64_t n, int64_t block, Isa isa = engine_isa());

// Writes k, v [n_tokens, n_head_kv, head_dim] (f32) into cache positions pos0 .. pos0 + n_tokens - 1 (rotated
// first when kv.rotate): rounded to half (nearest-even) for f16, ggml's reference q8_0 encoding, q4_0 blocks with a
// least-squares scale (never a larger error than ggml's reference encoding), the same bits on every ISA; and to
// half in the shadow where there is one. Throws tern::Error if
// the range exceeds n_ctx or a quantized type's head_dim is not a multiple of 32.
void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t n_tokens, int64_t pos0,
              Isa isa = engine_isa());

// out[t, h, :] = sum_{p <= pos0 + t} softmax_p(scale * q[t, h, :] . K[g, p, :]) V[g, p, :], g = h / (n_head /
// n_head_kv) (HF repeat_kv / ggml broadcast: consecutive query heads share a KV head). q, out
// [n_tokens, n_head, head_dim] f32, must not alias. Positions pos0 .. pos0 + n_tokens - 1 must already be
// stored (kv_store). scale is 1/sqrt(head_dim) for Qwen3.5-MoE. Softmax in fp32 with a double sum. Work is split
// into tasks of up to 16 query tokens x 4 query heads of one KV head (f16 and quantized rows are converted in
// registers; several tokens over a quantized cache: all query heads of the KV head, its rows decoded once per tile
// for all of them; up to 16 tokens over f16 / f32 rows with at least one KV head per thread, as in decoding: all
// query heads of the KV head, its rows read a tile at a time for them all, so a long context is read from memory
// once per token).
// With kv.rotate, q is rotated (into scratch) and out rotated back.
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
