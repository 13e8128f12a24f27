// Matrix-vector / small-batch matrix-matrix products for every weight type tern computes with:
// y[t*ldy + i] = dot(W row i, x row t). Activations are quantized once per row into the weight type's dot
// format (act_type), then one gemm kernel per (weight type, ISA) runs over a range of output rows.
// Determinism: every output element is reduced in an order fixed by n_in alone (not n_tok, threads or the row
// range), so a token's result is bit-identical alone or in a batch, for a given ISA. Quantized types are also
// bit-identical across ISAs (the SIMD kernels keep the ref's per-block float order); float types are not.
// Non-goals: quantizing weights (convert.h), attention or other ops.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "quant/types.h"

namespace tern::quant {

// Does tern have gemm kernels for weight type w? (F32, F16, BF16, Q4_0..Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS)
bool has_kernels(Type w);

// Activation format the kernels for weight type w read: F32 (float weights), Q8_0, Q8_1 (Q4_1/Q5_1) or Q8_K.
Type act_type(Type w);
// Bytes of one quantized activation row of n elements (n a multiple of w's block size).
size_t act_row_bytes(Type w, int64_t n);

// x: [n] f32 -> xq: act_row_bytes(w, n) bytes in act_type(w). Every ISA writes the same bytes.
void quantize_act(Type w, const float* x, void* xq, int64_t n, Isa isa);

// y[t*ldy + i] = dot(W row i, xq row t) for i in [row_begin, row_end), t in [0, n_tok).
// W: rows of w_row_stride bytes, type w, n_in elements each; xq: n_tok rows of xq_row_stride bytes made by
// quantize_act (for float weight types: plain f32 rows). Other elements of y are not touched.
// x_rows: token t reads xq row x_rows[t] instead of row t (a subset of a batch without copying it); y_col0:
// output row i lands at y[t*ldy + i - y_col0] (a chunk of rows into its own buffer).
void gemm(Type w, const void* W, size_t w_row_stride, const void* xq, size_t xq_row_stride, int64_t n_in,
          int64_t row_begin, int64_t row_end, int64_t n_tok, float* y, int64_t ldy, Isa isa,
          const int32_t* x_rows = nullptr, int64_t y_col0 = 0);

// Rows per parallel task of a matrix product: a multiple of kMatmulRowChunk, large enough that a task does at least
// the work of streaming kTaskStreamBytes of weights at one token (rows of row_bytes bytes, n_tok tokens). At one
// token, 16-row tasks (18 KB of a 2048-wide Q4_0 matrix) taken in turn by two threads cut each thread's reads into
// short runs: the DeltaNet in-projections streamed at ~29 GB/s while the LM head, in long runs, reached 37-62 (Zen 5;
// docs/BENCHMARKS.md). Rows only split the output, so results never depend on it.
constexpr int64_t kMatmulRowChunk = 16;
constexpr size_t kTaskStreamBytes = 128 << 10;
int64_t task_rows(size_t row_bytes, int64_t n_tok);

// y: [n_tok, n_out] = x: [n_tok, n_in] f32 times W^T (W: [n_out, n_in] rows of w_row_stride bytes).
// Quantizes x into a thread-local scratch buffer (reused across calls) and splits output rows across
// tern::parallel_for in fixed tasks of task_rows() rows, so results never depend on the thread count.
void matmul(Type w, const void* W, size_t w_row_stride, int64_t n_out, int64_t n_in, const float* x,
            int64_t n_tok, float* y, Isa isa);

// The ISA the engine uses: tern::best_isa(), chosen and logged once on first use.
Isa active_isa();

}  // namespace tern::quant
