// MLA attention and the DSA lightning indexer (see mla.h): the scalar twins, argument checks, task split and
// dispatch. The indexer's top-k selection after scoring is shared scalar code (every ISA scores with the same bits).
#include "ops/mla.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/rope.h"
#include "ops/split.h"
#include "ops/vec.h"

namespace tern::ops {

namespace {

constexpr int64_t kMlaTokensPerTask = 16;  // query tokens per attention task (tiles never change a result)
constexpr int64_t kMlaHeadsPerTask = 8;    // query heads per attention task: each cache row serves them all
constexpr int64_t kIdxTokensPerTask = 16;  // indexer: tokens sharing one transposed key block
constexpr int64_t kIdxKeysPerTask = 2048;  // indexer: key positions per task, so one decode token uses every thread
constexpr int64_t kIdxScoreFloats = int64_t{1} << 22;  // indexer scores held at once (16 MiB); more in rounds

long long ll(int64_t x) { return static_cast<long long>(x); }

// Positions [pos0, pos0 + n_tokens) must lie in a cache of n_ctx rows of dim values.
void check_range(const char* who, const void* cache, int64_t n_ctx, int64_t dim, int64_t n_tokens, int64_t pos0) {
  if (!cache || n_ctx <= 0 || dim <= 0 || n_ctx > INT32_MAX)
    fail("%s: bad cache (data %s, n_ctx %lld, dim %lld)", who, cache ? "set" : "null", ll(n_ctx), ll(dim));
  if (n_tokens < 0 || pos0 < 0 || pos0 > n_ctx - n_tokens)
    fail("%s: positions [%lld, %lld) outside the cache of %lld positions", who, ll(pos0), ll(pos0 + n_tokens),
         ll(n_ctx));
}

// The first n values of cache row `row` (rows `stride` apart) as floats: a pointer into an f32 cache, or the f16
// values converted (exactly) into buf.
const float* row_f32(const void* base, bool f16, int64_t row, int64_t stride, int64_t n, float* buf) {
  if (!f16) return static_cast<const float*>(base) + row * stride;
  const uint16_t* h = static_cast<const uint16_t*>(base) + row * stride;
  for (int64_t i = 0; i < n; ++i) buf[i] = fp16_to_fp32(h[i]);
  return buf;
}

// The topk best of sc[0, n) (a NaN ranks below every number; ties go to the lower position) in increasing position
// order; every position when n <= topk.
void select_topk(const float* sc, int64_t n, int64_t topk, int32_t* sel, int32_t* n_sel) {
  if (n <= topk) {
    std::iota(sel, sel + n, 0);
    *n_sel = static_cast<int32_t>(n);
    return;
  }
  thread_local std::vector<int32_t> idx;
  idx.resize(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto key = [&](int32_t s) { return std::isnan(sc[s]) ? -INFINITY : sc[s]; };
  auto better = [&](int32_t a, int32_t b) {
    const float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + (topk - 1), idx.end(), better);
  std::sort(idx.begin(), idx.begin() + topk);
  std::copy(idx.begin(), idx.begin() + topk, sel);
  *n_sel = static_cast<int32_t>(topk);
}

}  // namespace

// ---- scalar twins (the specification) ----

void rope_interleaved_ref(float* x, int64_t n_tokens, int64_t n_head, int64_t head_stride, int64_t off, int64_t half,
                          const float* cs, const float* sn) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cs + t * half;
    const float* s = sn + t * half;
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = x + (t * n_head + h) * head_stride + off;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[2 * j], b = v[2 * j + 1];
        v[2 * j] = a * c[j] - b * s[j];
        v[2 * j + 1] = b * c[j] + a * s[j];
      }
    }
  }
}

// Mean and biased variance from double sums (two passes), then (x - float(mean)) * float(1 / sqrt(var + eps)),
// times w, plus b, in float.
void layer_norm_ref(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double dev2 = 0.0;
    for (int64_t i = 0; i < n; ++i) dev2 += (xr[i] - mean) * (xr[i] - mean);
    const double var = dev2 / static_cast<double>(n);
    const float m = static_cast<float>(mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    for (int64_t i = 0; i < n; ++i) {
      float v = (xr[i] - m) * inv;
      if (w) v = v * w[i];
      if (b) v = v + b[i];
      yr[i] = v;
    }
  }
}

