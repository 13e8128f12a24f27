// Gated delta rule of the Gated DeltaNet layers (contract 8.5 / 8.6), float32: the token recurrence and the
// chunked parallel form (HF torch_chunk_gated_delta_rule, chunk 64), with incoming/outgoing state.
//
// Conventions (parameter-free, shared by both forms):
// - Head sharing: value head h uses key head h % n_k_heads — the *tiled* order of a qwen35moe GGUF (the
//   converter reorders V heads; ggml's fused op uses iq1 = iv1 % neq1) — or, with `grouped`, key head
//   h / (n_v_heads / n_k_heads): the blocked order of HF checkpoints and of qwen3next GGUFs (contract 8.4).
//   The state's head order is the inputs' value-head order either way.
// - q and k arrive already l2-normalised (ops::l2_norm, eps = rms_norm_eps, as llama.cpp); the kernels
//   multiply q by 1/sqrt(head_k_dim) themselves (HF and llama.cpp scale q, not the output).
// - State layout: [n_v_heads][head_k_dim][head_v_dim] f32, S[h][i][j] with i the key index, j the value
//   index (HF's [B, Hv, dk, dv] without the batch). ggml stores the transpose (key index fastest).
// Each value head is computed by one thread in a fixed order: results never depend on the thread count. `isa`
// selects the kernels (ops/kernels.h; default: the engine's ISA).
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace tern::ops {

struct DeltaRuleShape {
  int64_t n_tokens = 0;
  int64_t n_k_heads = 0;   // Hk (16 for Qwen3.5-35B-A3B)
  int64_t n_v_heads = 0;   // Hv (32); a multiple of n_k_heads
  int64_t head_k_dim = 0;  // dk (128)
  int64_t head_v_dim = 0;  // dv (128)
  bool grouped = false;    // value head h pairs with key head h / (Hv / Hk) (else h % Hk)
};

// Inputs for n_tokens tokens. Token t, key head kh: q + t * q_stride + kh * head_k_dim (same for k);
// token t, value head h: v + t * v_stride + h * head_v_dim. Strides (in floats) let the kernels read the
// q | k | v thirds of the conv output rows in place.
struct DeltaRuleInputs {
  const float* q = nullptr;  // l2-normalised queries, not yet scaled
  int64_t q_stride = 0;
  const float* k = nullptr;  // l2-normalised keys
  int64_t k_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  const float* g = nullptr;     // [n_tokens, n_v_heads] log decay g = ssm_a * softplus(alpha + dt_bias) <= 0
  const float* beta = nullptr;  // [n_tokens, n_v_heads] sigmoid(b)
};

// Token recurrence, per token and value head: S <- exp(g) S; e = S^T k; S <- S + k (beta (v - e))^T;
// o = S^T (q / sqrt(dk)).  state [n_v_heads, dk, dv] in/out; out [n_tokens, n_v_heads, dv].
void gated_delta_rule_recurrent(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out,
                                Isa isa = engine_isa());

// The same map computed 64 tokens at a time (contract 8.6, WY form solved by forward substitution);
// equal to the recurrence up to fp32 rounding. A trailing partial chunk is processed at its true length,
// which equals HF's zero padding (padded steps have beta = 0, g = 0 and leave the state unchanged).
constexpr int64_t kDeltaRuleChunk = 64;
void gated_delta_rule_chunked(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out,
                              Isa isa = engine_isa());

// Chooses the form by n_tokens only: chunked from delta_rule_chunk_min(isa) tokens on, the recurrence below; the
// choice is logged once. Today the recurrence at every length on every ISA, by measurement (2026-12-04, two runs
// on a quiet 16-core AVX-512 Xeon, Hv 32, Hk 16, dk = dv = 128, mixed decays; medians of 5 interleaved rounds, us
// per token at T = 64 and 512, chunked / recurrent, range over both runs):
//              1 thread              2 threads             8 threads
//   avx2       92-121 / 63-67        48-76 / 33-47         20-22 / 12.6-14.9
//   avx512     64-79 / 54-57         34-49 / 27-38         13.2-18.7 / 10.3-20.8
//   ref (T=64) 293 / 244             149 / 128             73 / 63
// The fused column-blocked recurrence (ops/simd/simd_delta.h) keeps each state block in L1 over 64 tokens and
// does ~4 vector ops per state element and token; the chunked form's products take about as many FMAs, plus the
// decay matrix and the triangular solve (ik_llama.cpp found the same on CPU). Only avx512 at 8 threads was mixed
// (one run 1.2-1.3x for the recurrence, one 1.1x for the chunked form); 2 threads, the engine's target here,
// favour the recurrence by 1.3-1.6x. The form cannot follow the thread count: results must not depend on it.
// Command: build/tern_bench_delta 1 2 8 (bench/delta/delta_forms.cpp).
// Lower kernels' delta_chunk_min for an ISA where the chunked form measures faster.
int64_t delta_rule_chunk_min(Isa isa);
void gated_delta_rule(const DeltaRuleShape& shape, const DeltaRuleInputs& in, float* state, float* out,
                      Isa isa = engine_isa());

}  // namespace tern::ops
