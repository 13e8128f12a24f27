// Row-wise and element-wise ops spread over the thread pool (internal). Rows are independent, and element chunks
// are multiples of every vector width (only the array's own tail takes a kernel's scalar path, as in one call),
// so a split never changes a bit. Small inputs (a decode step's single row) run on the calling thread: a pool
// hand-off would cost more than the op.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/parallel.h"

namespace tern::ops::split {

constexpr int64_t kMinWork = int64_t{1} << 15;  // floats under which an op stays on the calling thread
constexpr int64_t kChunk = 8192;                 // floats per task (a multiple of 16, the widest vector)

// f(r0, r1) over row ranges covering [0, n_rows) of rows n wide.
template <typename F>
void rows(int64_t n_rows, int64_t n, F&& f) {
  if (n_rows <= 1 || n_rows * n < kMinWork) return f(int64_t{0}, n_rows);
  const int64_t per = std::max<int64_t>(1, kChunk / std::max<int64_t>(n, 1));
  parallel_for((n_rows + per - 1) / per, [&](int64_t c) { f(c * per, std::min(n_rows, c * per + per)); });
}

// f(i0, i1) over element ranges covering [0, n).
template <typename F>
void elements(int64_t n, F&& f) {
  if (n < kMinWork) return f(int64_t{0}, n);
  parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) { f(c * kChunk, std::min(n, c * kChunk + kChunk)); });
}

}  // namespace tern::ops::split
