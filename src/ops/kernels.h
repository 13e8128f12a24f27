// Internal to src/ops: the per-ISA kernel table behind the public ops. The public functions (activation.h, norm.h,
// ...) check their arguments, split work across threads in an order fixed by the shapes alone, and call one entry
// of kernels(isa). The scalar _ref table (ops/*.cpp, baseline x86-64) is the specification; the AVX2 (+FMA, F16C)
// and AVX-512 tables (ops/avx2/, ops/avx512/, each built with its own flags and ops/simd/*.h) are chosen at run
// time. Every kernel computes each output row / head with one fixed operation sequence that depends on the shapes
// only, so within an ISA results never depend on batch composition or thread count. Float results differ across
// ISAs by rounding (vector exp, FMA, summation order); tests/ops states the tolerances.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "ops/attention.h"

namespace tern::ops {

// One attention task: tokens [0, n_tok) x query heads [0, n_q) that share one KV head.
struct AttnBlock {
  const float* q;      // row (t, j) at q + t * tok_stride + j * head_dim, f32
  float* out;          // same layout as q
  int64_t tok_stride;  // floats from one token's rows to the next's (n_head * head_dim)
  int64_t n_tok = 0, n_q = 0, head_dim = 0;
  int64_t n_pos0 = 0;  // token t attends cache positions [0, n_pos0 + t)
  const void* k;       // this KV head's rows [n_ctx] of k_type (kv_row_bytes(k_type, head_dim) bytes each)
  const void* v;       // ... of v_type
  KvType k_type = KvType::kF32, v_type = KvType::kF32;
  // The head's f16 shadow rows [n_ctx, head_dim] (or null): token t (n_pos = n_pos0 + t positions) reads
  // position p from it when p < sink or p >= n_pos - window (attention.h, KvConfig).
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  int64_t sink = 0, window = 0;
  float scale = 1.0f;
};

// One value head of the gated delta rule over all n_tokens tokens (see delta_rule.h for the math).
struct DeltaHead {
  const float* q;  // token t: q + t * q_stride [dk], l2-normalised, unscaled
  const float* k;  // token t: k + t * k_stride [dk]
  const float* v;  // token t: v + t * v_stride [dv]
  int64_t q_stride, k_stride, v_stride;
  const float* g;     // token t: g[t * gb_stride] (log decay)
  const float* beta;  // token t: beta[t * gb_stride]
  int64_t gb_stride;
  float* out;  // token t: out + t * out_stride [dv]
  int64_t out_stride;
  float* S;  // [dk, dv] f32, in/out
  int64_t n_tokens, dk, dv;
};

// One MLA attention task (mla.h): tokens [0, n_tok) x query heads [0, n_q), all over the one latent KV head.
struct MlaBlock {
  const float* q;          // row (t, j) at q + t * q_tok_stride + j * dk, f32
  float* out;              // row (t, j) at out + t * out_tok_stride + j * dv, f32
  int64_t q_tok_stride;    // n_head * dk
  int64_t out_tok_stride;  // n_head * dv
  int64_t n_tok = 0, n_q = 0, dk = 0, dv = 0;
  int64_t n_pos0 = 0;             // dense (sel null): token t attends cache positions [0, n_pos0 + t)
  const int32_t* sel = nullptr;   // sparse: token t attends sel[t * sel_stride + i], i < n_sel[t] (increasing)
  int64_t sel_stride = 0;
  const int32_t* n_sel = nullptr;
  const void* kv;  // [n_ctx, dk], f32 or (f16) IEEE half; the values are the first dv dims of each row
  bool f16 = false;
  float scale = 1.0f;
};

// One task of the expanded-form MLA attention (mla.h attention_mla_expanded): tokens [0, n_tok) of one query head
// over that head's own key and value rows (f32), every causal position.
struct MlaExpBlock {
  const float* q;          // token t: q + t * q_stride [dk]
  float* out;              // token t: out + t * out_stride [dv]
  int64_t q_stride = 0, out_stride = 0;
  int64_t n_tok = 0, dk = 0, dv = 0;
  int64_t n_pos0 = 0;      // token t attends positions [0, n_pos0 + t)
  const float* k;          // position p: k + p * k_stride [dk]
  const float* v;          // position p: v + p * v_stride [dv]
  int64_t k_stride = 0, v_stride = 0;
  float scale = 1.0f;
};

// Lightning-indexer scores of one task (mla.h indexer_topk): tokens [0, n_tok) x key positions [s0, s1).
struct IndexerBlock {
  const float* q;  // token t, head j: q + (t * n_head + j) * dim, f32
  const float* w;  // token t, head j: w[t * n_head + j]
  int64_t n_tok = 0, n_head = 0, dim = 0;
  int64_t s0 = 0, s1 = 0;  // token t scores positions s in [s0, min(s1, n_pos0 + t))
  int64_t n_pos0 = 0;
  const void* k;  // key rows [n_ctx, dim], f32 or (f16) IEEE half
  bool f16 = false;
  float* scores;  // token t, position s: scores[t * score_stride + s]
  int64_t score_stride = 0;
};

struct Kernels {
  Isa isa;
  // activation.h
  void (*sigmoid)(float* x, int64_t n);
  void (*silu)(float* x, int64_t n);
  void (*softplus)(float* x, int64_t n);
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  void (*sigmoid_gate)(float* o, const float* gate, int64_t n);
  void (*softmax_rows)(float* x, int64_t n_rows, int64_t n);
  // norm.h
  void (*rms_norm)(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps);
  void (*rms_norm_gated)(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                         float eps);
  void (*l2_norm)(const float* x, float* y, int64_t n_rows, int64_t n, float eps);
  // rope.h: rotates x [n_tokens, n_head, head_dim] by the angle table cos, sin [n_tokens, half].
  void (*rope_neox)(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t half, const float* cos,
                    const float* sin);
  // conv.h: outputs of channels [c0, c1); the state (read only here) is updated by the caller afterwards.
  void (*conv_silu)(const float* x, int64_t n_tokens, int64_t n_ch, int64_t kernel, const float* w,
                    const float* state, float* y, int64_t c0, int64_t c1);
  // attention.h
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);  // round to nearest even
  void (*attend)(const AttnBlock& b);
  void (*hadamard)(float* x, int64_t n_rows, int64_t n);  // x [n_rows, n], n a power of two (attention.h)
  // delta_rule.h
  void (*delta_recurrent)(const DeltaHead& h);
  void (*delta_chunked)(const DeltaHead& h);
  int64_t delta_chunk_min;  // gated_delta_rule uses delta_chunked from this many tokens on (measured, delta_rule.h)
  // mla.h. rope_interleaved: dims [off, off + 2 half) of every row (t, h) at x + (t * n_head + h) * head_stride,
  // pairs (2j, 2j + 1) rotated by the angle table cos, sin [n_tokens, half].
  void (*rope_interleaved)(float* x, int64_t n_tokens, int64_t n_head, int64_t head_stride, int64_t off,
                           int64_t half, const float* cos, const float* sin);
  void (*layer_norm)(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n,
                     float eps);
  void (*indexer_scores)(const IndexerBlock& b);
  void (*attend_mla)(const MlaBlock& b);
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);  // exact
  void (*attend_mla_expanded)(const MlaExpBlock& b);
};

