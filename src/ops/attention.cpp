// Causal GQA attention over a per-sequence KV cache (see attention.h): scalar twin, task split and dispatch.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "ops/activation.h"
#include "ops/kernels.h"
#include "ops/vec.h"

namespace tern::ops {

namespace {

void check_kv(const KvCacheView& kv, int64_t n_tokens, int64_t pos0, const char* who) {
  if (!kv.k || !kv.v || kv.n_head_kv <= 0 || kv.n_ctx <= 0 || kv.head_dim <= 0) {
    fail("%s: KV cache view is empty (n_head_kv %lld, n_ctx %lld, head_dim %lld)", who,
         static_cast<long long>(kv.n_head_kv), static_cast<long long>(kv.n_ctx),
         static_cast<long long>(kv.head_dim));
  }
  if (n_tokens < 0 || pos0 < 0 || pos0 + n_tokens > kv.n_ctx) {
    fail("%s: positions [%lld, %lld) outside the KV cache of %lld positions", who,
         static_cast<long long>(pos0), static_cast<long long>(pos0 + n_tokens), static_cast<long long>(kv.n_ctx));
  }
  for (KvType t : {kv.k_type, kv.v_type})
    if (kv_quantized(t) && kv.head_dim % 32 != 0)
      fail("%s: a %s KV cache needs a head size that is a multiple of 32 (this model's is %lld); use --kv-type f16",
           who, kv_type_name(t), static_cast<long long>(kv.head_dim));
  if (kv.rotate && kv.head_dim % 2 != 0)
    fail("%s: the KV rotation needs an even head size (this model's is %lld); use --kv-rotate off", who,
         static_cast<long long>(kv.head_dim));
}

constexpr int64_t kHeadsPerTask = 4;  // query heads of one GQA group handled together (never changes a result)
constexpr int64_t kTokensPerTask = 16;  // query tokens per task: a query block reuses its KV head's rows in cache

// The row of position p as floats, for a query that attends n_pos positions: from the shadow when p is a sink or
// window position, else decoded from the row's type (exactly: f16 -> f32, d * q for the block formats).
const float* row_f32(KvType type, const void* rows, const uint16_t* shadow, int64_t sink, int64_t window,
                     int64_t n_pos, int64_t p, int64_t hd, float* buf) {
  if (shadow && (p < sink || p >= n_pos - window)) {
    const uint16_t* r = shadow + p * hd;
    for (int64_t i = 0; i < hd; ++i) buf[i] = fp16_to_fp32(r[i]);
    return buf;
  }
  const uint8_t* r = static_cast<const uint8_t*>(rows) + p * kv_row_bytes(type, hd);
  switch (type) {
    case KvType::kF32: return reinterpret_cast<const float*>(r);
    case KvType::kF16:
      for (int64_t i = 0; i < hd; ++i) buf[i] = fp16_to_fp32(reinterpret_cast<const uint16_t*>(r)[i]);
      return buf;
    case KvType::kQ8_0:
      for (int64_t b = 0; b < hd / 32; ++b, r += 34) {
        uint16_t dh;
        std::memcpy(&dh, r, 2);
        const float d = fp16_to_fp32(dh);
        for (int j = 0; j < 32; ++j) buf[b * 32 + j] = d * static_cast<float>(static_cast<int8_t>(r[2 + j]));
      }
      return buf;
    case KvType::kQ4_0:
      for (int64_t b = 0; b < hd / 32; ++b, r += 18) {
        uint16_t dh;
        std::memcpy(&dh, r, 2);
        const float d = fp16_to_fp32(dh);
        for (int j = 0; j < 16; ++j) {
          buf[b * 32 + j] = d * static_cast<float>((r[2 + j] & 15) - 8);
          buf[b * 32 + j + 16] = d * static_cast<float>((r[2 + j] >> 4) - 8);
        }
      }
      return buf;
  }
  return buf;
}

// Scores, softmax and weighted value sums of n_q query rows q[n_q][hd] that share one KV head, over
// positions [0, n_pos). Each K / V row is read once for all n_q heads; per head the arithmetic is the same
// fixed-order sequence whatever n_q is. scores [n_q * n_pos] and row [hd] are scratch.
void attend_group(const float* q, int64_t n_q, const AttnBlock& b, int64_t n_pos, float* scores, float* row,
                  float* out) {
  const int64_t hd = b.head_dim;
  for (int64_t p = 0; p < n_pos; ++p) {
    const float* kr = row_f32(b.k_type, b.k, b.k16, b.sink, b.window, n_pos, p, hd, row);
    for (int64_t j = 0; j < n_q; ++j) scores[j * n_pos + p] = vec::dot(q + j * hd, kr, hd) * b.scale;
  }
  thread_local std::vector<double> sum;
  sum.resize(static_cast<size_t>(n_q));
  for (int64_t j = 0; j < n_q; ++j) {
    float* sc = scores + j * n_pos;
    float mx = -INFINITY;
    for (int64_t p = 0; p < n_pos; ++p) mx = sc[p] > mx ? sc[p] : mx;
    sum[j] = 0.0;
    for (int64_t p = 0; p < n_pos; ++p) {
      sc[p] = std::exp(sc[p] - mx);
      sum[j] += sc[p];
    }
  }
  std::memset(out, 0, sizeof(float) * n_q * hd);
  for (int64_t p = 0; p < n_pos; ++p) {
    const float* vr = row_f32(b.v_type, b.v, b.v16, b.sink, b.window, n_pos, p, hd, row);
    for (int64_t j = 0; j < n_q; ++j) vec::axpy(scores[j * n_pos + p], vr, out + j * hd, hd);
  }
  for (int64_t j = 0; j < n_q; ++j) vec::scale(static_cast<float>(1.0 / sum[j]), out + j * hd, hd);
}

// ggml's reference encodings of one row (quantize_row_q8_0_ref / q4_0_ref: the same bytes for finite input; a
// non-finite value gives code 0 / 8 here instead of ggml's undefined conversion).
void quantize_q8_0_row(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;
    }
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = fp32_to_fp16(d);
    std::memcpy(y, &dh, 2);
    for (int j = 0; j < 32; ++j) {
      const float r = std::round(x[j] * id);
      y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(r >= -128.0f && r <= 127.0f ? static_cast<int>(r) : 0));
    }
  }
}

