// Sampler and stop strings: distributions checked against exact probabilities computed in the test.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/stop.h"

using namespace tern;
using namespace tern::runtime;

TEST(Sampler, GreedyLowestIdWinsTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  float l[5] = {1, 3, 3, NAN, -1};
  EXPECT_EQ(s.sample(l, 5), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[i] = std::sin(i * 0.37f) * 3;
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(l.data(), 100), b.sample(l.data(), 100));
  p.seed = 7;
  Sampler c(p);
  int diff = 0;
  Sampler a2(SamplingParams{a.params()});
  for (int i = 0; i < 50; ++i) diff += a2.sample(l.data(), 100) != c.sample(l.data(), 100);
  EXPECT_GT(diff, 0);
}

// Empirical frequencies at temperature 0.5 match softmax(l / 0.5) within 4 sigma of a binomial over 20000 draws.
TEST(Sampler, TemperatureDistribution) {
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  Sampler s(p);
  float l[4] = {0.0f, 0.5f, 1.0f, -0.3f};
  double z = 0, q[4];
  for (int i = 0; i < 4; ++i) z += q[i] = std::exp(l[i] / 0.5);
  std::map<int, int> cnt;
  const int n = 20000;
  for (int i = 0; i < n; ++i) cnt[s.sample(l, 4)]++;
  for (int i = 0; i < 4; ++i) {
    double pi = q[i] / z, sd = std::sqrt(n * pi * (1 - pi));
    EXPECT_NEAR(cnt[i], n * pi, 4 * sd) << "token " << i;
  }
}

TEST(Sampler, TopKTopPMinPTruncate) {
  float l[5] = {5, 4, 3, 2, 1};  // softmax probs ~ .636 .234 .086 .032 .012
  SamplingParams p;
  p.temperature = 1;
  p.top_p = 1;
  p.min_p = 0;
  p.top_k = 2;
  {
    Sampler s(p);
    for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(l, 5), 2);
  }
  p.top_k = 0;
  p.top_p = 0.8f;  // .636 + .234 = .87 >= .8 -> keeps 2
  {
    Sampler s(p);
    for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(l, 5), 2);
  }
  p.top_p = 1;
  p.min_p = 0.1f;  // threshold .0636 -> keeps ids 0..2
  {
    Sampler s(p);
    std::map<int, int> c;
    for (int i = 0; i < 3000; ++i) c[s.sample(l, 5)]++;
    EXPECT_EQ(c.count(3) + c.count(4), 0u);
    EXPECT_GT(c[2], 0);
  }
}

TEST(Sampler, Penalties) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  float l[3] = {2.0f, 1.5f, 0.0f};
  s.accept(0);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_EQ(s.sample(l, 3), 1);
  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = 0.4f;
  q.frequency_penalty = 0.3f;
  Sampler t(q);
  t.accept(1);  // 1.5 - 0.4 - 0.3 = 0.8
  float m[3] = {1.0f, 1.5f, 0.0f};
  EXPECT_EQ(t.sample(m, 3), 0);
}

TEST(Sampler, RejectsBadParams) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.min_p = 2;
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(Stop, FindsAndHoldsBack) {
  std::vector<std::string> stops = {"</s>", "STOP"};
  auto m = find_stop("hello </", stops);
  EXPECT_FALSE(m.stopped);
  EXPECT_EQ(m.emit_upto, 6u);  // "</" held back
  m = find_stop("hello </s> more", stops);
  EXPECT_TRUE(m.stopped);
  EXPECT_EQ(m.emit_upto, 6u);
  EXPECT_EQ(m.which, 0);
  m = find_stop("a STOP b </s>", stops);  // the earliest occurrence names the string, not the list order
  EXPECT_TRUE(m.stopped);
  EXPECT_EQ(m.which, 1);
  EXPECT_EQ(m.emit_upto, 2u);
  m = find_stop("abc", {});
  EXPECT_EQ(m.emit_upto, 3u);
  m = find_stop("xxSTO", stops);
  EXPECT_EQ(m.emit_upto, 2u);
}

// Searching only past the already-searched prefix finds the same stops as searching the whole text, including
// a stop string split across the boundary, and stops that start before it.
TEST(Stop, IncrementalSearchEqualsFullSearch) {
  const std::vector<std::string> stops = {"</s>", "STOP", "x"};
  const std::string text = "ab</s";
  for (const std::string& tail : {std::string(">"), std::string("TOP"), std::string("zz"), std::string("x!")}) {
    const std::string full = text + tail;
    const StopMatch a = find_stop(full, stops), b = find_stop(full, stops, text.size());
    EXPECT_EQ(a.stopped, b.stopped) << full;
    EXPECT_EQ(a.emit_upto, b.emit_upto) << full;
  }
  EXPECT_TRUE(find_stop("abcS" "TOP", stops, 4).stopped);   // starts before the searched prefix ends
  EXPECT_EQ(find_stop("abcS" "TOP", stops, 4).emit_upto, 3u);
  EXPECT_FALSE(find_stop("STOP and more", {"STOP"}, 13).stopped);  // already searched: not found again
}
