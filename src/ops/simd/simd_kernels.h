// The kernel table of one SIMD ISA: every entry instantiated for the vector policy V of the including translation
// unit (ops/avx2/ops_avx2.cpp or ops/avx512/ops_avx512.cpp).
#pragma once
#include "ops/kernels.h"
#include "ops/simd/simd_attention.h"
#include "ops/simd/simd_delta.h"
#include "ops/simd/simd_math.h"
#include "ops/simd/simd_mla.h"
#include "ops/simd/simd_ops.h"

namespace tern::ops {
namespace {

template <class V>
Kernels make_kernels(Isa isa, int64_t delta_chunk_min) {
  using E = Elementwise<V>;
  using N = Norms<V>;
  return Kernels{
      isa,
      &E::sigmoid,
      &E::silu,
      &E::softplus,
      &E::swiglu,
      &E::sigmoid_gate,
      &E::softmax_rows,
      &N::rms_norm,
      &N::rms_norm_gated,
      &N::l2_norm,
      &rope_neox_simd<V>,
      &conv_silu_simd<V>,
      &f32_to_f16_simd<V>,
      &AttnSimd<V>::attend,
      &AttnSimd<V>::hadamard,
      &DeltaSimd<V>::recurrent,
      &DeltaSimd<V>::chunked,
      delta_chunk_min,
      &rope_interleaved_simd<V>,
      &LayerNormSimd<V>::layer_norm,
      &IndexerSimd<V>::scores,
      &MlaSimd<V>::attend,
      &f16_to_f32_simd<V>,
      &MlaSimd<V>::attend_expanded,
  };
}

}  // namespace
}  // namespace tern::ops