void indexer_scores_ref(const IndexerBlock& b) {
  thread_local std::vector<float> buf;
  buf.resize(b.dim);
  for (int64_t t = 0; t < b.n_tok; ++t) {
    const float* q = b.q + t * b.n_head * b.dim;
    const float* w = b.w + t * b.n_head;
    const int64_t s_end = std::min(b.s1, b.n_pos0 + t);
    for (int64_t s = b.s0; s < s_end; ++s) {
      const float* k = row_f32(b.k, b.f16, s, b.dim, b.dim, buf.data());
      float score = 0.0f;
      for (int64_t j = 0; j < b.n_head; ++j) {
        float d = 0.0f;
        for (int64_t i = 0; i < b.dim; ++i) d = d + q[j * b.dim + i] * k[i];
        score = score + w[j] * (d > 0.0f ? d : 0.0f);
      }
      b.scores[t * b.score_stride + s] = score;
    }
  }
}

// As attention's scalar twin: scores (vec::dot) times scale, exp(s - max) with a double sum, then the value rows'
// weighted sum (vec::axpy, positions in order) times float(1 / sum). Each row is read once for all heads.
void attend_mla_ref(const MlaBlock& b) {
  thread_local std::vector<float> scratch;
  const int64_t dk = b.dk, dv = b.dv, nq = b.n_q;
  for (int64_t t = 0; t < b.n_tok; ++t) {
    const bool sparse = b.sel != nullptr;
    const int64_t n_pos = sparse ? b.n_sel[t] : b.n_pos0 + t;
    const int32_t* idx = sparse ? b.sel + t * b.sel_stride : nullptr;
    scratch.resize(nq * n_pos + dk);
    float* sc = scratch.data();
    float* buf = scratch.data() + nq * n_pos;
    const float* q = b.q + t * b.q_tok_stride;
    float* out = b.out + t * b.out_tok_stride;
    for (int64_t p = 0; p < n_pos; ++p) {
      const float* kr = row_f32(b.kv, b.f16, idx ? idx[p] : p, dk, dk, buf);
      for (int64_t j = 0; j < nq; ++j) sc[j * n_pos + p] = vec::dot(q + j * dk, kr, dk) * b.scale;
    }
    std::vector<double> sum(nq, 0.0);
    for (int64_t j = 0; j < nq; ++j) {
      float* s = sc + j * n_pos;
      float mx = -INFINITY;
      for (int64_t p = 0; p < n_pos; ++p) mx = s[p] > mx ? s[p] : mx;
      for (int64_t p = 0; p < n_pos; ++p) {
        s[p] = std::exp(s[p] - mx);
        sum[j] += s[p];
      }
      std::memset(out + j * dv, 0, sizeof(float) * dv);
    }
    for (int64_t p = 0; p < n_pos; ++p) {
      const float* vr = row_f32(b.kv, b.f16, idx ? idx[p] : p, dk, dv, buf);
      for (int64_t j = 0; j < nq; ++j) vec::axpy(sc[j * n_pos + p], vr, out + j * dv, dv);
    }
    for (int64_t j = 0; j < nq; ++j) vec::scale(static_cast<float>(1.0 / sum[j]), out + j * dv, dv);
  }
}

