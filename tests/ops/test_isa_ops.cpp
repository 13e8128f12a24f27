// ops, per ISA: activations, softmax, norms, RoPE, the short convolution, f16 KV rows and MoE routing on every SIMD
// ISA this CPU has (Isa::kAvx2, Isa::kAvx512; a missing one is SKIPPED) against the scalar _ref kernels, on random
// inputs with odd lengths and tails, edge values (+-inf, NaN, overflow / underflow of exp, subnormals), guard
// canaries after every output, and the position invariance that keeps a token's result independent of its batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ref.h"

using namespace tern;
using namespace tern::ops;
using namespace tern::ops::test;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Edge values first (exp overflow near 88.72, subnormal results below -87.3, the softplus threshold 20), then
// uniform values over the range where every function is non-trivial and over the whole clamp range.
std::vector<float> edge_and_random(std::mt19937_64& rng, size_t n) {
  std::vector<float> v = {0.0f,   -0.0f,   1e-30f,  -1e-30f, 1e-40f,   -1e-40f, 20.0f,   20.001f, 19.999f,
                          -20.0f, 80.0f,   -80.0f,  87.3f,   -87.3f,   88.0f,   -88.0f,  88.7f,   88.75f,
                          -88.75f, 89.0f,  -89.0f,  95.0f,   -95.0f,   103.5f,  -103.5f, 104.0f,  -104.0f,
                          110.0f, -110.0f, 200.0f,  -200.0f, 3e38f,    -3e38f,  kInf,    -kInf,   kNaN};
  const auto a = rand_vec(rng, n / 2, -30.0f, 30.0f), b = rand_vec(rng, n, -120.0f, 120.0f);
  v.insert(v.end(), a.begin(), a.end());
  v.insert(v.end(), b.begin(), b.end());
  v.resize(n);
  return v;
}

using Unary = void (*)(float*, int64_t, Isa);

// In place on n values: ISA vs ref element by element, canaries intact, and every element's bits the same when the
// array starts at another offset (the tail is the same vector code on a partial vector).
void check_unary(Isa isa, Unary f, double rel, const char* what) {
  std::mt19937_64 rng(101);
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{31}, size_t{100}, size_t{1037}}) {
    const auto x = edge_and_random(rng, n);
    std::vector<float> ref = x;
    f(ref.data(), static_cast<int64_t>(n), Isa::kRef);
    Guarded got(n);
    std::memcpy(got.data(), x.data(), n * sizeof(float));
    f(got.data(), static_cast<int64_t>(n), isa);
    EXPECT_TRUE(got.ok()) << what << " n=" << n;
    EXPECT_TRUE(close_elementwise(got.values().data(), ref.data(), n, rel, 1e-37)) << what << " n=" << n;
    for (size_t shift : {size_t{1}, size_t{3}, size_t{13}}) {
      std::vector<float> y(shift, 0.5f);
      y.insert(y.end(), x.begin(), x.end());
      f(y.data(), static_cast<int64_t>(y.size()), isa);
      EXPECT_EQ(std::memcmp(y.data() + shift, got.data(), n * sizeof(float)), 0) << what << " n=" << n;
    }
  }
}

}  // namespace

class IsaActivation : public IsaTest {};
TERN_INSTANTIATE_SIMD(IsaActivation);

// exp / log are Cephes polynomials (~1 ulp on their ranges) and each function adds an add and a divide: measured
// worst 2.6e-7 relative (~2 ulp) over 420k inputs in [-110, 110], so <= 5e-7 (4 ulp); results below FLT_MIN
// (1e-37 absolute floor) have no relative precision in either implementation.
TEST_P(IsaActivation, SigmoidSiluSoftplus) {
  check_unary(isa(), &sigmoid_inplace, 5e-7, "sigmoid");
  check_unary(isa(), &silu_inplace, 5e-7, "silu");
  check_unary(isa(), &softplus_inplace, 5e-7, "softplus");
}

