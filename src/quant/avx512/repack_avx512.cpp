// AVX-512 (VL + VNNI) repacked (x8) gemm kernels: simd_repack.h on 256-bit vectors with vpdpbusd sums (exact
// int32, so the same bits as AVX2 and the ref). Compiled with TERN_AVX512_FLAGS; reached only through the
// dispatch after isa_supported(kAvx512).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "core/avx512.h"
#include "quant/avx2/simd_repack.h"

namespace tern::quant {
namespace {
struct OpsRepackVnni {
  static constexpr bool kVnni = true;
  static __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
};
}  // namespace

TERN_AVX512_BEGIN
RepackFn repack_fn_avx512(Type w) { return x8k::lookup<OpsRepackVnni>(w); }
TERN_AVX512_END

}  // namespace tern::quant