void f16_to_f32_ref(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

// As attend_mla_ref for one head whose keys and values are rows of their own.
void attend_mla_expanded_ref(const MlaExpBlock& b) {
  thread_local std::vector<float> sc;
  for (int64_t t = 0; t < b.n_tok; ++t) {
    const int64_t n_pos = b.n_pos0 + t;
    sc.resize(n_pos);
    const float* q = b.q + t * b.q_stride;
    float* out = b.out + t * b.out_stride;
    float mx = -INFINITY;
    for (int64_t p = 0; p < n_pos; ++p) {
      sc[p] = vec::dot(q, b.k + p * b.k_stride, b.dk) * b.scale;
      mx = sc[p] > mx ? sc[p] : mx;
    }
    double sum = 0.0;
    for (int64_t p = 0; p < n_pos; ++p) {
      sc[p] = std::exp(sc[p] - mx);
      sum += sc[p];
    }
    std::memset(out, 0, sizeof(float) * b.dv);
    for (int64_t p = 0; p < n_pos; ++p) vec::axpy(sc[p], b.v + p * b.v_stride, out, b.dv);
    vec::scale(static_cast<float>(1.0 / sum), out, b.dv);
  }
}

// ---- public ops ----

void rope_interleaved(float* x, int64_t n_tokens, int64_t n_head, int64_t head_stride, int64_t off, int64_t n_rot,
                      const int32_t* pos, float freq_base, Isa isa) {
  if (n_rot <= 0 || n_rot % 2 != 0 || off < 0 || off > head_stride - n_rot)
    fail("rope_interleaved: dims [%lld, %lld) (n_rot must be even and positive) outside a row of %lld", ll(off),
         ll(off + n_rot), ll(head_stride));
  if (!(freq_base > 0.0f)) fail("rope_interleaved: freq_base = %g must be positive", static_cast<double>(freq_base));
  if (n_tokens < 0 || n_head < 0)
    fail("rope_interleaved: n_tokens %lld, n_head %lld must not be negative", ll(n_tokens), ll(n_head));
  const Kernels& k = kernels(isa);
  if (n_tokens == 0 || n_head == 0) return;
  const int64_t half = n_rot / 2;
  thread_local std::vector<float> cs, sn;  // [n_tokens, half]
  cs.resize(n_tokens * half);
  sn.resize(n_tokens * half);
  rope_cos_sin(pos, n_tokens, n_rot, freq_base, cs.data(), sn.data());
  const float* c = cs.data();
  const float* s = sn.data();
  split::rows(n_tokens, n_head * n_rot, [&](int64_t t0, int64_t t1) {
    k.rope_interleaved(x + t0 * n_head * head_stride, t1 - t0, n_head, head_stride, off, half, c + t0 * half,
                       s + t0 * half);
  });
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n_rows, int64_t n, float eps,
                Isa isa) {
  if (n_rows < 0 || n <= 0) fail("layer_norm: shape [%lld, %lld] must have rows of n >= 1", ll(n_rows), ll(n));
  const Kernels& k = kernels(isa);
  split::rows(n_rows, n, [&](int64_t r0, int64_t r1) {
    k.layer_norm(x + r0 * n, w, b, y + r0 * n, r1 - r0, n, eps);
  });
}

void rows_store(void* cache, KvType type, int64_t n_ctx, int64_t dim, const float* x, int64_t n_tokens, int64_t pos0,
                Isa isa) {
  check_range("rows_store", cache, n_ctx, dim, n_tokens, pos0);
  const Kernels& k = kernels(isa);
  const int64_t n = n_tokens * dim;
  if (type == KvType::kF32) {
    if (n > 0) std::memcpy(static_cast<float*>(cache) + pos0 * dim, x, sizeof(float) * n);
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(cache) + pos0 * dim;
  split::elements(n, [&](int64_t i0, int64_t i1) { k.f32_to_f16(x + i0, dst + i0, i1 - i0); });
}

void indexer_topk(const float* q, const float* w, int64_t n_tokens, int64_t n_head, int64_t dim, const void* k,
                  KvType type, int64_t n_ctx, int64_t pos0, int64_t topk, int32_t* sel, int32_t* n_sel, Isa isa) {
  check_range("indexer_topk", k, n_ctx, dim, n_tokens, pos0);
  if (n_head <= 0 || topk <= 0)
    fail("indexer_topk: n_head %lld and topk %lld must be positive", ll(n_head), ll(topk));
  if (n_tokens > 0 && (!q || !w || !sel || !n_sel)) fail("indexer_topk: null q, w, sel or n_sel");
  const Kernels& kern = kernels(isa);
  // A token whose causal window fits in topk takes every key: no scores needed.
  const int64_t t_first = std::clamp<int64_t>(topk - pos0, 0, n_tokens);
  for (int64_t t = 0; t < t_first; ++t) select_topk(nullptr, pos0 + t + 1, topk, sel + t * topk, n_sel + t);
  if (t_first == n_tokens) return;

  const int64_t n_keys = pos0 + n_tokens;  // the most any token sees
  int64_t per_round = std::max<int64_t>(1, kIdxScoreFloats / n_keys);
  if (per_round >= kIdxTokensPerTask) per_round -= per_round % kIdxTokensPerTask;
  thread_local std::vector<float> scores;  // [per_round, n_keys]
  scores.resize(std::min(per_round, n_tokens - t_first) * n_keys);
  float* sc = scores.data();
  for (int64_t r0 = t_first; r0 < n_tokens; r0 += per_round) {
    const int64_t r1 = std::min(n_tokens, r0 + per_round);
    const int64_t n_blocks = (r1 - r0 + kIdxTokensPerTask - 1) / kIdxTokensPerTask;
    const int64_t n_chunks = (pos0 + r1 + kIdxKeysPerTask - 1) / kIdxKeysPerTask;
    parallel_for(n_blocks * n_chunks, [&](int64_t task) {
      const int64_t t0 = r0 + task / n_chunks * kIdxTokensPerTask;
      IndexerBlock b;
      b.q = q + t0 * n_head * dim;
      b.w = w + t0 * n_head;
      b.n_tok = std::min(kIdxTokensPerTask, r1 - t0);
      b.n_head = n_head;
      b.dim = dim;
      b.s0 = task % n_chunks * kIdxKeysPerTask;
      b.s1 = b.s0 + kIdxKeysPerTask;
      b.n_pos0 = pos0 + t0 + 1;
      if (b.s0 >= b.n_pos0 + b.n_tok - 1) return;  // no key of this chunk is causal for the block
      b.k = k;
      b.f16 = type == KvType::kF16;
      b.scores = sc + (t0 - r0) * n_keys;
      b.score_stride = n_keys;
      kern.indexer_scores(b);
    });
    parallel_for(r1 - r0, [&](int64_t i) {
      const int64_t t = r0 + i;
      select_topk(sc + i * n_keys, pos0 + t + 1, topk, sel + t * topk, n_sel + t);
    });
  }
}

void rows_load(const void* cache, KvType type, int64_t n_ctx, int64_t dim, int64_t pos0, int64_t n_rows, float* out,
               Isa isa) {
  check_range("rows_load", cache, n_ctx, dim, n_rows, pos0);
  if (type != KvType::kF32 && type != KvType::kF16) fail("rows_load: cache type %s (f32 or f16)", kv_type_name(type));
  if (n_rows > 0 && !out) fail("rows_load: null out");
  const int64_t n = n_rows * dim;
  if (type == KvType::kF32) {
    if (n > 0) std::memcpy(out, static_cast<const float*>(cache) + pos0 * dim, sizeof(float) * n);
    return;
  }
  const Kernels& k = kernels(isa);
  const uint16_t* src = static_cast<const uint16_t*>(cache) + pos0 * dim;
  split::elements(n, [&](int64_t i0, int64_t i1) { k.f16_to_f32(src + i0, out + i0, i1 - i0); });
}

namespace {

void check_selection(const int32_t* sel, int64_t sel_stride, const int32_t* n_sel, int64_t n_tokens, int64_t pos0) {
  if (sel_stride <= 0 || !n_sel) fail("attention_mla: sel given with sel_stride %lld, n_sel %s", ll(sel_stride),
                                      n_sel ? "set" : "null");
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t n = n_sel[t], p = pos0 + t;
    if (n <= 0 || n > sel_stride)
      fail("attention_mla: token %lld selects %lld keys (must be in [1, %lld])", ll(t), ll(n), ll(sel_stride));
    const int32_t* s = sel + t * sel_stride;
    for (int64_t i = 0; i < n; ++i) {
      if (s[i] < 0 || s[i] > p || (i > 0 && s[i] <= s[i - 1]))
        fail("attention_mla: token %lld (position %lld): selected key %lld = %lld is not increasing in [0, %lld]",
             ll(t), ll(p), ll(i), ll(s[i]), ll(p));
    }
  }
}

}  // namespace

void attention_mla(const float* q, int64_t n_tokens, int64_t n_head, const void* kv, KvType type, int64_t n_ctx,
                   int64_t dk, int64_t dv, int64_t pos0, const int32_t* sel, int64_t sel_stride,
                   const int32_t* n_sel, float scale, float* out, Isa isa) {
  check_range("attention_mla", kv, n_ctx, dk, n_tokens, pos0);
  if (n_head <= 0 || dv <= 0 || dv > dk)
    fail("attention_mla: n_head %lld, dv %lld, dk %lld (need n_head >= 1, 1 <= dv <= dk)", ll(n_head), ll(dv),
         ll(dk));
  if (n_tokens > 0 && (!q || !out)) fail("attention_mla: null q or out");
  const auto qa = reinterpret_cast<std::uintptr_t>(q), oa = reinterpret_cast<std::uintptr_t>(out);
  if (n_tokens > 0 && qa < oa + sizeof(float) * n_tokens * n_head * dv &&
      oa < qa + sizeof(float) * n_tokens * n_head * dk)
    fail("attention_mla: out overlaps q");
  if (sel) check_selection(sel, sel_stride, n_sel, n_tokens, pos0);
  const Kernels& kern = kernels(isa);
  const int64_t per_task = std::min(kMlaHeadsPerTask, n_head);
  const int64_t head_tasks = (n_head + per_task - 1) / per_task;
  const int64_t n_blocks = (n_tokens + kMlaTokensPerTask - 1) / kMlaTokensPerTask;
  // Task = (query block, block of heads). Blocks are visited 0, last, 1, last - 1, ... so that contiguous shares of
  // the tasks carry similar causal work.
  parallel_for(n_blocks * head_tasks, [&](int64_t task) {
    const int64_t i = task / head_tasks;
    const int64_t blk = i % 2 == 0 ? i / 2 : n_blocks - 1 - i / 2;
    const int64_t h0 = task % head_tasks * per_task;
    const int64_t t0 = blk * kMlaTokensPerTask;
    MlaBlock b;
    b.q = q + (t0 * n_head + h0) * dk;
    b.out = out + (t0 * n_head + h0) * dv;
    b.q_tok_stride = n_head * dk;
    b.out_tok_stride = n_head * dv;
    b.n_tok = std::min(kMlaTokensPerTask, n_tokens - t0);
    b.n_q = std::min(per_task, n_head - h0);
    b.dk = dk;
    b.dv = dv;
    b.n_pos0 = pos0 + t0 + 1;
    if (sel) {
      b.sel = sel + t0 * sel_stride;
      b.sel_stride = sel_stride;
      b.n_sel = n_sel + t0;
    }
    b.kv = kv;
    b.f16 = type == KvType::kF16;
    b.scale = scale;
    kern.attend_mla(b);
  });
}

void attention_mla_expanded(const float* q, int64_t q_stride, int64_t n_tokens, int64_t n_head, const float* k,
                            const float* v, int64_t n_ctx, int64_t dk, int64_t dv, int64_t pos0, float scale,
                            float* out, int64_t out_stride, Isa isa) {
  check_range("attention_mla_expanded", k, n_ctx, dk, n_tokens, pos0);
  if (n_head <= 0 || dk <= 0 || dv <= 0 || q_stride < n_head * dk || out_stride < n_head * dv)
    fail("attention_mla_expanded: n_head %lld, dk %lld, dv %lld, q_stride %lld, out_stride %lld (need rows of "
         "n_head * dk / n_head * dv within the strides)", ll(n_head), ll(dk), ll(dv), ll(q_stride), ll(out_stride));
  if (n_tokens > 0 && (!q || !v || !out)) fail("attention_mla_expanded: null q, v or out");
  const auto qa = reinterpret_cast<std::uintptr_t>(q), oa = reinterpret_cast<std::uintptr_t>(out);
  if (n_tokens > 0 && qa < oa + sizeof(float) * ((n_tokens - 1) * out_stride + n_head * dv) &&
      oa < qa + sizeof(float) * ((n_tokens - 1) * q_stride + n_head * dk))
    fail("attention_mla_expanded: out overlaps q");
  const Kernels& kern = kernels(isa);
  const int64_t n_blocks = (n_tokens + kMlaTokensPerTask - 1) / kMlaTokensPerTask;
  // Task = (head, query block), a head's blocks in turn so that its keys and values (P KiB each at 256 dims) are
  // read from memory about once; blocks visited 0, last, 1, last - 1, ... as in attention_mla.
  parallel_for(n_blocks * n_head, [&](int64_t task) {
    const int64_t i = task % n_blocks, h = task / n_blocks;
    const int64_t blk = i % 2 == 0 ? i / 2 : n_blocks - 1 - i / 2;
    const int64_t t0 = blk * kMlaTokensPerTask;
    MlaExpBlock b;
    b.q = q + t0 * q_stride + h * dk;
    b.out = out + t0 * out_stride + h * dv;
    b.q_stride = q_stride;
    b.out_stride = out_stride;
    b.n_tok = std::min(kMlaTokensPerTask, n_tokens - t0);
    b.dk = dk;
    b.dv = dv;
    b.n_pos0 = pos0 + t0 + 1;
    b.k = k + h * n_ctx * dk;
    b.v = v + h * n_ctx * dv;
    b.k_stride = dk;
    b.v_stride = dv;
    b.scale = scale;
    kern.attend_mla_expanded(b);
  });
}

}  // namespace tern::ops
