// Per-ISA kernel tables of the ops (see kernels.h): the scalar _ref table and the run-time choice.
#include "ops/kernels.h"

#include <atomic>

#include "core/error.h"

namespace tern::ops {

namespace {
std::atomic<const Kernels*> g_avx512_override{nullptr};  // set_avx512_kernels (tests only)
}  // namespace

void set_avx512_kernels(const Kernels* k) { g_avx512_override.store(k, std::memory_order_release); }

const Kernels& kernels_ref() {
  static const Kernels k = {
      Isa::kRef,
      &sigmoid_ref,
      &silu_ref,
      &softplus_ref,
      &swiglu_ref,
      &sigmoid_gate_ref,
      &softmax_rows_ref,
      &rms_norm_ref,
      &rms_norm_gated_ref,
      &l2_norm_ref,
      &rope_neox_ref,
      &conv_silu_ref,
      &f32_to_f16_ref,
      &attend_ref,
      &hadamard_ref,
      &delta_recurrent_ref,
      &delta_chunked_ref,
      // Never: the scalar recurrence measured faster at every length (table in delta_rule.h).
      int64_t{1} << 40,
      &rope_interleaved_ref,
      &layer_norm_ref,
      &indexer_scores_ref,
      &attend_mla_ref,
      &f16_to_f32_ref,
      &attend_mla_expanded_ref,
  };
  return k;
}

const Kernels& kernels(Isa isa) {
  if (isa == Isa::kAvx512) {
    if (const Kernels* k = g_avx512_override.load(std::memory_order_acquire)) return *k;  // the twin runs anywhere
  }
  if (!isa_supported(isa))
    fail("ops: ISA %s requested but this CPU lacks it (has: %s)", isa_name(isa), cpu_features().summary().c_str());
  switch (isa) {
    case Isa::kRef: return kernels_ref();
    case Isa::kAvx2: return kernels_avx2();
    case Isa::kAvx512: return kernels_avx512();
  }
  return kernels_ref();
}

}  // namespace tern::ops
