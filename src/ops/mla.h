// The ops of multi-head latent attention with DeepSeek's sparse-attention ("lightning") indexer, as GLM-5
// (`glm-dsa`) runs them (contract /work/shared/spec/glm_moe_dsa.md sections 5-8): interleaved-pair RoPE, the
// indexer key's LayerNorm, the indexer's top-k key selection and the absorbed-form attention over a one-head latent
// cache whose values are the first dv dims of each key row. Float32 compute; caches f32 or f16 (ops::KvType).
// Like attention.h, each (token, head) output is a pure function of its inputs and the cache rows it reads, so a
// batch gives the same bits as the tokens one by one, for any thread count. `isa` selects the kernels
// (ops/kernels.h); the scalar _ref table is the specification.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "ops/attention.h"

namespace tern::ops {

// Interleaved-pair RoPE (ggml's GGML_ROPE_TYPE_NORM; HF apply_rotary_pos_emb_interleave up to a fixed permutation
// of the rotated dims), in place on x, rows [n_tokens, n_head] of `head_stride` floats: in each row, dims
// [off, off + n_rot) are rotated pairwise, pair j = (x[off + 2j], x[off + 2j + 1]) by angle(pos[t], j):
//   x'[off + 2j]     = x[off + 2j] cos - x[off + 2j + 1] sin
//   x'[off + 2j + 1] = x[off + 2j + 1] cos + x[off + 2j] sin
// with rope.h's angle table (rope_cos_sin: inv_freq[j] = freq_base^(-2j / n_rot)). Other dims are untouched. The
// two products and the difference / sum are never fused, so every ISA gives the ref's bits.
// Throws tern::Error if n_rot is odd or not positive, off < 0, off + n_rot > head_stride, freq_base <= 0, or
// n_tokens / n_head is negative.
void rope_interleaved(float* x, int64_t n_tokens, int64_t n_head, int64_t head_stride, int64_t off, int64_t n_rot,
                      const int32_t* pos, float freq_base, Isa isa = engine_isa());

// y = (x - mean(x)) / sqrt(var(x) + eps) * w + b per row of x [n_rows, n] (biased variance, as torch LayerNorm);
// w, b [n] (nullptr: 1 / 0). Mean and variance from double sums (two passes), then in fp32
// (x - fl(mean)) * fl(1 / sqrt(var + eps)) * w + b, unfused. SIMD ISAs sum in another order (their mean or 1/std
// may round one ulp apart from the ref's). y may alias x. Throws tern::Error if n < 1 or n_rows < 0.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n, float eps,
                Isa isa = engine_isa());

// Writes rows [n_tokens, dim] (f32) into a one-head row cache [n_ctx, dim] (f32, or f16 rounded to nearest even)
// at positions pos0 .. pos0 + n_tokens - 1. Throws tern::Error if the range exceeds n_ctx.
void rows_store(void* cache, KvType type, int64_t n_ctx, int64_t dim, const float* x, int64_t n_tokens, int64_t pos0,
                Isa isa = engine_isa());

// The lightning indexer's choice of keys. For token t (position p = pos0 + t) and every cached key s <= p:
//   score(t, s) = sum_j w[t, j] * relu(q[t, j, :] . k[s, :])        (j over n_head heads; scales folded into w)
// k is the indexer's key cache [n_ctx, dim] (f32 or f16, keys stored for positions 0 .. pos0 + n_tokens - 1).
// sel[t * topk ..] receives the positions of the min(topk, p + 1) highest scores, in increasing position order;
// n_sel[t] their count. Ties at the cut go to the lower position; a NaN score ranks below every number. A token
// with p + 1 <= topk takes every causal key without scoring. q [n_tokens, n_head, dim], w [n_tokens, n_head].
// Each dot product and the head sum run in f32 as separate products and adds in the ref's order (dims ascending,
// heads ascending); the vector kernels run that sequence lane by lane (one key per lane), so every ISA computes the
// ref's bits for every score and selects the same keys. Work: tasks of 16 tokens x 2048 key positions, then the
// selection per token (nth_element + sort, shared scalar code); scores of up to 2^22 (token, key) pairs are held
// at once (a longer prefill runs in rounds).
// Throws tern::Error on bad shapes (n_head, dim or topk < 1, a position range outside the cache, n_ctx >= 2^31).
void indexer_topk(const float* q, const float* w, int64_t n_tokens, int64_t n_head, int64_t dim, const void* k,
                  KvType type, int64_t n_ctx, int64_t pos0, int64_t topk, int32_t* sel, int32_t* n_sel,
                  Isa isa = engine_isa());

