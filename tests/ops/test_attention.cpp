// ops: causal GQA attention over the per-sequence KV cache (f32 and f16), the q/gate split and the sigmoid
// output gate, vs a float64 reference written here (contract section 7).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/parallel.h"
#include "ops/attention.h"
#include "attn_one_by_one.h"
#include "ref.h"

using namespace tern;
using namespace tern::ops;
using namespace tern::ops::test;

namespace {

struct AttnDims {
  int64_t n_head = 8, n_head_kv = 2, head_dim = 256, n_ctx = 48;
};

// Owning KV cache storage for one layer and one sequence.
struct Cache {
  std::vector<float> k32, v32;
  std::vector<uint16_t> k16, v16;
  KvCacheView view;
  Cache(const AttnDims& s, KvType type) {
    const size_t n = s.n_head_kv * s.n_ctx * s.head_dim;
    view.k_type = view.v_type = type;
    view.n_head_kv = s.n_head_kv;
    view.n_ctx = s.n_ctx;
    view.head_dim = s.head_dim;
    if (type == KvType::kF32) {
      k32.assign(n, NAN);  // unwritten rows are NaN: reading one would poison the output
      v32.assign(n, NAN);
      view.k = k32.data();
      view.v = v32.data();
    } else {
      k16.assign(n, 0x7e00);
      v16.assign(n, 0x7e00);
      view.k = k16.data();
      view.v = v16.data();
    }
  }
};

// Keys / values as the cache holds them (f16-rounded for an f16 cache), all positions [n_pos, n_kv, hd].
std::vector<double> stored(const std::vector<float>& x, KvType type) {
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = type == KvType::kF16 ? fp16_to_fp32(fp32_to_fp16(x[i])) : x[i];
  return r;
}

// Float64 causal GQA attention: queries q [T, nh, hd] at positions pos0 + t over keys/values
// k, v [n_pos, nkv, hd] (position-major, as produced token by token).
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, int64_t T, int64_t pos0, const AttnDims& s) {
  const int64_t hd = s.head_dim, nkv = s.n_head_kv, group = s.n_head / s.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out(T * s.n_head * hd, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t g = h / group, n_pos = pos0 + t + 1;
      std::vector<double> sc(n_pos);
      double mx = -INFINITY, sum = 0.0;
      for (int64_t p = 0; p < n_pos; ++p) {
        double d = 0.0;
        for (int64_t i = 0; i < hd; ++i) d += q[(t * s.n_head + h) * hd + i] * k[(p * nkv + g) * hd + i];
        sc[p] = d * scale;
        mx = std::max(mx, sc[p]);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t p = 0; p < n_pos; ++p)
        for (int64_t i = 0; i < hd; ++i) out[(t * s.n_head + h) * hd + i] += sc[p] / sum * v[(p * nkv + g) * hd + i];
    }
  }
  return out;
}

void attention_vs_double(KvType type) {
  const AttnDims s;
  std::mt19937_64 rng(type == KvType::kF32 ? 11 : 12);
  const int64_t past = 20, T = 7, hd = s.head_dim;
  const int64_t n_pos = past + T;
  auto k = rand_vec(rng, n_pos * s.n_head_kv * hd, -2.0f, 2.0f);
  auto v = rand_vec(rng, n_pos * s.n_head_kv * hd, -1.0f, 1.0f);
  auto q = rand_vec(rng, T * s.n_head * hd, -2.0f, 2.0f);
  Cache c(s, type);
  kv_store(c.view, k.data(), v.data(), past, 0);  // the cached prefix
  kv_store(c.view, k.data() + past * s.n_head_kv * hd, v.data() + past * s.n_head_kv * hd, T, past);
  const auto ref = attention_ref(q, stored(k, type), stored(v, type), T, past, s);
  for (const tern::test::IsaVariant var : tern::test::kIsaVariants) {  // every variant this build and CPU run
    if (!tern::test::variant_unavailable(var).empty()) continue;
    const tern::test::ScopedIsaVariant scope(var);
    Guarded out(T * s.n_head * hd);
    attention_causal(q.data(), T, s.n_head, c.view, past, 1.0f / std::sqrt(static_cast<float>(hd)), out.data(),
                     var.isa);
    // fp32 dots of 256 terms are good to ~1e-7 relative per score, so NMSE lands near 1e-13; 1e-10 leaves
    // margin yet fails on a wrong KV-head mapping, scale, or causal bound (those give NMSE > 1e-3).
    EXPECT_LE(nmse(out.values(), ref), 1e-10) << tern::test::variant_name(var);
    EXPECT_TRUE(out.ok());
  }
}

}  // namespace

