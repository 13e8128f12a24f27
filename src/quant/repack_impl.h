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

}  // namespace tern::quant