// swiglu = silu(g) * u and o * sigmoid(g): one more rounding than silu / sigmoid -> 1e-6 as above; also in place
// (out aliasing gate, as the MoE block calls it).
TEST_P(IsaActivation, SwigluAndSigmoidGate) {
  std::mt19937_64 rng(102);
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1037}}) {
    const auto g = edge_and_random(rng, n), u = rand_vec(rng, n, -4.0f, 4.0f);
    std::vector<float> ref(n);
    swiglu(g.data(), u.data(), ref.data(), static_cast<int64_t>(n), Isa::kRef);
    Guarded got(n);
    swiglu(g.data(), u.data(), got.data(), static_cast<int64_t>(n), isa());
    EXPECT_TRUE(got.ok());
    EXPECT_TRUE(close_elementwise(got.values().data(), ref.data(), n, 1e-6, 1e-37)) << "swiglu n=" << n;
    std::vector<float> inplace = g;
    swiglu(inplace.data(), u.data(), inplace.data(), static_cast<int64_t>(n), isa());
    EXPECT_TRUE(bit_equal(inplace, got.values()));

    std::vector<float> o_ref = u;
    apply_sigmoid_gate(o_ref.data(), g.data(), static_cast<int64_t>(n), Isa::kRef);
    Guarded o(n);
    std::memcpy(o.data(), u.data(), n * sizeof(float));
    apply_sigmoid_gate(o.data(), g.data(), static_cast<int64_t>(n), isa());
    EXPECT_TRUE(o.ok());
    EXPECT_TRUE(close_elementwise(o.values().data(), o_ref.data(), n, 1e-6, 1e-37)) << "sigmoid gate n=" << n;
  }
}

// Softmax rows: exp(x - max) (a few ulp) times float(1 / double sum): relative error <= 1e-6 per probability;
// a -inf logit gives exactly 0 and a huge one no overflow, as in the ref.
TEST_P(IsaActivation, SoftmaxRows) {
  std::mt19937_64 rng(103);
  for (int64_t n : {1, 7, 8, 16, 17, 255, 256, 257}) {
    const int64_t rows = 5;
    auto x = rand_vec(rng, rows * n, -15.0f, 15.0f);
    x[0] = 1000.0f;
    if (n > 3) x[n + 2] = -kInf;
    std::vector<float> ref = x;
    softmax_rows(ref.data(), rows, n, Isa::kRef);
    Guarded got(rows * n);
    std::memcpy(got.data(), x.data(), x.size() * sizeof(float));
    softmax_rows(got.data(), rows, n, isa());
    EXPECT_TRUE(got.ok());
    EXPECT_TRUE(close_elementwise(got.values().data(), ref.data(), ref.size(), 1e-6, 1e-37)) << "n=" << n;
    if (n > 3) {
      EXPECT_EQ(got.values()[n + 2], 0.0f);
    }
  }
}

// Routing: the softmax above, then the shared top-k. Random logits have no near-ties at this precision, so the
// expert ids match exactly; the weights are ratios of probabilities -> relative error <= 1e-6.
TEST_P(IsaActivation, MoeRouting) {
  std::mt19937_64 rng(104);
  for (int64_t E : {8, 60, 256}) {
    const int64_t T = 9, K = E < 8 ? E : 8;
    const auto logits = rand_vec(rng, T * E, -4.0f, 4.0f);
    std::vector<int32_t> ids_ref(T * K), ids(T * K);
    std::vector<float> w_ref(T * K);
    Guarded w(T * K);
    moe_route_softmax_topk(logits.data(), T, E, K, ids_ref.data(), w_ref.data(), Isa::kRef);
    moe_route_softmax_topk(logits.data(), T, E, K, ids.data(), w.data(), isa());
    EXPECT_EQ(ids, ids_ref) << "E=" << E;
    EXPECT_TRUE(w.ok());
    EXPECT_TRUE(close_elementwise(w.values().data(), w_ref.data(), w_ref.size(), 1e-6, 0.0)) << "E=" << E;
  }
}

// Sigmoid routing with a selection bias: the vector sigmoid vs the scalar one (a few ulp); ids exact on random
// logits, weights (scaled, renormalised) to 1e-6 relative.
TEST_P(IsaActivation, MoeRoutingSigmoid) {
  std::mt19937_64 rng(106);
  for (int64_t E : {8, 60, 256}) {
    const int64_t T = 9, K = 8;
    const auto logits = rand_vec(rng, T * E, -4.0f, 4.0f);
    const auto bias = rand_vec(rng, E, -0.3f, 0.3f);
    RouteParams rp;
    rp.gating = Gating::kSigmoid;
    rp.selection_bias = bias.data();
    rp.scale = 2.5f;
    std::vector<int32_t> ids_ref(T * K), ids(T * K);
    std::vector<float> w_ref(T * K);
    Guarded w(T * K);
    moe_route(logits.data(), T, E, K, rp, ids_ref.data(), w_ref.data(), Isa::kRef);
    moe_route(logits.data(), T, E, K, rp, ids.data(), w.data(), isa());
    EXPECT_EQ(ids, ids_ref) << "E=" << E;
    EXPECT_TRUE(w.ok());
    EXPECT_TRUE(close_elementwise(w.values().data(), w_ref.data(), w_ref.size(), 1e-6, 0.0)) << "E=" << E;
  }
}

class IsaNorm : public IsaTest {};
TERN_INSTANTIATE_SIMD(IsaNorm);

