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
Isa best_isa();
const char* isa_name(Isa isa);

}  // namespace tern
