// CPU feature detection and the kernel ISA levels tern dispatches between.
#pragma once
#include <string>

namespace tern {

enum class Isa { kRef = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
  std::string summary() const;
};

const CpuFeatures& cpu_features();
bool isa_supported(Isa isa);  // can this machine run kernels compiled for isa?
Isa best_isa();               // from the CPU alone (never affected by the test hook below)
// The ISA the engine's kernels use (the ops' default; quant::active_isa should forward here): best_isa(), or what
// set_engine_isa asked for, fixed on first use and logged once with the CPU's features.
Isa engine_isa();
// --isa: makes the engine's kernels use `isa` instead of the best one (e.g. the AVX2 kernels on an AVX-512 CPU, to
// measure them). Throws Error when this CPU cannot run it, or when engine_isa() was already fixed to another ISA.
void set_engine_isa(Isa isa);
const char* isa_name(Isa isa);
// "ref", "avx2" or "avx512" -> the Isa; false for anything else.
bool parse_isa(const std::string& name, Isa* isa);

// Test hook (tests/isa_variant.h): while hidden, isa_supported(kAvx512) is false. The tests hide native AVX-512
// while the SIMDe twins stand in for the AVX-512 units, so a dispatch not routed to its twin refuses kAvx512
// instead of quietly running native code on a host that has it.
void hide_native_avx512(bool hide);

}  // namespace tern