// The sum of squares is in double on both sides (only the order differs), so the scale matches the ref's to
// <= 1 ulp; then one or two products (rms_norm, l2_norm: <= 3 ulp, relative 5e-7) and silu (gated: 1e-6 as the
// activations). In place (y == x) must give the same bits as out of place.
TEST_P(IsaNorm, RmsL2Gated) {
  std::mt19937_64 rng(105);
  for (int64_t n : {1, 5, 16, 64, 127, 128, 2048, 2051}) {
    const int64_t rows = 3;
    auto x = rand_vec(rng, rows * n, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) x[n + i] *= 1e-4f;  // a row where eps matters
    const auto w = rand_vec(rng, n, 0.5f, 1.5f), z = rand_vec(rng, rows * n, -8.0f, 8.0f);
    std::vector<float> ref(rows * n);
    Guarded got(rows * n);

    rms_norm(x.data(), w.data(), ref.data(), rows, n, 1e-6f, Isa::kRef);
    rms_norm(x.data(), w.data(), got.data(), rows, n, 1e-6f, isa());
    EXPECT_TRUE(got.ok());
    EXPECT_TRUE(close_elementwise(got.values().data(), ref.data(), ref.size(), 5e-7, 0.0)) << "rms n=" << n;
    std::vector<float> inplace = x;
    rms_norm(inplace.data(), w.data(), inplace.data(), rows, n, 1e-6f, isa());
    EXPECT_TRUE(bit_equal(inplace, got.values())) << "rms in place n=" << n;

    rms_norm(x.data(), nullptr, ref.data(), rows, n, 1e-6f, Isa::kRef);
    rms_norm(x.data(), nullptr, got.data(), rows, n, 1e-6f, isa());
    EXPECT_TRUE(close_elementwise(got.values().data(), ref.data(), ref.size(), 5e-7, 0.0)) << "rms no w n=" << n;

    l2_norm(x.data(), ref.data(), rows, n, 1e-6f, Isa::kRef);
    l2_norm(x.data(), got.data(), rows, n, 1e-6f, isa());
    EXPECT_TRUE(got.ok());
    EXPECT_TRUE(close_elementwise(got.values().data(), ref.data(), ref.size(), 5e-7, 0.0)) << "l2 n=" << n;

    rms_norm_gated(x.data(), z.data(), w.data(), ref.data(), rows, n, 1e-6f, Isa::kRef);
    rms_norm_gated(x.data(), z.data(), w.data(), got.data(), rows, n, 1e-6f, isa());
    EXPECT_TRUE(got.ok());
    EXPECT_TRUE(close_elementwise(got.values().data(), ref.data(), ref.size(), 1e-6, 1e-37)) << "gated n=" << n;
    inplace = x;
    rms_norm_gated(inplace.data(), z.data(), w.data(), inplace.data(), rows, n, 1e-6f, isa());
    EXPECT_TRUE(bit_equal(inplace, got.values())) << "gated in place n=" << n;
  }
  std::vector<float> bad = {1.0f, kNaN, 2.0f}, y(3);  // NaN in, NaN out: never a silently finite row
  rms_norm(bad.data(), nullptr, y.data(), 1, 3, 1e-6f, isa());
  EXPECT_TRUE(std::isnan(y[0]));
}

// RoPE: the same products and one add / sub per element as the ref, no FMA (the SIMD units are built with
// -ffp-contract=off): bit-exact. Odd half widths exercise the tail; dims past n_rot stay untouched.
TEST_P(IsaNorm, RopeBitExact) {
  std::mt19937_64 rng(106);
  for (int64_t n_rot : {2, 34, 64, 128}) {
    const int64_t T = 5, nh = 3, hd = 130;
    const std::vector<int32_t> pos = {0, 1, 17, 4095, 262143};
    const auto x = rand_vec(rng, T * nh * hd, -2.0f, 2.0f);
    std::vector<float> ref = x;
    rope_neox(ref.data(), T, nh, hd, n_rot, pos.data(), 1e7f, Isa::kRef);
    Guarded got(x.size());
    std::memcpy(got.data(), x.data(), x.size() * sizeof(float));
    rope_neox(got.data(), T, nh, hd, n_rot, pos.data(), 1e7f, isa());
    EXPECT_TRUE(got.ok());
    EXPECT_TRUE(bit_equal(got.values(), ref)) << "n_rot=" << n_rot;
  }
}

class IsaConv : public IsaTest {};
TERN_INSTANTIATE_SIMD(IsaConv);

