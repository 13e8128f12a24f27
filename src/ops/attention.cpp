// Causal GQA attention over a per-sequence KV cache (see attention.h).
#include "ops/attention.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "ops/activation.h"
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

// Scores, softmax and weighted value sum for one (query row, KV head) pair over positions [0, n_pos).
template <typename Elem>
void attend_one(const float* q, const Elem* k_head, const Elem* v_head, int64_t n_pos, int64_t hd, float scale,
                std::vector<float>& scores, float* out) {
  scores.resize(n_pos);
  float mx = -INFINITY;
  for (int64_t p = 0; p < n_pos; ++p) {
    float s;
    if constexpr (sizeof(Elem) == 4) {
      s = vec::dot(q, k_head + p * hd, hd);
    } else {
      s = vec::dot_f16(q, k_head + p * hd, hd);
    }
    s *= scale;
    scores[p] = s;
    mx = s > mx ? s : mx;
  }
  double sum = 0.0;
  for (int64_t p = 0; p < n_pos; ++p) {
    scores[p] = std::exp(scores[p] - mx);
    sum += scores[p];
  }
  std::memset(out, 0, sizeof(float) * hd);
  for (int64_t p = 0; p < n_pos; ++p) {
    if constexpr (sizeof(Elem) == 4) {
      vec::axpy(scores[p], v_head + p * hd, out, hd);
    } else {
      vec::axpy_f16(scores[p], v_head + p * hd, out, hd);
    }
  }
  vec::scale(static_cast<float>(1.0 / sum), out, hd);
}

}  // namespace

void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t n_tokens, int64_t pos0) {
  check_kv(kv, n_tokens, pos0, "kv_store");
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
        uint16_t* kd = static_cast<uint16_t*>(kv.k) + row;
        uint16_t* vd = static_cast<uint16_t*>(kv.v) + row;
        for (int64_t i = 0; i < hd; ++i) {
          kd[i] = fp32_to_fp16(ks[i]);
          vd[i] = fp32_to_fp16(vs[i]);
        }
      }
    }
  }
}

void attention_causal(const float* q, int64_t n_tokens, int64_t n_head, const KvCacheView& kv, int64_t pos0,
                      float scale, float* out) {
  check_kv(kv, n_tokens, pos0, "attention");
  if (n_head <= 0 || n_head % kv.n_head_kv != 0) {
    fail("attention: n_head %lld is not a positive multiple of n_head_kv %lld", static_cast<long long>(n_head),
         static_cast<long long>(kv.n_head_kv));
  }
  const int64_t hd = kv.head_dim;
  const int64_t group = n_head / kv.n_head_kv;
  parallel_for(n_tokens * n_head, [&](int64_t task) {
    thread_local std::vector<float> scores;
    const int64_t t = task / n_head, h = task % n_head, g = h / group;
    const float* qr = q + task * hd;
    float* o = out + task * hd;
    const int64_t n_pos = pos0 + t + 1;
    const int64_t head_off = g * kv.n_ctx * hd;
    if (kv.type == KvType::kF32) {
      attend_one(qr, static_cast<const float*>(kv.k) + head_off, static_cast<const float*>(kv.v) + head_off, n_pos,
                 hd, scale, scores, o);
    } else {
      attend_one(qr, static_cast<const uint16_t*>(kv.k) + head_off, static_cast<const uint16_t*>(kv.v) + head_off,
                 n_pos, hd, scale, scores, o);
    }
  });
}

void split_q_gate(const float* qg, int64_t n_tokens, int64_t n_head, int64_t head_dim, float* q, float* gate) {
  for (int64_t r = 0; r < n_tokens * n_head; ++r) {
    std::memcpy(q + r * head_dim, qg + r * 2 * head_dim, sizeof(float) * head_dim);
    std::memcpy(gate + r * head_dim, qg + r * 2 * head_dim + head_dim, sizeof(float) * head_dim);
  }
}

void apply_sigmoid_gate(float* o, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] *= sigmoid(gate[i]);
}

}  // namespace tern::ops
