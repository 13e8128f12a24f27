// ops: MoE routing (softmax, top-k with lower-index tie-breaking, renormalised weights) vs a float64
// reference written here (contract section 9).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/moe.h"
#include "ref.h"

using namespace tern;
using namespace tern::ops;
using namespace tern::ops::test;

namespace {

void route_ref(const std::vector<float>& logits, int64_t T, int64_t E, int64_t K, std::vector<int32_t>& ids,
               std::vector<double>& w) {
  ids.resize(T * K);
  w.resize(T * K);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> p(E);
    double mx = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, static_cast<double>(logits[t * E + e]));
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[t * E + e] - mx));
    for (auto& x : p) x /= sum;
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double top = 0.0;
    for (int64_t k = 0; k < K; ++k) top += p[order[k]];
    for (int64_t k = 0; k < K; ++k) {
      ids[t * K + k] = order[k];
      w[t * K + k] = p[order[k]] / top;
    }
  }
}

}  // namespace

// Qwen3.5-35B-A3B sizes (256 experts, top 8). Random logits have no near-ties at fp32 precision, so the
// expert ids must match exactly; weights are a softmax ratio (a few ulp) -> NMSE <= 1e-12.
TEST(MoeRouting, VsDouble) {
  std::mt19937_64 rng(41);
  const int64_t T = 20, E = 256, K = 8;
  const auto logits = rand_vec(rng, T * E, -4.0f, 4.0f);
  std::vector<int32_t> ids(T * K), ids_ref;
  Guarded w(T * K);
  std::vector<double> w_ref;
  moe_route_softmax_topk(logits.data(), T, E, K, ids.data(), w.data());
  route_ref(logits, T, E, K, ids_ref, w_ref);
  EXPECT_EQ(ids, ids_ref);
  EXPECT_LE(nmse(w.values(), w_ref), 1e-12);
  EXPECT_TRUE(w.ok());
  for (int64_t t = 0; t < T; ++t) {  // renormalised: each token's weights sum to 1 (fp32 rounding)
    double s = 0.0;
    for (int64_t k = 0; k < K; ++k) s += w.values()[t * K + k];
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

// Exact ties: the lower expert index wins, and the output order is probability-descending then index.
TEST(MoeRouting, TiesBreakTowardsLowerIndex) {
  const int64_t E = 10, K = 3;
  std::vector<float> logits(E, 0.0f);
  logits[7] = 2.0f;  // the clear winner
  logits[5] = 1.0f;  // three-way tie at 1.0 straddling the cut: 5 and 8 are kept, 9 dropped
  logits[8] = 1.0f;
  logits[9] = 1.0f;
  std::vector<int32_t> ids(K);
  std::vector<float> w(K);
  moe_route_softmax_topk(logits.data(), 1, E, K, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{7, 5, 8}));
  EXPECT_EQ(w[1], w[2]);
  // All equal: experts 0..K-1, each weight exactly 1/K up to rounding.
  std::vector<float> flat(E, 0.5f);
  moe_route_softmax_topk(flat.data(), 1, E, K, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
  for (float x : w) EXPECT_NEAR(x, 1.0 / 3.0, 1e-7);
}

TEST(MoeRouting, RejectsBadTopK) {
  std::vector<float> logits(4, 0.0f), w(8);
  std::vector<int32_t> ids(8);
  EXPECT_THROW(moe_route_softmax_topk(logits.data(), 1, 4, 5, ids.data(), w.data()), Error);
  EXPECT_THROW(moe_route_softmax_topk(logits.data(), 1, 4, 0, ids.data(), w.data()), Error);
}

// Sigmoid gating with a selection bias (DeepSeek-V3 / GLM; llama.cpp build_moe_ffn SIGMOID + exp_probs_b):
// experts chosen on sigmoid(logit) + bias, weighted by sigmoid(logit) alone, renormalised or not, times the
// routed scale; vs a float64 reference written here. The bias is large enough to change the choice (checked),
// and random scores have no near-ties at fp32 precision, so ids match exactly; weights to 1e-6 relative.
TEST(MoeRouting, SigmoidWithSelectionBiasVsDouble) {
  std::mt19937_64 rng(43);
  const int64_t T = 16, E = 64, K = 6;
  const auto logits = rand_vec(rng, T * E, -4.0f, 4.0f);
  const auto bias = rand_vec(rng, E, -0.5f, 0.5f);
  for (bool normalize : {true, false}) {
    const float scale = 2.5f;
    RouteParams rp;
    rp.gating = Gating::kSigmoid;
    rp.selection_bias = bias.data();
    rp.normalize = normalize;
    rp.scale = scale;
    std::vector<int32_t> ids(T * K);
    Guarded w(T * K);
    moe_route(logits.data(), T, E, K, rp, ids.data(), w.data());
    EXPECT_TRUE(w.ok());
    int changed_by_bias = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(E), sel(E);
      for (int64_t e = 0; e < E; ++e) {
        s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[t * E + e])));
        sel[e] = s[e] + bias[e];
      }
      std::vector<int32_t> order(E), plain(E);
      std::iota(order.begin(), order.end(), 0);
      std::iota(plain.begin(), plain.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sel[a] > sel[b]; });
      std::stable_sort(plain.begin(), plain.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
      changed_by_bias += !std::equal(order.begin(), order.begin() + K, plain.begin());
      double sum = 0.0;
      for (int64_t k = 0; k < K; ++k) sum += s[order[k]];
      for (int64_t k = 0; k < K; ++k) {
        EXPECT_EQ(ids[t * K + k], order[k]) << "token " << t;
        const double want = (normalize ? s[order[k]] / sum : s[order[k]]) * scale;
        EXPECT_NEAR(w.values()[t * K + k], want, 1e-6 * want) << "token " << t;
      }
    }
    EXPECT_GT(changed_by_bias, 0) << "the bias never changed a choice: the test would not see it ignored";
  }
  // The defaults are the softmax router, bit for bit.
  std::vector<int32_t> a(T * K), b(T * K);
  std::vector<float> wa(T * K), wb(T * K);
  moe_route(logits.data(), T, E, K, RouteParams{}, a.data(), wa.data());
  moe_route_softmax_topk(logits.data(), T, E, K, b.data(), wb.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(wa, wb);
}