// q4_0 blocks with the scale chosen for the least squared error: ggml's reference scale (signed max / -8) and
// a few smaller ones, codes clamp(round(x / d), -8, 7), then d refit by least squares for those codes; the
// smallest error wins (never worse than the reference encoding). The blocks are ggml's format: any q4_0 reader
// decodes them. A non-finite value gives code 8 (value 0).
void quantize_q4_0_row(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += 18) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    int best_q[32];
    for (int j = 0; j < 32; ++j) best_q[j] = 0;
    double best_err = INFINITY;
    float best_d = 0.0f;
    for (int k = 0; k < 8 && amax > 0.0f; ++k) {
      const float d = max / (-8.0f - 0.25f * static_cast<float>(k));  // k = 0: ggml's reference scale
      const float id = 1.0f / d;
      int q[32];
      double sxq = 0, sqq = 0, sxx = 0;
      for (int j = 0; j < 32; ++j) {
        const float r = std::round(x[j] * id);
        q[j] = r >= -8.0f && r <= 7.0f ? static_cast<int>(r) : r > 7.0f ? 7 : r < -8.0f ? -8 : 0;
        sxq += static_cast<double>(x[j]) * q[j];
        sqq += static_cast<double>(q[j]) * q[j];
        sxx += static_cast<double>(x[j]) * x[j];
      }
      if (sqq == 0) continue;
      const double err = sxx - sxq * sxq / sqq;
      if (err < best_err) {
        best_err = err;
        best_d = static_cast<float>(sxq / sqq);
        std::memcpy(best_q, q, sizeof q);
      }
    }
    const uint16_t dh = fp32_to_fp16(best_d);
    std::memcpy(y, &dh, 2);
    for (int j = 0; j < 16; ++j)
      y[2 + j] = static_cast<uint8_t>((best_q[j] + 8) | ((best_q[j + 16] + 8) << 4));
  }
}

void store_row(KvType t, const Kernels& kern, const float* x, void* dst, int64_t hd) {
  switch (t) {
    case KvType::kF32: std::memcpy(dst, x, sizeof(float) * hd); break;
    case KvType::kF16: kern.f32_to_f16(x, static_cast<uint16_t*>(dst), hd); break;
    case KvType::kQ8_0: quantize_q8_0_row(x, static_cast<uint8_t*>(dst), hd); break;
    case KvType::kQ4_0: quantize_q4_0_row(x, static_cast<uint8_t*>(dst), hd); break;
  }
}

}  // namespace

void attend_ref(const AttnBlock& b) {
  thread_local std::vector<float> scratch;
  const int64_t hd = b.head_dim;
  for (int64_t t = 0; t < b.n_tok; ++t) {
    const int64_t n_pos = b.n_pos0 + t;
    scratch.resize(b.n_q * n_pos + hd);
    attend_group(b.q + t * b.tok_stride, b.n_q, b, n_pos, scratch.data(), scratch.data() + b.n_q * n_pos,
                 b.out + t * b.tok_stride);
  }
}

