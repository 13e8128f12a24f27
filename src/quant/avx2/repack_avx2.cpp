// AVX2 (+FMA, F16C) repacked (x8) gemm kernels: simd_repack.h with maddubs sums. Compiled with TERN_AVX2_FLAGS;
// reached only through the dispatch after isa_supported(kAvx2).
#include "quant/avx2/simd_repack.h"

namespace tern::quant {
namespace {
struct OpsRepackAvx2 {
  static constexpr bool kVnni = false;
  static constexpr bool kPairs = false;  // no 512-bit kernels
};
}  // namespace

RepackFn repack_fn_avx2(Type w) { return x8k::lookup<OpsRepackAvx2>(w); }

}  // namespace tern::quant
