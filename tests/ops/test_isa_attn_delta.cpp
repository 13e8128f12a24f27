// ops, per ISA: causal attention (f32 / f16 cache) and the gated delta rule (recurrent and chunked) on every SIMD
// ISA this CPU has (a missing one is SKIPPED) against the scalar _ref kernels: odd head dims and group sizes, query
// blocks crossing the 16-token task size, guard canaries, NaN-poisoned unwritten cache rows; and on each ISA the
// determinism contract (batch == token by token, any thread count) and chunked == recurrent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/attention.h"
#include "ops/delta_rule.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "attn_one_by_one.h"
#include "ref.h"

using namespace tern;
using namespace tern::ops;
using namespace tern::ops::test;

namespace {

struct AttnCase {
  int64_t n_head, n_head_kv, hd, T, pos0;
};

// One sequence's cache, unwritten rows NaN (reading past the causal bound would poison the output).
struct Cache {
  std::vector<float> k32, v32;
  std::vector<uint16_t> k16, v16;
  KvCacheView view;
  Cache(const AttnCase& c, KvType type, int64_t n_ctx) {
    const size_t n = c.n_head_kv * n_ctx * c.hd;
    view = {type, type, nullptr, nullptr, c.n_head_kv, n_ctx, c.hd};
    if (type == KvType::kF32) {
      k32.assign(n, NAN);
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

const AttnCase kAttnCases[] = {
    {8, 2, 256, 1, 20},  // decode, Qwen3.5 head shape
    {8, 2, 256, 40, 0},  // prefill over three 16-token query blocks
    {16, 2, 256, 19, 5},
    {6, 2, 100, 7, 3},   // group 3, head_dim with a tail
    {5, 1, 9, 17, 0},    // group 5: a task of 4 heads and one of 1
    {1, 1, 3, 5, 2},
    {4, 4, 16, 33, 0},
    {8, 2, 256, 2, 300},  // decode at depth: V read in many 16 / 32-position tiles
    {16, 2, 256, 1, 300},  // decode, group 8: one task per KV head (at up to 2 threads), K / V tiles for 8 heads
    {10, 1, 100, 3, 90},   // group 10, head_dim with a tail, a few tokens: heads 4 + 4 + 2 over each tile
};

}  // namespace

class IsaAttention : public IsaTest {};
TERN_INSTANTIATE_SIMD(IsaAttention);

// fp32 dots of head_dim terms (FMA vs mul + add, another order) and the vector exp (a few ulp) -> NMSE ~1e-14;
// 1e-12 still fails on any masking, head-mapping or tail error (those give NMSE > 1e-4).
TEST_P(IsaAttention, VsRef) {
  std::mt19937_64 rng(201);
  for (const AttnCase& c : kAttnCases) {
    for (KvType type : {KvType::kF32, KvType::kF16}) {
      const int64_t n_ctx = c.pos0 + c.T + 3, row_kv = c.n_head_kv * c.hd, row_q = c.n_head * c.hd;
      Cache cache(c, type, n_ctx);
      const auto k = rand_vec(rng, (c.pos0 + c.T) * row_kv, -2.0f, 2.0f);
      const auto v = rand_vec(rng, (c.pos0 + c.T) * row_kv, -1.0f, 1.0f);
      const auto q = rand_vec(rng, c.T * row_q, -2.0f, 2.0f);
      kv_store(cache.view, k.data(), v.data(), c.pos0 + c.T, 0, Isa::kRef);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
      std::vector<float> ref(c.T * row_q);
      Guarded got(c.T * row_q);
      attention_causal(q.data(), c.T, c.n_head, cache.view, c.pos0, scale, ref.data(), Isa::kRef);
      const int saved = n_threads();
      for (int threads : {1, 3}) {  // the decode tasks (one per KV head) and tasks of four heads
        set_n_threads(threads);
        attention_causal(q.data(), c.T, c.n_head, cache.view, c.pos0, scale, got.data(), isa());
        EXPECT_TRUE(got.ok());
        EXPECT_LE(nmse(got.values(), ref), 1e-12) << "n_head " << c.n_head << " hd " << c.hd << " T " << c.T
                                                  << (type == KvType::kF16 ? " f16" : " f32") << " threads " << threads;
      }
      set_n_threads(saved);
    }
  }
}

// On this ISA: a prefill of 40 tokens in one call == the tokens one at a time == another thread count, bit for bit.
// One token at a time at 1 thread takes the decode tasks (all query heads of a KV head, K / V a tile at a time for
// them all) and at 3 threads tasks of four heads (fewer KV heads than threads): both must give the batch's bits.
TEST_P(IsaAttention, BatchEqualsOneByOneAndThreadInvariant) {
  for (const AttnCase& c : {AttnCase{8, 2, 256, 40, 0}, AttnCase{16, 2, 256, 150, 0}, AttnCase{10, 1, 100, 70, 0}}) {
    std::mt19937_64 rng(202);
    const int64_t row_kv = c.n_head_kv * c.hd, row_q = c.n_head * c.hd;
    const auto k = rand_vec(rng, c.T * row_kv, -2.0f, 2.0f), v = rand_vec(rng, c.T * row_kv, -1.0f, 1.0f);
    const auto q = rand_vec(rng, c.T * row_q, -2.0f, 2.0f);
    for (KvType type : {KvType::kF32, KvType::kF16}) {
      Cache a(c, type, c.T), b(c, type, c.T);
      std::vector<float> batch(c.T * row_q), multi(batch.size());
      const int saved = n_threads();
      set_n_threads(1);
      kv_store(a.view, k.data(), v.data(), c.T, 0, isa());
      attention_causal(q.data(), c.T, c.n_head, a.view, 0, 0.0625f, batch.data(), isa());
      set_n_threads(3);
      attention_causal(q.data(), c.T, c.n_head, a.view, 0, 0.0625f, multi.data(), isa());
      set_n_threads(saved);
      const auto single = attend_one_by_one(b.view, k.data(), v.data(), q.data(), c.T, c.n_head, 0.0625f, isa(), 1);
      const auto single3 = attend_one_by_one(b.view, k.data(), v.data(), q.data(), c.T, c.n_head, 0.0625f, isa(), 3);
      const char* tn = type == KvType::kF16 ? " f16" : " f32";
      EXPECT_TRUE(bit_equal(batch, single)) << "n_head " << c.n_head << tn;
      EXPECT_TRUE(bit_equal(batch, single3)) << "n_head " << c.n_head << tn;
      EXPECT_TRUE(bit_equal(batch, multi)) << "n_head " << c.n_head << tn;
    }
  }
}

namespace {

struct DeltaCase {
  int64_t n_k_heads, n_v_heads, dk, dv;
  bool grouped = false;  // value head h uses key head h / (Hv / Hk) (qwen3next) instead of h % Hk
};

// Inputs in the conv-output layout [q | k | v] per token: q, k l2-normalised, mixed decays g = -exp(U(-5, 3)),
// beta uniform in (0, 1).
struct DeltaInputs {
  DeltaCase c;
  int64_t T, row;
  std::vector<float> qkv, g, beta;
  DeltaInputs(std::mt19937_64& rng, const DeltaCase& dc, int64_t n_tokens) : c(dc), T(n_tokens) {
    row = 2 * c.n_k_heads * c.dk + c.n_v_heads * c.dv;
    qkv = rand_vec(rng, T * row, -1.0f, 1.0f);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hh = 0; hh < 2 * c.n_k_heads; ++hh) {
        float* x = qkv.data() + t * row + hh * c.dk;
        double ss = 0.0;
        for (int64_t i = 0; i < c.dk; ++i) ss += static_cast<double>(x[i]) * x[i];
        for (int64_t i = 0; i < c.dk; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(ss));
      }
    }
    std::uniform_real_distribution<double> u01(0.0, 1.0), logmag(-5.0, 3.0);
    g.resize(T * c.n_v_heads);
    beta.resize(T * c.n_v_heads);
    for (auto& x : g) x = static_cast<float>(-std::exp(logmag(rng)));
    for (auto& x : beta) x = static_cast<float>(u01(rng));
  }
  DeltaRuleShape shape(int64_t n) const { return {n, c.n_k_heads, c.n_v_heads, c.dk, c.dv, c.grouped}; }
  DeltaRuleInputs view(int64_t t0 = 0) const {
    const float* base = qkv.data() + t0 * row;
    return {base,
            row,
            base + c.n_k_heads * c.dk,
            row,
            base + 2 * c.n_k_heads * c.dk,
            row,
            g.data() + t0 * c.n_v_heads,
            beta.data() + t0 * c.n_v_heads};
  }
  size_t state_size() const { return c.n_v_heads * c.dk * c.dv; }
  size_t out_size(int64_t n) const { return n * c.n_v_heads * c.dv; }
};

const DeltaCase kDeltaCases[] = {
    {4, 8, 128, 128},  // Qwen3.5 head dims, fewer heads
    {1, 2, 37, 45},    // odd dims: tails in every vector loop
    {2, 2, 16, 130},   // dv just past a column block
    {1, 1, 8, 8},
    {2, 6, 16, 24, true},  // grouped heads (qwen3next): 3 value heads per key head
};

}  // namespace

class IsaDeltaRule : public IsaTest {};
TERN_INSTANTIATE_SIMD(IsaDeltaRule);

// Recurrent and chunked forms on this ISA vs the ref's same form, and chunked vs recurrent on this ISA. Both forms
// are fp32 evaluations of one contractive map: the ref tests measure ~1e-13 against float64, so NMSE <= 1e-10
// for outputs and final state (wrong decays, head maps or chunk boundaries give > 1e-4).
TEST_P(IsaDeltaRule, VsRefAndChunkedEqualsRecurrent) {
  std::mt19937_64 rng(301);
  for (const DeltaCase& c : kDeltaCases) {
    for (int64_t T : {1, 5, 64, 70, 130}) {
      const DeltaInputs in(rng, c, T);
      const auto s0 = rand_vec(rng, in.state_size(), -0.1f, 0.1f);
      std::vector<float> s_rr = s0, s_cr = s0, s_r = s0, s_c = s0, o_rr(in.out_size(T)), o_cr(in.out_size(T));
      Guarded o_r(in.out_size(T)), o_c(in.out_size(T));
      gated_delta_rule_recurrent(in.shape(T), in.view(), s_rr.data(), o_rr.data(), Isa::kRef);
      gated_delta_rule_chunked(in.shape(T), in.view(), s_cr.data(), o_cr.data(), Isa::kRef);
      gated_delta_rule_recurrent(in.shape(T), in.view(), s_r.data(), o_r.data(), isa());
      gated_delta_rule_chunked(in.shape(T), in.view(), s_c.data(), o_c.data(), isa());
      const std::string at = "dk " + std::to_string(c.dk) + " dv " + std::to_string(c.dv) + " T " + std::to_string(T) +
                             (c.grouped ? " grouped" : "");
      EXPECT_TRUE(o_r.ok() && o_c.ok()) << at;
      EXPECT_LE(nmse(o_r.values(), o_rr), 1e-10) << at << " recurrent out";
      EXPECT_LE(nmse(s_r, s_rr), 1e-10) << at << " recurrent state";
      EXPECT_LE(nmse(o_c.values(), o_cr), 1e-10) << at << " chunked out";
      EXPECT_LE(nmse(s_c, s_cr), 1e-10) << at << " chunked state";
      EXPECT_LE(nmse(o_c.values(), o_r.values()), 1e-10) << at << " chunked vs recurrent out";
      EXPECT_LE(nmse(s_c, s_r), 1e-10) << at << " chunked vs recurrent state";
    }
  }
}

// On this ISA: the recurrence token by token == in one call (decode after prefill), both forms independent of the
// thread count, and gated_delta_rule runs the form delta_rule_chunk_min documents — all bit for bit.
TEST_P(IsaDeltaRule, DeterminismAndDispatch) {
  using Fn = void (*)(const DeltaRuleShape&, const DeltaRuleInputs&, float*, float*, Isa);
  std::mt19937_64 rng(302);
  const DeltaCase c = kDeltaCases[0];
  const int64_t T = 70;
  const DeltaInputs in(rng, c, T);
  const auto s0 = rand_vec(rng, in.state_size(), -0.1f, 0.1f);
  const int64_t per_tok = c.n_v_heads * c.dv;
  std::vector<float> s_all = s0, s_one = s0, o_all(in.out_size(T)), o_one(o_all.size());
  gated_delta_rule_recurrent(in.shape(T), in.view(), s_all.data(), o_all.data(), isa());
  for (int64_t t = 0; t < T; ++t)
    gated_delta_rule_recurrent(in.shape(1), in.view(t), s_one.data(), o_one.data() + t * per_tok, isa());
  EXPECT_TRUE(bit_equal(o_all, o_one));
  EXPECT_TRUE(bit_equal(s_all, s_one));
  const int saved = n_threads();
  for (Fn fn : {Fn(gated_delta_rule_recurrent), Fn(gated_delta_rule_chunked)}) {
    std::vector<float> s1 = s0, s3 = s0, o1(in.out_size(T)), o3(o1.size());
    set_n_threads(1);
    fn(in.shape(T), in.view(), s1.data(), o1.data(), isa());
    set_n_threads(3);
    fn(in.shape(T), in.view(), s3.data(), o3.data(), isa());
    EXPECT_TRUE(bit_equal(o1, o3) && bit_equal(s1, s3));
  }
  set_n_threads(saved);
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, T}) {
    const Fn expected =
        n >= delta_rule_chunk_min(isa()) ? Fn(gated_delta_rule_chunked) : Fn(gated_delta_rule_recurrent);
    std::vector<float> se = s0, sd = s0, oe(in.out_size(n)), od(oe.size());
    expected(in.shape(n), in.view(), se.data(), oe.data(), isa());
    gated_delta_rule(in.shape(n), in.view(), sd.data(), od.data(), isa());
    EXPECT_TRUE(bit_equal(oe, od) && bit_equal(se, sd)) << "n=" << n;
  }
}

