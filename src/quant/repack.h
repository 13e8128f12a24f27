// Weights laid out for the kernel ("x8"): rows in groups of 8, each group stored block by block, and inside a
// block the 8 rows' scales first (apart from the quants), then the quants interleaved in 4-byte pieces:
// piece k of the 8 rows is one 32-byte vector, so a kernel computes 8 rows at once against one broadcast
// 4-byte piece of the activation, with no horizontal sums. 4-bit values stay unsigned (0..15) and the offset
// is taken out once per block through the activation's block sum, instead of sign tricks per vector.
// Layouts (per group of 8 rows, per block, in bytes; "[a][b]" nests, last index fastest; size vs 8 file blocks):
//   Q4_0:   d[8] f16 | qs[4 piece][8 row][4]                                     (144 = 8 x 18: as the file)
//   Q4_1:   d[8] m[8] f16 | qs[4 piece][8 row][4]                                (160 = 8 x 20)
//   Q5_0:   d[8] f16 | qh[8 row] u32 (transposed, below) | qs[4 piece][8 row][4]  (176 = 8 x 22)
//   Q5_1:   d[8] m[8] f16 | qh[8 row] u32 (transposed) | qs[4 piece][8 row][4]    (192 = 8 x 24)
//   Q8_0:   d[8] f16 | qs[8 piece][8 row][4]                                     (272 = 8 x 34)
//   IQ4_NL: as Q4_0                                                              (144 = 8 x 18)
//   Q2_K:   d[8] dmin[8] f16 | scales[16 sub][8 row] u8 (the file's bytes) | qs[16 piece][8 row][4]
//                                                                                (672 = 8 x 84)
//   Q3_K:   d[8] f16 | sc[16 sub][8 row] i8 (unpacked, minus 32) | hmask[8 piece][8 row][4] |
//           qs[16 piece][8 row][4]                                               (912; file 880: +3.6%)
//   Q4_K:   d[8] dmin[8] f16 | sc[8 sub][8 row] u8 | mn[4 pair][8 row][2] u8 | qs[4 j][8 k][8 row][4]
//                                                                                (1184; file 1152: +2.8%)
//   Q5_K:   as Q4_K, then qh[8 k][8 row][4] before qs                             (1440; file 1408: +2.3%)
//   Q6_K:   d[8] f16 | sc[16 sub][8 row] i8 | ql[2 h][2 p][8 k][8 row][4] | qh[2 h][8 k][8 row][4]
//                                                                                (1680 = 8 x 210)
//   IQ4_XS: d[8] f16 | sc[8 sub][8 row] i8 (unpacked, minus 32) | qs[32 piece][8 row][4]
//                                                                                (1104; file 1088: +1.5%)
// A 4-byte piece always holds the bytes of the row's original block at the same offsets, so element order is
// ggml's. Scales are apart, unpacked where that saves the kernel work. The one field stored differently is
// Q5_0/Q5_1's qh word, its 32 bits transposed so that a piece needs one uniform shift: bit 8i + k = high bit
// of element 4k + i (low nibble of qs byte 4k + i), bit 8i + 4 + k = of element 16 + 4k + i. A tail group
// (n_rows % 8) is padded with zero rows whose outputs are never written.
// Reduction order (the _ref defines it; every ISA follows it bit for bit, whatever the thread count, row range
// or batch): per row, one exact int32 sum per block (32-blocks) or super-block (256), then
//   Q4_0, Q5_0, Q8_0, IQ4_NL: acc = fma(d_w * d_x, (float)isum, acc)
//       (unsigned q; Q4_0: isum = sum q*x - 8 * sum x, Q5_0: - 16 * sum x; IQ4_NL: the signed code book values)
//   Q4_1, Q5_1: acc = fma(d_w * d_x, (float)isum, acc); acc = fma(m_w * d_x, (float)sum x, acc)  (isum = sum q*x)
//   Q2_K, Q4_K, Q5_K: acc = fma(d*d_x, isum, acc); acc = fma(-(dmin*d_x), msum, acc)
//       (isum = sum_j sc_j * sum q*x, msum = sum_j mn_j * bsum_j)
//   Q3_K, Q6_K, IQ4_XS: acc = fma(d*d_x, isum, acc)
//       (isum = sum_j sc_j * (sum q*x - o * bsum_j): Q3_K o = 4 (q = 0..7), Q6_K o = 32; IQ4_XS signed values)
// where sum x is the activation block's exact quant sum (BlockQ8_0S::s) and bsum_j Q8_K's per-16 sums.
// Types without an x8 layout keep the file's row layout and quant::gemm.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "quant/types.h"

namespace tern::quant {

constexpr int64_t kRepackRows = 8;

// Activation block for the repacked 32-block kernels: Q8_0 plus the exact sum of its quants, both scalars stored
// ready to broadcast (one load each in the kernels' per-block step, where fp16 and int16 would cost a convert).
struct BlockQ8_0S {
  float d;    // Q8_0's fp16 scale, widened exactly
  int32_t s;  // sum of qs
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0S) == 40);

bool has_repacked(Type w);  // every quantized type with kernels: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL, Q2_K..Q6_K IQ4_XS
size_t repacked_block_bytes(Type w);                     // one block (super-block) of one group of 8 rows
size_t repacked_bytes(Type w, int64_t n_rows, int64_t n_in);  // ceil(n_rows / 8) groups

// src: n_rows rows of src_row_stride bytes in the file layout -> dst: repacked_bytes(w, n_rows, n_in). On the
// calling thread; row ranges starting on a group boundary can be repacked in parallel into their own offsets.
void repack(Type w, const void* src, size_t src_row_stride, int64_t n_rows, int64_t n_in, void* dst);
// Row `row` of a repacked matrix back in the file layout (row_size(w, n_in) bytes): exact inverse of repack.
void unpack_row(Type w, const void* packed, int64_t n_in, int64_t row, void* dst);

// Activation rows for the repacked kernels: BlockQ8_0S (32-blocks) or Q8_K (super-blocks); every ISA writes
// the same bytes.
size_t repacked_act_row_bytes(Type w, int64_t n);
void quantize_act_repacked(Type w, const float* x, void* xq, int64_t n, Isa isa);

// y[t*ldy + i] = dot(row i, xq row t) for rows i in groups [g_begin, g_end) (rows >= n_rows not written).
// x_rows / y_col0 as in quant::gemm (y_col0 a multiple of 8).
void gemm_repacked(Type w, const void* packed, int64_t n_rows, int64_t n_in, const void* xq, size_t xq_stride,
                   int64_t g_begin, int64_t g_end, int64_t n_tok, float* y, int64_t ldy, Isa isa,
                   const int32_t* x_rows = nullptr, int64_t y_col0 = 0);

// y: [n_tok, n_out] = x: [n_tok, n_in] f32 times the repacked W^T: quantize_act_repacked into a thread-local
// scratch, then gemm_repacked over fixed tasks of task_rows() rows (quant/kernels.h) on tern::parallel_for.
void matmul_repacked(Type w, const void* packed, int64_t n_out, int64_t n_in, const float* x, int64_t n_tok,
                     float* y, Isa isa);

}  // namespace tern::quant
