// Kernel dispatch: argument checks, activation block formats (shared scalar code around the per-ISA
// amax / scale-and-round primitives), gemm lookup per (weight type, ISA), and the threaded matmul.
#include "quant/kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/log.h"
#include "core/parallel.h"
#include "quant/blocks.h"
#include "quant/kernels_impl.h"

namespace tern::quant {
namespace {

std::atomic<const Avx512Entries*> g_avx512_override{nullptr};  // set_avx512_entries (tests only)

GemmFn gemm_fn(Type w, Isa isa) {
  switch (isa) {
    case Isa::kRef: return gemm_fn_ref(w);
    case Isa::kAvx2: return gemm_fn_avx2(w);
    case Isa::kAvx512: {
      const Avx512Entries* e = g_avx512_override.load(std::memory_order_acquire);
      return e ? e->gemm_fn(w) : gemm_fn_avx512(w);
    }
  }
  return nullptr;
}

ActPrims act_prims(Isa isa) {
  switch (isa) {
    case Isa::kRef: return act_prims_ref();
    case Isa::kAvx2: return act_prims_avx2();
    case Isa::kAvx512: {
      const Avx512Entries* e = g_avx512_override.load(std::memory_order_acquire);
      return e ? e->act_prims() : act_prims_avx512();
    }
  }
  return act_prims_ref();
}

void check_isa(Isa isa, const char* what) {
  if (isa == Isa::kAvx512 && g_avx512_override.load(std::memory_order_acquire)) return;  // the twin runs anywhere
  if (!isa_supported(isa))
    fail("%s: ISA %s requested but this CPU lacks it (has: %s)", what, isa_name(isa),
         cpu_features().summary().c_str());
}

void check_type(Type w, const char* what) {
  if (!has_kernels(w))
    fail("%s: weight type %s has no kernels (supported: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K "
         "q4_K q5_K q6_K iq4_nl iq4_xs)", what, type_name(w));
}

void check_n(Type w, int64_t n, const char* what) {
  const int64_t bs = traits(w).block_size;
  if (n <= 0 || n % bs != 0)
    fail("%s: row length %lld is not a positive multiple of %s's block size %lld", what,
         static_cast<long long>(n), type_name(w), static_cast<long long>(bs));
}

float scale_of(float amax) { return amax / 127.0f; }
float inv_scale(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Q8_0 / Q8_1 blocks of 32: d = amax/127 stored as fp16, q = nearbyint(x/d) (ggml quantize_row_q8_0/1,
// except ties round to even); Q8_1 also stores s = d*sum(q) as fp16.
template <bool kSum>
void quantize_q8_32(const ActPrims& p, const float* x, void* out, int64_t n) {
  using B = std::conditional_t<kSum, BlockQ8_1, BlockQ8_0>;
  B* y = static_cast<B*>(out);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = scale_of(p.amax(x + b * kQK, kQK));
    p.scale_round(x + b * kQK, inv_scale(d), y[b].qs, kQK);
    y[b].d = fp32_to_fp16(d);
    if constexpr (kSum) {
      int sum = 0;
      for (int j = 0; j < kQK; ++j) sum += y[b].qs[j];
      y[b].s = fp32_to_fp16(d * static_cast<float>(sum));
    }
  }
}

// Q8_K blocks of 256: d = amax/127 as float, q = nearbyint(x/d), bsums = per-16 sums of q.
void quantize_q8_k(const ActPrims& p, const float* x, void* out, int64_t n) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(out);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = scale_of(p.amax(x + b * kQK_K, kQK_K));
    p.scale_round(x + b * kQK_K, inv_scale(d), y[b].qs, kQK_K);
    y[b].d = d;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int k = 0; k < 16; ++k) s += y[b].qs[16 * g + k];
      y[b].bsums[g] = static_cast<int16_t>(s);
    }
  }
}

}  // namespace

void set_avx512_entries(const Avx512Entries* e) { g_avx512_override.store(e, std::memory_order_release); }
const Avx512Entries* avx512_entries() { return g_avx512_override.load(std::memory_order_acquire); }

bool has_kernels(Type w) { return gemm_fn_ref(w) != nullptr; }

Type act_type(Type w) {
  switch (w) {
    case Type::F32: case Type::F16: case Type::BF16: return Type::F32;
    case Type::Q4_0: case Type::Q5_0: case Type::Q8_0: case Type::IQ4_NL: return Type::Q8_0;
    case Type::Q4_1: case Type::Q5_1: return Type::Q8_1;
    case Type::Q2_K: case Type::Q3_K: case Type::Q4_K: case Type::Q5_K: case Type::Q6_K: case Type::IQ4_XS:
      return Type::Q8_K;
    default: check_type(w, "act_type");
  }
  return Type::F32;
}