void hadamard_ref(float* x, int64_t n_rows, int64_t n) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t r = 0; r < n_rows; ++r, x += n) {
    for (int64_t h = 1; h < n; h *= 2)
      for (int64_t i = 0; i < n; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const float a = x[j], c = x[j + h];
          x[j] = a + c;
          x[j + h] = a - c;
        }
    for (int64_t i = 0; i < n; ++i) x[i] *= norm;
  }
}

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kQ8_0: return "q8_0";
    case KvType::kQ4_0: return "q4_0";
  }
  return "?";
}

bool parse_kv_type(const char* s, KvType* t) {
  for (KvType c : {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0})
    if (std::strcmp(s, kv_type_name(c)) == 0) {
      *t = c;
      return true;
    }
  return false;
}

int64_t kv_row_bytes(KvType t, int64_t dim) {
  switch (t) {
    case KvType::kF32: return dim * 4;
    case KvType::kF16: return dim * 2;
    case KvType::kQ8_0: return dim / 32 * 34;
    case KvType::kQ4_0: return dim / 32 * 18;
  }
  return 0;
}

int64_t hadamard_block(int64_t head_dim) {
  int64_t b = 1;
  while (head_dim % (b * 2) == 0) b *= 2;
  return b;
}

namespace {
// dst = src (when they differ) times the Hadamard blocks, in chunks of rows on all threads: rows are independent, so
// any cut gives the same bits as one pass.
void rotate_rows(const float* src, float* dst, int64_t n_rows, int64_t n, int64_t block, Isa isa) {
  if (block < 1 || (block & (block - 1)) != 0 || n % block != 0)
    fail("hadamard_rows: block %lld is not a power of two dividing %lld", static_cast<long long>(block),
         static_cast<long long>(n));
  const int64_t rows = n_rows * (n / block), per = std::max<int64_t>(1, 4096 / block);
  const auto fn = kernels(isa).hadamard;
  const auto chunk = [&](int64_t c) {
    const int64_t off = c * per * block, m = std::min(per, rows - c * per);
    if (src != dst) std::memcpy(dst + off, src + off, sizeof(float) * m * block);
    fn(dst + off, m, block);
  };
  if (rows <= per) chunk(0);
  else parallel_for((rows + per - 1) / per, chunk);
}
}  // namespace

void hadamard_rows(float* x, int64_t n_rows, int64_t n, int64_t block, Isa isa) {
  rotate_rows(x, x, n_rows, n, block, isa);
}

void f32_to_f16_ref(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t n_tokens, int64_t pos0, Isa isa) {
  check_kv(kv, n_tokens, pos0, "kv_store");
  const Kernels& kern = kernels(isa);
  const int64_t hd = kv.head_dim;
  const int64_t kb = kv_row_bytes(kv.k_type, hd), vb = kv_row_bytes(kv.v_type, hd);
  thread_local std::vector<float> rot;
  if (kv.rotate) {  // rotated copies of this call's rows
    const size_t n = static_cast<size_t>(n_tokens * kv.n_head_kv * hd);
    rot.resize(2 * n);
    rotate_rows(k, rot.data(), n_tokens * kv.n_head_kv, hd, hadamard_block(hd), isa);
    rotate_rows(v, rot.data() + n, n_tokens * kv.n_head_kv, hd, hadamard_block(hd), isa);
    k = rot.data();
    v = rot.data() + n;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < kv.n_head_kv; ++h) {
      const float* ks = k + (t * kv.n_head_kv + h) * hd;
      const float* vs = v + (t * kv.n_head_kv + h) * hd;
      const int64_t row = h * kv.n_ctx + pos0 + t;
      store_row(kv.k_type, kern, ks, static_cast<uint8_t*>(kv.k) + row * kb, hd);
      store_row(kv.v_type, kern, vs, static_cast<uint8_t*>(kv.v) + row * vb, hd);
      if (kv.k16) kern.f32_to_f16(ks, kv.k16 + row * hd, hd);
      if (kv.v16) kern.f32_to_f16(vs, kv.v16 + row * hd, hd);
    }
  }
}