TEST(Attention, F32CacheVsDouble) { attention_vs_double(KvType::kF32); }
TEST(Attention, F16CacheVsDouble) { attention_vs_double(KvType::kF16); }

// Prefill of 13 tokens in one call == the same tokens stored and attended one at a time, bit for bit, and
// independent of the thread count (each output row is one thread's fixed-order sum).
TEST(Attention, BatchEqualsOneByOneAndThreadCountInvariant) {
  const AttnDims s;
  std::mt19937_64 rng(13);
  const int64_t T = 13, hd = s.head_dim, row_kv = s.n_head_kv * hd, row_q = s.n_head * hd;
  auto k = rand_vec(rng, T * row_kv, -2.0f, 2.0f), v = rand_vec(rng, T * row_kv, -1.0f, 1.0f);
  auto q = rand_vec(rng, T * row_q, -2.0f, 2.0f);
  const float scale = 0.0625f;
  for (KvType type : {KvType::kF32, KvType::kF16}) {
    Cache a(s, type), b(s, type);
    const int saved = n_threads();
    set_n_threads(1);
    std::vector<float> batch(T * row_q), multi(T * row_q);
    kv_store(a.view, k.data(), v.data(), T, 0);
    attention_causal(q.data(), T, s.n_head, a.view, 0, scale, batch.data());
    set_n_threads(3);
    attention_causal(q.data(), T, s.n_head, a.view, 0, scale, multi.data());
    set_n_threads(saved);
    const std::vector<float> single =
        tern::ops::test::attend_one_by_one(b.view, k.data(), v.data(), q.data(), T, s.n_head, scale, engine_isa(), 1);
    EXPECT_TRUE(bit_equal(batch, single));
    EXPECT_TRUE(bit_equal(batch, multi));
  }
}

TEST(Attention, RejectsOutOfRangeAndBadHeads) {
  const AttnDims s;
  Cache c(s, KvType::kF32);
  std::vector<float> kv(s.n_head_kv * s.head_dim, 0.0f), q(s.n_head * s.head_dim, 0.0f), o(q.size());
  EXPECT_THROW(kv_store(c.view, kv.data(), kv.data(), 1, s.n_ctx), Error);
  EXPECT_THROW(attention_causal(q.data(), 1, s.n_head, c.view, s.n_ctx, 1.0f, o.data()), Error);
  EXPECT_THROW(attention_causal(q.data(), 1, 3, c.view, 0, 1.0f, o.data()), Error);
  KvCacheView empty;
  EXPECT_THROW(attention_causal(q.data(), 1, s.n_head, empty, 0, 1.0f, o.data()), Error);
}

// Exact: the split is a copy and the gate one sigmoid and product per element (relative error <= 1e-6).
TEST(Attention, SplitQGateAndSigmoidGate) {
  std::mt19937_64 rng(14);
  const int64_t T = 3, nh = 4, hd = 8;
  auto qg = rand_vec(rng, T * nh * 2 * hd, -5.0f, 5.0f);
  std::vector<float> q(T * nh * hd), gate(T * nh * hd);
  split_q_gate(qg.data(), T, nh, hd, q.data(), gate.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < hd; ++i) {
        ASSERT_EQ(q[(t * nh + h) * hd + i], qg[((t * nh + h) * 2) * hd + i]);
        ASSERT_EQ(gate[(t * nh + h) * hd + i], qg[((t * nh + h) * 2 + 1) * hd + i]);
      }
  std::vector<float> o = q;
  apply_sigmoid_gate(o.data(), gate.data(), static_cast<int64_t>(o.size()));
  for (size_t i = 0; i < o.size(); ++i) {
    const double ref = q[i] / (1.0 + std::exp(-static_cast<double>(gate[i])));
    EXPECT_NEAR(o[i], ref, 1e-6 * std::fabs(ref) + 1e-30);
  }
}