size_t act_row_bytes(Type w, int64_t n) {
  check_n(w, n, "act_row_bytes");
  return row_size(traits(act_type(w)), n);
}

void quantize_act(Type w, const float* x, void* xq, int64_t n, Isa isa) {
  check_isa(isa, "quantize_act");
  check_n(w, n, "quantize_act");
  const ActPrims p = act_prims(isa);
  switch (act_type(w)) {
    case Type::F32: std::memcpy(xq, x, static_cast<size_t>(n) * sizeof(float)); break;
    case Type::Q8_0: quantize_q8_32<false>(p, x, xq, n); break;
    case Type::Q8_1: quantize_q8_32<true>(p, x, xq, n); break;
    case Type::Q8_K: quantize_q8_k(p, x, xq, n); break;
    default: fail("internal: no activation quantizer for %s", type_name(w));
  }
}

void gemm(Type w, const void* W, size_t w_row_stride, const void* xq, size_t xq_row_stride, int64_t n_in,
          int64_t row_begin, int64_t row_end, int64_t n_tok, float* y, int64_t ldy, Isa isa,
          const int32_t* x_rows, int64_t y_col0) {
  check_isa(isa, "gemm");
  check_type(w, "gemm");
  check_n(w, n_in, "gemm");
  if (row_begin < y_col0 || row_end < row_begin || n_tok < 0 || (n_tok > 1 && ldy < row_end - y_col0))
    fail("gemm: bad ranges rows [%lld, %lld), n_tok %lld, ldy %lld", static_cast<long long>(row_begin),
         static_cast<long long>(row_end), static_cast<long long>(n_tok), static_cast<long long>(ldy));
  if (w_row_stride < row_size(traits(w), n_in) || xq_row_stride < act_row_bytes(w, n_in))
    fail("gemm: row strides %zu / %zu shorter than a %s row of %lld", w_row_stride, xq_row_stride, type_name(w),
         static_cast<long long>(n_in));
  if (row_end == row_begin || n_tok == 0) return;
  const GemmFn fn = gemm_fn(w, isa);
  if (!fn) fail("internal: no %s gemm for %s", isa_name(isa), type_name(w));
  fn(GemmArgs{W, w_row_stride, xq, xq_row_stride, n_in, row_begin, row_end, n_tok, y, ldy, x_rows, y_col0});
}

void matmul(Type w, const void* W, size_t w_row_stride, int64_t n_out, int64_t n_in, const float* x,
            int64_t n_tok, float* y, Isa isa) {
  check_isa(isa, "matmul");
  check_type(w, "matmul");
  check_n(w, n_in, "matmul");
  if (n_out <= 0 || n_tok <= 0) return;
  const void* xq = x;
  size_t xq_stride = static_cast<size_t>(n_in) * sizeof(float);
  if (act_type(w) != Type::F32) {
    // Scratch reused per calling thread: no heap traffic once it has grown to the largest call.
    thread_local std::vector<uint8_t> scratch;
    xq_stride = act_row_bytes(w, n_in);
    if (scratch.size() < xq_stride * n_tok) scratch.resize(xq_stride * n_tok);
    uint8_t* buf = scratch.data();
    parallel_for(n_tok, [&](int64_t t) { quantize_act(w, x + t * n_in, buf + t * xq_stride, n_in, isa); });
    xq = buf;
  }
  const GemmFn fn = gemm_fn(w, isa);
  if (!fn) fail("internal: no %s gemm for %s", isa_name(isa), type_name(w));
  if (w_row_stride < row_size(traits(w), n_in))
    fail("matmul: weight row stride %zu shorter than a %s row of %lld", w_row_stride, type_name(w),
         static_cast<long long>(n_in));
  const int64_t per = task_rows(w_row_stride, n_tok), n_chunks = (n_out + per - 1) / per;
  parallel_for(n_chunks, [&](int64_t c) {
    const int64_t r0 = c * per, r1 = std::min(n_out, r0 + per);
    fn(GemmArgs{W, w_row_stride, xq, xq_stride, n_in, r0, r1, n_tok, y, n_out});
  });
}

int64_t task_rows(size_t row_bytes, int64_t n_tok) {
  const size_t per_token = std::max<size_t>(row_bytes, 1) * static_cast<size_t>(std::max<int64_t>(n_tok, 1));
  const auto rows = static_cast<int64_t>((kTaskStreamBytes + per_token - 1) / per_token);
  return std::max<int64_t>(1, (rows + kMatmulRowChunk - 1) / kMatmulRowChunk) * kMatmulRowChunk;
}

Isa active_isa() { return engine_isa(); }  // chosen and logged once in core, shared with ops

}  // namespace tern::quant