// Absorbed-form MLA attention (MQA over one latent head): for token t (position p = pos0 + t) and query head h,
//   out[t, h, :] = sum_{s in S_t} softmax_s(scale * q[t, h, :] . kv[s, :]) kv[s, 0 : dv]
// where kv is the latent cache [n_ctx, dk] (f32 or f16; row s = [latent (dv) ; rope key (dk - dv)]) and
// S_t = {0 .. p} when sel is null, else the n_sel[t] positions sel[t * sel_stride ..] (increasing, each <= p).
// q [n_tokens, n_head, dk], out [n_tokens, n_head, dv], must not alias. Softmax in fp32 with a double sum, keys in
// increasing position order, so a sparse selection of every causal key gives the dense result's bits. f16 rows are
// converted in registers. Work is split into tasks of up to 16 query tokens x 8 query heads.
// Throws tern::Error on inconsistent shapes (dv > dk, n_head < 1, positions outside the cache, out overlapping q)
// or a bad selection (n_sel[t] outside [1, sel_stride], positions not strictly increasing or outside [0, p]).
void attention_mla(const float* q, int64_t n_tokens, int64_t n_head, const void* kv, KvType type, int64_t n_ctx,
                   int64_t dk, int64_t dv, int64_t pos0, const int32_t* sel, int64_t sel_stride,
                   const int32_t* n_sel, float scale, float* out, Isa isa = engine_isa());

// Cache rows [pos0, pos0 + n_rows) of a one-head row cache [n_ctx, dim] (f32 or f16) as f32 into out
// [n_rows, dim] (f16 converted exactly). Throws tern::Error for a range outside the cache or a block type.
void rows_load(const void* cache, KvType type, int64_t n_ctx, int64_t dim, int64_t pos0, int64_t n_rows, float* out,
               Isa isa = engine_isa());

// The plain ("expanded") form of MLA attention, for prefill: every query head has keys and values of its own,
// expanded from the latent rows by the caller (K = [W_UK c ; rope key], V = W_UV c). For token t (position
// p = pos0 + t) and head h, over every causal position s <= p:
//   out[t, h, :] = sum_s softmax_s(scale * q[t, h, :] . k[h, s, :]) v[h, s, :]
// q: token t head h at q + t * q_stride + h * dk; out: out + t * out_stride + h * dv (must not overlap q);
// k [n_head, n_ctx, dk], v [n_head, n_ctx, dv], f32, positions 0 .. pos0 + n_tokens - 1 filled. The same math as
// attention_mla over the latent cache, with dk + dv MACs per (query, key, head) instead of 2 kv_lora + rope.
// Softmax in fp32 with a double sum, positions in order. Tasks of up to 16 tokens x one head; the vector kernels
// share each key and value row among 4 tokens and tile positions so that a head's rows are read from memory once
// per task; a token's arithmetic does not depend on the tokens beside it (its own positions only: weights past
// them are exactly 0), so results never depend on the thread count.
// Throws tern::Error on inconsistent shapes or strides, positions outside the cache or out overlapping q.
void attention_mla_expanded(const float* q, int64_t q_stride, int64_t n_tokens, int64_t n_head, const float* k,
                            const float* v, int64_t n_ctx, int64_t dk, int64_t dv, int64_t pos0, float scale,
                            float* out, int64_t out_stride, Isa isa = engine_isa());

}  // namespace tern::ops