// Conv outputs: kernel-many products summed with FMA (SIMD) or mul + add (ref): differences of a few ulp of the
// largest product, relative to outputs that can be near zero -> NMSE <= 1e-13 (measured ~1e-15). The new state is
// a copy: bit-exact. Channel counts around the 256-channel task block and the vector width exercise all tails.
TEST_P(IsaConv, VsRef) {
  std::mt19937_64 rng(107);
  for (int64_t n_ch : {1, 7, 16, 300, 513}) {
    for (int64_t K : {1, 2, 4, 5}) {
      for (int64_t T : {1, 2, 5, 37}) {
        const auto w = rand_vec(rng, n_ch * K, -0.8f, 0.8f), x = rand_vec(rng, T * n_ch, -3.0f, 3.0f);
        const auto s0 = rand_vec(rng, n_ch * (K - 1), -3.0f, 3.0f);
        std::vector<float> s_ref = s0, y_ref(T * n_ch), s_got = s0;
        Guarded y(T * n_ch);
        conv1d_causal_silu(x.data(), T, n_ch, K, w.data(), s_ref.data(), y_ref.data(), Isa::kRef);
        conv1d_causal_silu(x.data(), T, n_ch, K, w.data(), s_got.data(), y.data(), isa());
        EXPECT_TRUE(y.ok());
        EXPECT_LE(nmse(y.values(), y_ref), 1e-13) << "n_ch=" << n_ch << " K=" << K << " T=" << T;
        EXPECT_TRUE(bit_equal(s_got, s_ref)) << "n_ch=" << n_ch << " K=" << K << " T=" << T;
      }
    }
  }
}

// Token by token == one call, bit for bit, on this ISA.
TEST_P(IsaConv, BatchEqualsOneByOne) {
  std::mt19937_64 rng(108);
  const int64_t n_ch = 300, K = 4, T = 20;
  const auto w = rand_vec(rng, n_ch * K, -0.8f, 0.8f), x = rand_vec(rng, T * n_ch, -3.0f, 3.0f);
  std::vector<float> sa(n_ch * (K - 1), 0.0f), sb = sa, ya(T * n_ch), yb(T * n_ch);
  conv1d_causal_silu(x.data(), T, n_ch, K, w.data(), sa.data(), ya.data(), isa());
  for (int64_t t = 0; t < T; ++t)
    conv1d_causal_silu(x.data() + t * n_ch, 1, n_ch, K, w.data(), sb.data(), yb.data() + t * n_ch, isa());
  EXPECT_TRUE(bit_equal(ya, yb));
  EXPECT_TRUE(bit_equal(sa, sb));
}

// f16 KV rows: round to nearest even on every ISA -> the ref's bits for every non-NaN input (ties, subnormals,
// overflow to inf, +-0), and a NaN stays a NaN. Rows of odd head_dim exercise the tail; the f32 cache is a copy.
TEST_P(IsaConv, KvStoreF16BitExact) {
  std::mt19937_64 rng(109);
  for (int64_t hd : {1, 9, 100, 256}) {
    const int64_t n_kv = 2, n_ctx = 6, T = 3;
    auto k = rand_vec(rng, T * n_kv * hd, -70000.0f, 70000.0f), v = rand_vec(rng, T * n_kv * hd, -2.0f, 2.0f);
    const float edge[] = {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.996f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 2.99e-8f,
                          1e-9f, 1.00048828125f, 1.00146484375f, kInf, -kInf, kNaN};
    for (size_t i = 0; i < std::size(edge) && i < k.size(); ++i) k[i] = edge[i];
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], static_cast<int>(i % 40) - 30);
    std::vector<uint16_t> ref_k(n_kv * n_ctx * hd, 0), ref_v = ref_k, got_k = ref_k, got_v = ref_k;
    KvCacheView a{KvType::kF16, KvType::kF16, ref_k.data(), ref_v.data(), n_kv, n_ctx, hd};
    KvCacheView b{KvType::kF16, KvType::kF16, got_k.data(), got_v.data(), n_kv, n_ctx, hd};
    kv_store(a, k.data(), v.data(), T, 2, Isa::kRef);
    kv_store(b, k.data(), v.data(), T, 2, isa());
    for (size_t i = 0; i < ref_k.size(); ++i) {
      const bool nan = (ref_k[i] & 0x7c00) == 0x7c00 && (ref_k[i] & 0x3ff) != 0;
      if (nan) {
        EXPECT_TRUE((got_k[i] & 0x7c00) == 0x7c00 && (got_k[i] & 0x3ff) != 0) << i;
      } else {
        ASSERT_EQ(got_k[i], ref_k[i]) << "hd=" << hd << " i=" << i;
      }
    }
    EXPECT_EQ(got_v, ref_v) << "hd=" << hd;  // rows outside positions [2, 5) stay zero on both
  }
}
