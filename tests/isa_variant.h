// The kernel variants ISA-parameterised tests run: each ISA's native units, plus the SIMDe twins of the AVX-512
// units (tern_add_avx512_sources, core/avx512.h), which run the AVX-512 source on any AVX2 host. A test routes
// Isa::kAvx512 to the twins for its duration with ScopedIsaVariant; a module that gains AVX-512 units adds its
// dispatch hook there, and every test that loops over kIsaVariants covers "avx512 (simde)" with no other change.
#pragma once
#include <string>

#include "core/cpu.h"
#include "ops/kernels.h"
#include "quant/kernels_impl.h"

#ifndef TERN_SIMDE_TWIN
#define TERN_SIMDE_TWIN 0  // configured with -DTERN_SIMDE_TWIN=OFF: no twin linked into the test binaries
#endif

namespace tern::test {

struct IsaVariant {
  Isa isa;
  bool simde;  // isa == kAvx512 only: the AVX-512 source compiled against SIMDe instead of the native unit
};
inline constexpr IsaVariant kIsaVariants[] = {
    {Isa::kRef, false}, {Isa::kAvx2, false}, {Isa::kAvx512, false}, {Isa::kAvx512, true}};

// Test-name safe: ref, avx2, avx512_native, avx512_simde.
inline std::string variant_name(IsaVariant v) {
  if (v.isa == Isa::kAvx512) return v.simde ? "avx512_simde" : "avx512_native";
  return isa_name(v.isa);
}

// Why this build or host cannot run v, for GTEST_SKIP; empty when it can. The twin needs only AVX2 underneath.
inline std::string variant_unavailable(IsaVariant v) {
  if (v.simde && !TERN_SIMDE_TWIN) return "built with -DTERN_SIMDE_TWIN=OFF (no SIMDe twin linked)";
  const Isa needs = v.simde ? Isa::kAvx2 : v.isa;
  if (!isa_supported(needs))
    return std::string("this CPU lacks ") + isa_name(needs) + " (" + cpu_features().summary() + ")";
  return "";
}

// While alive, and when v.simde, every module's dispatch runs Isa::kAvx512 on the SIMDe twins; otherwise a no-op.
// Native AVX-512 is hidden meanwhile (hide_native_avx512), so a module whose hook is missing here fails its
// avx512_simde tests on every host rather than passing them with native code where the CPU has AVX-512.
// The hooks are process-wide: one variant at a time (gtest runs tests one after another).
class ScopedIsaVariant {
 public:
  explicit ScopedIsaVariant(IsaVariant v) : twin_(v.simde && TERN_SIMDE_TWIN) {
    if (!twin_) return;
    hide_native_avx512(true);
#if TERN_SIMDE_TWIN
    static const quant::Avx512Entries kQuant{&quant::simde_twin::gemm_fn_avx512,
                                             &quant::simde_twin::act_prims_avx512,
                                             &quant::simde_twin::repack_fn_avx512};
    quant::set_avx512_entries(&kQuant);
    ops::set_avx512_kernels(&ops::simde_twin::kernels_avx512());
#endif
  }
  ~ScopedIsaVariant() {
    if (!twin_) return;
    quant::set_avx512_entries(nullptr);
    ops::set_avx512_kernels(nullptr);
    hide_native_avx512(false);
  }
  ScopedIsaVariant(const ScopedIsaVariant&) = delete;
  ScopedIsaVariant& operator=(const ScopedIsaVariant&) = delete;

 private:
  bool twin_;
};

}  // namespace tern::test
