// AVX-512 (VL + VNNI) repacked (x8) gemm kernels: simd_repack.h on 256-bit vectors with vpdpbusd sums (exact
// int32, so the same bits as AVX2 and the ref), and for Q4_0, Q8_0, Q4_K and Q6_K simd_repack512.h's 512-bit
// kernels over pairs of groups. Compiled with TERN_AVX512_FLAGS; reached only through the
// dispatch after isa_supported(kAvx512).
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (and no such report)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "core/avx512.h"
#include "quant/avx2/simd_repack.h"
#include "quant/avx512/simd_repack512.h"

namespace tern::quant {
namespace {
struct OpsRepackVnni {
  static constexpr bool kVnni = true;
  static __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static constexpr bool kPairs = true;
  static constexpr int kPairTile = x16k::kTile;  // tokens per tile of the pair kernels
  template <Type kW>
  static int64_t pairs(const RepackArgs& a, int64_t t0, int nt, const uint8_t* const* xr) {
    return x16k::pairs<kW>(a, t0, nt, xr);
  }
};
}  // namespace

TERN_AVX512_BEGIN
RepackFn repack_fn_avx512(Type w) { return x8k::lookup<OpsRepackVnni>(w); }
TERN_AVX512_END

}  // namespace tern::quant
