// ops: causal depthwise conv1d + SiLU with rolling state (the DeltaNet short conv, contract 8.2) vs a
// float64 reference, and the state-handoff equalities (batch == one by one == any split).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/conv.h"
#include "ref.h"

using namespace tern;
using namespace tern::ops;
using namespace tern::ops::test;

namespace {

constexpr int64_t kCh = 300;  // not a multiple of the 256-channel task block: exercises the tail
constexpr int64_t kK = 4;

// Float64 reference over the concatenation [state ; x]; returns outputs and the new state.
void conv_ref(const std::vector<float>& x, int64_t T, const std::vector<float>& w, const std::vector<float>& state,
              std::vector<double>& y, std::vector<float>& new_state) {
  const int64_t ns = kK - 1;
  y.assign(T * kCh, 0.0);
  new_state.assign(kCh * ns, 0.0f);
  for (int64_t c = 0; c < kCh; ++c) {
    std::vector<float> m(ns + T);
    for (int64_t j = 0; j < ns; ++j) m[j] = state[c * ns + j];
    for (int64_t t = 0; t < T; ++t) m[ns + t] = x[t * kCh + c];
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0.0;
      for (int64_t i = 0; i < kK; ++i) acc += static_cast<double>(w[c * kK + i]) * m[t + i];
      y[t * kCh + c] = acc / (1.0 + std::exp(-acc));
    }
    for (int64_t j = 0; j < ns; ++j) new_state[c * ns + j] = m[T + j];
  }
}

}  // namespace

// Four products and a silu per output: NMSE ~1e-15; 1e-12 fails on a reversed kernel or state misuse.
// The new state is a copy of inputs, so it must match exactly. T = 1 and 2 (< kernel - 1) shift the old
// state partially; 37 spans many full windows.
TEST(Conv1d, VsDoubleWithIncomingState) {
  std::mt19937_64 rng(21);
  const auto w = rand_vec(rng, kCh * kK, -0.8f, 0.8f);
  for (int64_t T : {1, 2, 3, 37}) {
    const auto x = rand_vec(rng, T * kCh, -3.0f, 3.0f);
    std::vector<float> state = rand_vec(rng, kCh * (kK - 1), -3.0f, 3.0f);
    std::vector<double> ref;
    std::vector<float> ref_state;
    conv_ref(x, T, w, state, ref, ref_state);
    Guarded y(T * kCh);
    conv1d_causal_silu(x.data(), T, kCh, kK, w.data(), state.data(), y.data());
    EXPECT_LE(nmse(y.values(), ref), 1e-12) << "T=" << T;
    EXPECT_TRUE(y.ok());
    EXPECT_TRUE(bit_equal(state, ref_state)) << "T=" << T;
  }
}

// Fresh sequence (zero state) equals HF's F.conv1d(padding = 3) truncated to T outputs, which is the same
// reference with a zero state.
TEST(Conv1d, FreshSequenceZeroState) {
  std::mt19937_64 rng(22);
  const int64_t T = 5;
  const auto w = rand_vec(rng, kCh * kK, -0.8f, 0.8f), x = rand_vec(rng, T * kCh, -3.0f, 3.0f);
  std::vector<float> state(kCh * (kK - 1), 0.0f), ref_state;
  std::vector<double> ref;
  conv_ref(x, T, w, state, ref, ref_state);
  std::vector<float> y(T * kCh);
  conv1d_causal_silu(x.data(), T, kCh, kK, w.data(), state.data(), y.data());
  EXPECT_LE(nmse(y, ref), 1e-12);
}

// Bit-exact: one call over 50 tokens == 50 single-token calls == calls of 7 + 1 + 42 tokens (prefill A then
// B == prefill A+B), outputs and final state, and with 1 or 3 threads.
TEST(Conv1d, BatchEqualsOneByOneAndSplits) {
  std::mt19937_64 rng(23);
  const int64_t T = 50;
  const auto w = rand_vec(rng, kCh * kK, -0.8f, 0.8f), x = rand_vec(rng, T * kCh, -3.0f, 3.0f);
  const auto s0 = rand_vec(rng, kCh * (kK - 1), -1.0f, 1.0f);
  const int saved = n_threads();
  set_n_threads(1);
  std::vector<float> s_batch = s0, y_batch(T * kCh);
  conv1d_causal_silu(x.data(), T, kCh, kK, w.data(), s_batch.data(), y_batch.data());
  std::vector<float> s_one = s0, y_one(T * kCh);
  for (int64_t t = 0; t < T; ++t)
    conv1d_causal_silu(x.data() + t * kCh, 1, kCh, kK, w.data(), s_one.data(), y_one.data() + t * kCh);
  set_n_threads(3);
  std::vector<float> s_split = s0, y_split(T * kCh);
  int64_t t0 = 0;
  for (int64_t n : {7, 1, 42}) {
    conv1d_causal_silu(x.data() + t0 * kCh, n, kCh, kK, w.data(), s_split.data(), y_split.data() + t0 * kCh);
    t0 += n;
  }
  set_n_threads(saved);
  EXPECT_TRUE(bit_equal(y_batch, y_one));
  EXPECT_TRUE(bit_equal(s_batch, s_one));
  EXPECT_TRUE(bit_equal(y_batch, y_split));
  EXPECT_TRUE(bit_equal(s_batch, s_split));
}

TEST(Conv1d, RejectsBadKernel) {
  std::vector<float> x(4), w(4), s(4), y(4);
  EXPECT_THROW(conv1d_causal_silu(x.data(), 1, 4, 0, w.data(), s.data(), y.data()), Error);
}
