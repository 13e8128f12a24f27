// Internal to the repacked (x8) kernels: byte offsets inside one block of a group of 8 rows (see repack.h for
// the layouts), the argument pack, and the per-ISA kernel lookups.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace tern::quant {

namespace x8 {
constexpr size_t kQ4_0_qs = 16, kQ4_0_block = 144;
constexpr size_t kQ8_0_qs = 16, kQ8_0_block = 272;
constexpr size_t kQ4_K_dmin = 16, kQ4_K_sc = 32, kQ4_K_mn = 96, kQ4_K_qs = 160, kQ4_K_block = 1184;
constexpr size_t kQ5_K_qh = 160, kQ5_K_qs = 416, kQ5_K_block = 1440;  // d, dmin, sc, mn as Q4_K
constexpr size_t kQ6_K_sc = 16, kQ6_K_ql = 144, kQ6_K_qh = 1168, kQ6_K_block = 1680;
constexpr size_t kQ4_1_m = 16, kQ4_1_qs = 32, kQ4_1_block = 160;
constexpr size_t kQ5_0_qh = 16, kQ5_0_qs = 48, kQ5_0_block = 176;
constexpr size_t kQ5_1_m = 16, kQ5_1_qh = 32, kQ5_1_qs = 64, kQ5_1_block = 192;
constexpr size_t kIQ4_NL_qs = 16, kIQ4_NL_block = 144;
constexpr size_t kQ2_K_dmin = 16, kQ2_K_sc = 32, kQ2_K_qs = 160, kQ2_K_block = 672;
constexpr size_t kQ3_K_sc = 16, kQ3_K_hm = 144, kQ3_K_qs = 400, kQ3_K_block = 912;
constexpr size_t kIQ4_XS_sc = 16, kIQ4_XS_qs = 80, kIQ4_XS_block = 1104;
// Each layout's fields end where the next begins (d/m/dmin: 8 x 2 bytes; a piece array: pieces x 32 bytes).
static_assert(kQ4_1_qs + 4 * 32 == kQ4_1_block && kQ5_0_qs + 4 * 32 == kQ5_0_block && kQ5_1_qh + 32 == kQ5_1_qs);
static_assert(kQ5_1_qs + 4 * 32 == kQ5_1_block && kIQ4_NL_qs + 4 * 32 == kIQ4_NL_block);
static_assert(kQ2_K_sc + 16 * 8 == kQ2_K_qs && kQ2_K_qs + 16 * 32 == kQ2_K_block);
static_assert(kQ3_K_sc + 16 * 8 == kQ3_K_hm && kQ3_K_hm + 8 * 32 == kQ3_K_qs && kQ3_K_qs + 16 * 32 == kQ3_K_block);
static_assert(kIQ4_XS_sc + 8 * 8 == kIQ4_XS_qs && kIQ4_XS_qs + 32 * 32 == kIQ4_XS_block);
}  // namespace x8

struct RepackArgs {
  const uint8_t* w;     // the whole repacked matrix
  size_t group_bytes;   // bytes of one group of 8 rows
  int64_t n_blocks;     // blocks (super-blocks) per row
  const uint8_t* x;     // [n_tok rows of x_stride bytes], BlockQ8_0S or BlockQ8_K
  size_t x_stride;
  int64_t g_begin, g_end, n_rows, n_tok;
  float* y;             // y[t*ldy + i - y_col0]
  int64_t ldy;
  const int32_t* x_rows = nullptr;  // token t reads activation row x_rows[t] (nullptr: row t)
  int64_t y_col0 = 0;
};
using RepackFn = void (*)(const RepackArgs&);

RepackFn repack_fn_ref(Type w);
RepackFn repack_fn_avx2(Type w);
RepackFn repack_fn_avx512(Type w);
namespace simde_twin {
RepackFn repack_fn_avx512(Type w);  // the AVX-512 unit's SIMDe twin (core/avx512.h); only test binaries link it
}  // namespace simde_twin

}  // namespace tern::quant