// The SIMDe twin of ops/avx512 against the native unit on a host that has both: bit-identical results for every
// op (both built with -ffp-contract=off, SIMDe following Intel's pseudo-code), so the twin's passes on an AVX2-only
// host stand for the native unit's.
TEST(OpsSimdeTwin, MatchesNativeAvx512) {
  const tern::test::IsaVariant native{Isa::kAvx512, false}, twin{Isa::kAvx512, true};
  for (const tern::test::IsaVariant v : {native, twin})
    if (const std::string why = tern::test::variant_unavailable(v); !why.empty()) GTEST_SKIP() << why;
  std::mt19937_64 rng(401);
  const DeltaInputs din(rng, kDeltaCases[1], 70);
  const auto s0 = rand_vec(rng, din.state_size(), -0.1f, 0.1f);
  const AttnCase ac{6, 2, 100, 19, 3};
  Cache cache(ac, KvType::kF16, ac.pos0 + ac.T);
  const auto k = rand_vec(rng, (ac.pos0 + ac.T) * ac.n_head_kv * ac.hd, -2.0f, 2.0f);
  const auto v = rand_vec(rng, k.size(), -1.0f, 1.0f), q = rand_vec(rng, ac.T * ac.n_head * ac.hd, -2.0f, 2.0f);
  const auto x = rand_vec(rng, 3 * 1037, -30.0f, 30.0f), z = rand_vec(rng, x.size(), -8.0f, 8.0f);
  const auto w = rand_vec(rng, 1037, 0.5f, 1.5f), cw = rand_vec(rng, 300 * 4, -0.8f, 0.8f);
  const std::vector<int32_t> pos = {3, 70, 4095};
  const auto cs0 = rand_vec(rng, 300 * 3, -1.0f, 1.0f);
  auto run = [&](tern::test::IsaVariant var) {
    const tern::test::ScopedIsaVariant scope(var);
    const Isa isa = Isa::kAvx512;
    std::vector<std::vector<float>> r;
    for (auto f : {&sigmoid_inplace, &silu_inplace, &softplus_inplace}) {
      r.push_back(x);
      f(r.back().data(), static_cast<int64_t>(x.size()), isa);
    }
    r.push_back(x);
    softmax_rows(r.back().data(), 3, 1037, isa);
    r.emplace_back(x.size());
    rms_norm_gated(x.data(), z.data(), w.data(), r.back().data(), 3, 1037, 1e-6f, isa);
    r.emplace_back(x.size());
    l2_norm(x.data(), r.back().data(), 3, 1037, 1e-6f, isa);
    r.push_back(std::vector<float>(x.begin(), x.begin() + 3 * 2 * 130));
    rope_neox(r.back().data(), 3, 2, 130, 64, pos.data(), 1e7f, isa);
    std::vector<float> cs = cs0;
    r.emplace_back(5 * 300);
    conv1d_causal_silu(x.data(), 5, 300, 4, cw.data(), cs.data(), r.back().data(), isa);
    kv_store(cache.view, k.data(), v.data(), ac.pos0 + ac.T, 0, isa);
    r.emplace_back(q.size());
    attention_causal(q.data(), ac.T, ac.n_head, cache.view, ac.pos0, 0.1f, r.back().data(), isa);
    r.push_back(s0);
    r.emplace_back(din.out_size(70));
    gated_delta_rule_recurrent(din.shape(70), din.view(), r[r.size() - 2].data(), r.back().data(), isa);
    r.push_back(s0);
    r.emplace_back(din.out_size(70));
    gated_delta_rule_chunked(din.shape(70), din.view(), r[r.size() - 2].data(), r.back().data(), isa);
    return r;
  };
  const auto a = run(native);
  const auto b = run(twin);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bit_equal(a[i], b[i])) << "result " << i;
}