void attention_causal(const float* q, int64_t n_tokens, int64_t n_head, const KvCacheView& kv, int64_t pos0,
                      float scale, float* out, Isa isa) {
  check_kv(kv, n_tokens, pos0, "attention");
  if (n_head <= 0 || n_head % kv.n_head_kv != 0) {
    fail("attention: n_head %lld is not a positive multiple of n_head_kv %lld", static_cast<long long>(n_head),
         static_cast<long long>(kv.n_head_kv));
  }
  const Kernels& kern = kernels(isa);
  const int64_t hd = kv.head_dim;
  const int64_t block = hadamard_block(hd);
  thread_local std::vector<float> qrot;
  if (kv.rotate) {  // q . k is unchanged when both are rotated
    qrot.resize(static_cast<size_t>(n_tokens * n_head * hd));
    rotate_rows(q, qrot.data(), n_tokens * n_head, hd, block, isa);
    q = qrot.data();
  }
  const int64_t group = n_head / kv.n_head_kv;
  // Several tokens over a block-format cache: one task takes all query heads of its KV head, so that a decoded tile
  // of rows serves them all (the kernel still works four heads at a time).
  // A few tokens (decoding) over f16 / f32 rows with at least one KV head per thread: the same, so that each KV
  // head's rows are read from memory once (tasks of four heads read them twice) and then from L1 for every head, a
  // tile at a time. (One token over a block-format cache keeps tasks of four heads reading the blocks directly:
  // decoding tiles to f32 for it measured 5-35% slower with the rows in L3, and level from DRAM.)
  const bool quantized = kv_quantized(kv.k_type) || kv_quantized(kv.v_type);
  const bool few = n_tokens <= kTokensPerTask && kv.n_head_kv >= n_threads() && !quantized;
  const bool whole_group = (n_tokens > 1 && quantized) || few;
  const int64_t per_task = whole_group ? group : group < kHeadsPerTask ? group : kHeadsPerTask;
  const int64_t tasks_per_group = (group + per_task - 1) / per_task;
  const int64_t n_blocks = (n_tokens + kTokensPerTask - 1) / kTokensPerTask;
  const int64_t per_block = kv.n_head_kv * tasks_per_group;
  const int64_t kb = kv_row_bytes(kv.k_type, hd), vb = kv_row_bytes(kv.v_type, hd);
  // Task = (query block, KV head, block of up to kHeadsPerTask of its query heads). Blocks are visited in the
  // order 0, last, 1, last - 1, ... so that contiguous shares of the tasks carry similar causal work.
  parallel_for(n_blocks * per_block, [&](int64_t task) {
    const int64_t i = task / per_block;
    const int64_t blk = i % 2 == 0 ? i / 2 : n_blocks - 1 - i / 2;
    const int64_t g = task % per_block / tasks_per_group;
    const int64_t h0 = g * group + task % tasks_per_group * per_task;
    const int64_t t0 = blk * kTokensPerTask;
    AttnBlock b;
    b.q = q + (t0 * n_head + h0) * hd;
    b.out = out + (t0 * n_head + h0) * hd;
    b.tok_stride = n_head * hd;
    b.n_tok = std::min(kTokensPerTask, n_tokens - t0);
    b.n_q = std::min(per_task, g * group + group - h0);
    b.head_dim = hd;
    b.n_pos0 = pos0 + t0 + 1;
    b.k = static_cast<const char*>(kv.k) + g * kv.n_ctx * kb;
    b.v = static_cast<const char*>(kv.v) + g * kv.n_ctx * vb;
    b.k_type = kv.k_type;
    b.v_type = kv.v_type;
    if (kv.k16) b.k16 = kv.k16 + g * kv.n_ctx * hd;
    if (kv.v16) b.v16 = kv.v16 + g * kv.n_ctx * hd;
    b.sink = kv.sink;
    b.window = kv.window;
    b.scale = scale;
    kern.attend(b);
  });
  // sum_p w_p (H v_p) = H (sum_p w_p v_p): the output comes back with H (its own inverse).
  if (kv.rotate) hadamard_rows(out, n_tokens * n_head, hd, block, isa);
}

void split_q_gate(const float* qg, int64_t n_tokens, int64_t n_head, int64_t head_dim, float* q, float* gate) {
  for (int64_t r = 0; r < n_tokens * n_head; ++r) {
    std::memcpy(q + r * head_dim, qg + r * 2 * head_dim, sizeof(float) * head_dim);
    std::memcpy(gate + r * head_dim, qg + r * 2 * head_dim + head_dim, sizeof(float) * head_dim);
  }
}

void apply_sigmoid_gate(float* o, const float* gate, int64_t n, Isa isa) { kernels(isa).sigmoid_gate(o, gate, n); }

}  // namespace tern::ops