// The table for isa; throws tern::Error if this CPU cannot run it.
const Kernels& kernels(Isa isa);

const Kernels& kernels_ref();
const Kernels& kernels_avx2();    // ops/avx2/ops_avx2.cpp
const Kernels& kernels_avx512();  // ops/avx512/ops_avx512.cpp
namespace simde_twin {
const Kernels& kernels_avx512();  // the same unit built against SIMDe (test binaries only, tern_avx512_simde)
}

// Test hook (tests/isa_variant.h): while set, kernels(Isa::kAvx512) returns this table on any host (the SIMDe
// twin); nullptr restores the native unit. Nothing the engine can select changes.
void set_avx512_kernels(const Kernels* k);

// The scalar twins (ops/*.cpp): the specification every ISA's kernel is tested against.
void sigmoid_ref(float* x, int64_t n);
void silu_ref(float* x, int64_t n);
void softplus_ref(float* x, int64_t n);
void swiglu_ref(const float* gate, const float* up, float* out, int64_t n);
void sigmoid_gate_ref(float* o, const float* gate, int64_t n);
void softmax_rows_ref(float* x, int64_t n_rows, int64_t n);
void rms_norm_ref(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps);
void rms_norm_gated_ref(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                        float eps);
void l2_norm_ref(const float* x, float* y, int64_t n_rows, int64_t n, float eps);
void rope_neox_ref(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t half, const float* cos,
                   const float* sin);
void conv_silu_ref(const float* x, int64_t n_tokens, int64_t n_ch, int64_t kernel, const float* w,
                   const float* state, float* y, int64_t c0, int64_t c1);
void f32_to_f16_ref(const float* x, uint16_t* y, int64_t n);
void attend_ref(const AttnBlock& b);
void hadamard_ref(float* x, int64_t n_rows, int64_t n);
void delta_recurrent_ref(const DeltaHead& h);
void delta_chunked_ref(const DeltaHead& h);
void rope_interleaved_ref(float* x, int64_t n_tokens, int64_t n_head, int64_t head_stride, int64_t off, int64_t half,
                          const float* cos, const float* sin);
void layer_norm_ref(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n, float eps);
void indexer_scores_ref(const IndexerBlock& b);
void attend_mla_ref(const MlaBlock& b);
void f16_to_f32_ref(const uint16_t* x, float* y, int64_t n);
void attend_mla_expanded_ref(const MlaExpBlock& b);

}  // namespace tern::ops
