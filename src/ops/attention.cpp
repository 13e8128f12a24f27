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
}

constexpr int64_t kHeadsPerTask = 4;  // query heads of one GQA group handled together (never changes a result)
constexpr int64_t kTokensPerTask = 16;  // query tokens per task: a query block reuses its KV head's rows in cache

// One KV row as floats: a pointer into an f32 cache, or the f16 row converted (exactly) into buf.
template <typename Elem>
const float* row_f32(const Elem* row, int64_t hd, float* buf) {
  if constexpr (sizeof(Elem) == 4) {
    return row;
  } else {
    for (int64_t i = 0; i < hd; ++i) buf[i] = fp16_to_fp32(row[i]);
    return buf;
  }
}

// Scores, softmax and weighted value sums of n_q query rows q[n_q][hd] that share one KV head, over
// positions [0, n_pos). Each K / V row is read once for all n_q heads; per head the arithmetic is the same
// fixed-order sequence whatever n_q is. scores [n_q * n_pos] and row [hd] are scratch.
template <typename Elem>
void attend_group(const float* q, int64_t n_q, const Elem* k_head, const Elem* v_head, int64_t n_pos, int64_t hd,
                  float scale, float* scores, float* row, float* out) {
  for (int64_t p = 0; p < n_pos; ++p) {
    const float* kr = row_f32(k_head + p * hd, hd, row);
    for (int64_t j = 0; j < n_q; ++j) scores[j * n_pos + p] = vec::dot(q + j * hd, kr, hd) * scale;
  }
  double sum[kHeadsPerTask];
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
    const float* vr = row_f32(v_head + p * hd, hd, row);
    for (int64_t j = 0; j < n_q; ++j) vec::axpy(scores[j * n_pos + p], vr, out + j * hd, hd);
  }
  for (int64_t j = 0; j < n_q; ++j) vec::scale(static_cast<float>(1.0 / sum[j]), out + j * hd, hd);
}

}  // namespace

void attend_ref(const AttnBlock& b) {
  thread_local std::vector<float> scratch;
  const int64_t hd = b.head_dim;
  for (int64_t t = 0; t < b.n_tok; ++t) {
    const int64_t n_pos = b.n_pos0 + t;
    scratch.resize(b.n_q * n_pos + hd);
    float* row = scratch.data() + b.n_q * n_pos;
    const float* q = b.q + t * b.tok_stride;
    float* o = b.out + t * b.tok_stride;
    if (b.f16) {
      attend_group(q, b.n_q, static_cast<const uint16_t*>(b.k), static_cast<const uint16_t*>(b.v), n_pos, hd, b.scale,
                   scratch.data(), row, o);
    } else {
      attend_group(q, b.n_q, static_cast<const float*>(b.k), static_cast<const float*>(b.v), n_pos, hd, b.scale,
                   scratch.data(), row, o);
    }
  }
}

void f32_to_f16_ref(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t n_tokens, int64_t pos0, Isa isa) {
  check_kv(kv, n_tokens, pos0, "kv_store");
  const Kernels& kern = kernels(isa);
  const int64_t hd = kv.head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < kv.n_head_kv; ++h) {
      const float* ks = k + (t * kv.n_head_kv + h) * hd;
      const float* vs = v + (t * kv.n_head_kv + h) * hd;
      const int64_t row = (h * kv.n_ctx + pos0 + t) * hd;
      if (kv.type == KvType::kF32) {
        std::memcpy(static_cast<float*>(kv.k) + row, ks, sizeof(float) * hd);
        std::memcpy(static_cast<float*>(kv.v) + row, vs, sizeof(float) * hd);
      } else {
        kern.f32_to_f16(ks, static_cast<uint16_t*>(kv.k) + row, hd);
        kern.f32_to_f16(vs, static_cast<uint16_t*>(kv.v) + row, hd);
      }
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
  const int64_t group = n_head / kv.n_head_kv;
  const int64_t per_task = group < kHeadsPerTask ? group : kHeadsPerTask;
  const int64_t tasks_per_group = (group + per_task - 1) / per_task;
  const int64_t n_blocks = (n_tokens + kTokensPerTask - 1) / kTokensPerTask;
  const int64_t per_block = kv.n_head_kv * tasks_per_group;
  const size_t esz = kv.type == KvType::kF16 ? 2 : 4;
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
    b.k = static_cast<const char*>(kv.k) + g * kv.n_ctx * hd * esz;
    b.v = static_cast<const char*>(kv.v) + g * kv.n_ctx * hd * esz;
    b.f16 = kv.type == KvType::kF16;
    b.scale = scale;
    kern.attend(b);
  });
}

void split_q_gate(const float* qg, int64_t n_tokens, int64_t n_head, int64_t head_dim, float* q, float* gate) {
  for (int64_t r = 0; r < n_tokens * n_head; ++r) {
    std::memcpy(q + r * head_dim, qg + r * 2 * head_dim, sizeof(float) * head_dim);
    std::memcpy(gate + r * head_dim, qg + r * 2 * head_dim + head_dim, sizeof(float) * head_dim);
  }
}

void apply_sigmoid_gate(float* o, const float* gate, int64_t n, Isa isa) { kernels(isa).sigmoid_gate(o, gate, n); }

}  // namespace tern::ops
