#include "models/blocks/linear.h"

#include <algorithm>

#include "core/error.h"
#include "core/parallel.h"
#include "quant/kernels.h"
#include "quant/repack.h"

namespace tern::models {

size_t Linear::bytes() const {
  return repacked ? quant::repacked_bytes(type, n_out, n_in) : row_bytes * static_cast<size_t>(n_out);
}

Linear Linear::rows(int64_t r0, int64_t n) const {
  Linear s = *this;
  if (repacked) {
    if (r0 % quant::kRepackRows != 0)
      fail("internal: %s: row slice at %lld is not a group boundary", name.c_str(), static_cast<long long>(r0));
    s.data = data + quant::repacked_bytes(type, r0, n_in);
  } else {
    s.data = data + static_cast<size_t>(r0) * row_bytes;
  }
  s.n_out = n;
  return s;
}

void apply(const Linear& w, const float* x, int64_t n_tok, float* y) {
  if (w.repacked) quant::matmul_repacked(w.type, w.data, w.n_out, w.n_in, x, n_tok, y, quant::active_isa());
  else quant::matmul(w.type, w.data, w.row_bytes, w.n_out, w.n_in, x, n_tok, y, quant::active_isa());
}

size_t act_row_bytes(const Linear& w) {
  return w.repacked ? quant::repacked_act_row_bytes(w.type, w.n_in) : quant::act_row_bytes(w.type, w.n_in);
}

bool same_act_format(const Linear& a, const Linear& b) {
  if (a.n_in != b.n_in || a.repacked != b.repacked) return false;
  if (a.repacked) return (quant::act_type(a.type) == quant::Type::Q8_K) == (quant::act_type(b.type) == quant::Type::Q8_K);
  return quant::act_type(a.type) == quant::act_type(b.type);
}

void quantize_rows(const Linear& w, const float* x, int64_t n_tok, uint8_t* xq) {
  const size_t stride = act_row_bytes(w);
  const Isa isa = quant::active_isa();
  parallel_for(n_tok, [&](int64_t t) {
    if (w.repacked) quant::quantize_act_repacked(w.type, x + t * w.n_in, xq + t * stride, w.n_in, isa);
    else quant::quantize_act(w.type, x + t * w.n_in, xq + t * stride, w.n_in, isa);
  });
}

void gemm_rows(const Linear& w, const uint8_t* xq, const int32_t* rows, int64_t n_tok, int64_t r0, int64_t r1,
               float* y, int64_t ldy) {
  const size_t stride = act_row_bytes(w);
  if (w.repacked) {
    if (r0 % quant::kRepackRows != 0 || (r1 != w.n_out && r1 % quant::kRepackRows != 0))
      fail("internal: %s: rows [%lld, %lld) are not on 8-row groups", w.name.c_str(), static_cast<long long>(r0),
           static_cast<long long>(r1));
    quant::gemm_repacked(w.type, w.data, w.n_out, w.n_in, xq, stride, r0 / quant::kRepackRows,
                         (r1 + quant::kRepackRows - 1) / quant::kRepackRows, n_tok, y, ldy, quant::active_isa(), rows,
                         r0);
  } else {
    quant::gemm(w.type, w.data, w.row_bytes, xq, stride, w.n_in, r0, r1, n_tok, y, ldy, quant::active_isa(), rows, r0);
  }
}

bool can_repack(const Linear& w) { return !w.repacked && quant::has_repacked(w.type); }

size_t repacked_bytes(const Linear& w) { return quant::repacked_bytes(w.type, w.n_out, w.n_in); }

Linear repack_into(const Linear& w, uint8_t* dst, bool parallel) {
  constexpr int64_t kChunk = 16 * quant::kRepackRows;
  const int64_t n_chunks = parallel ? (w.n_out + kChunk - 1) / kChunk : 1;
  auto chunk = [&](int64_t c) {
    const int64_t r0 = c * kChunk, n = parallel ? std::min(kChunk, w.n_out - r0) : w.n_out;
    quant::repack(w.type, w.data + r0 * w.row_bytes, w.row_bytes, n, w.n_in,
                  dst + quant::repacked_bytes(w.type, r0, w.n_in));
  };
  if (parallel) parallel_for(n_chunks, chunk);
  else chunk(0);
  Linear r = w;
  r.data = dst;
  r.repacked = true;
  return r;
}

}  // namespace tern::models
