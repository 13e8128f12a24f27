// KL divergence against a saved base (tern perplexity --kl-base-out / --kl-base): the arithmetic against values
// worked by hand, the statistics, and the base file's round trip and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "core/error.h"
#include "formats/gguf_writer.h"
#include "runtime/kl_divergence.h"

namespace fs = std::filesystem;
using namespace tern;
using namespace tern::runtime;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("tern_kl_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(KlDivergence, LogSoftmaxNormalises) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> x(1000), lp(1000);
  for (float& v : x) v = nd(rng);
  x[3] = 80.0f;  // a dominant logit: the max shift must keep exp in range
  log_softmax(x.data(), 1000, lp.data());
  double z = 0;
  for (float v : lp) z += std::exp(static_cast<double>(v));
  EXPECT_NEAR(z, 1.0, 1e-6);
  // Differences of log-probabilities are differences of logits.
  EXPECT_NEAR(lp[10] - lp[20], x[10] - x[20], 1e-4);
}

// KL(p || q) for p = (1/2, 1/4, 1/4), q = (1/4, 1/2, 1/4): 1/2 ln 2 + 1/4 ln(1/2) = ln(2) / 4.
TEST(KlDivergence, RowMatchesAWorkedExample) {
  const float p[3] = {std::log(0.5f), std::log(0.25f), std::log(0.25f)};
  const float q[3] = {std::log(0.25f), std::log(0.5f), std::log(0.25f)};
  EXPECT_NEAR(kl_row(p, q, 3), std::log(2.0) / 4, 1e-7);
  EXPECT_NEAR(kl_row(q, p, 3), std::log(2.0) / 4, 1e-7);  // symmetric here by construction
  EXPECT_EQ(kl_row(p, p, 3), 0.0) << "identical rows: exactly zero";
  // A token the base gives probability 0 contributes nothing, whatever the other run says.
  const float b[2] = {0.0f, -INFINITY}, c[2] = {std::log(0.9f), std::log(0.1f)};
  EXPECT_NEAR(kl_row(b, c, 2), -std::log(0.9), 1e-7);
}

TEST(KlDivergence, StatsOverPositions) {
  // Three positions over two tokens: KL values 0, ln(2)/... computed by kl_row; check the bookkeeping around it.
  const float a[2] = {std::log(0.75f), std::log(0.25f)};
  const float b[2] = {std::log(0.25f), std::log(0.75f)};
  KlStats s;
  s.add(a, a, 2, 0);  // same rows, top token agrees
  s.add(a, b, 2, 1);  // top tokens differ
  s.add(b, b, 2, 1);
  ASSERT_EQ(s.count(), 3);
  const double k = kl_row(a, b, 2);  // 0.5 ln 3
  EXPECT_NEAR(k, 0.5 * std::log(3.0), 1e-6);
  EXPECT_NEAR(s.mean(), k / 3, 1e-9);
  EXPECT_DOUBLE_EQ(s.max(), k);
  EXPECT_DOUBLE_EQ(s.quantile(0.5), 0.0);
  EXPECT_DOUBLE_EQ(s.quantile(1.0), k);
  EXPECT_NEAR(s.same_top(), 2.0 / 3, 1e-12);
  // Perplexities over the next tokens: base rows a, a, b at tokens 0, 1, 1 -> p = .75, .25, .75.
  EXPECT_NEAR(s.ppl_base(), std::exp(-(std::log(0.75) + std::log(0.25) + std::log(0.75)) / 3), 1e-5);
  EXPECT_NEAR(s.ppl(), std::exp(-(std::log(0.75) + std::log(0.75) + std::log(0.75)) / 3), 1e-5);
  EXPECT_GT(s.stderr_mean(), 0.0);
}

TEST(KlDivergence, BaseFileRoundTrip) {
  KlBase b;
  b.n_ctx = 8;
  b.first = 4;
  b.n_vocab = 5;
  for (int i = 0; i < 16; ++i) b.tokens.push_back(i * 3 % 5);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-9.0f, 0.0f);
  b.logprobs.resize(static_cast<size_t>(2 * 3 * 5));
  for (float& v : b.logprobs) v = u(rng);
  const std::string path = temp_path("roundtrip.gguf");
  write_kl_base(path, b);
  const KlBase r = read_kl_base(path);
  EXPECT_EQ(r.n_ctx, 8);
  EXPECT_EQ(r.first, 4);
  EXPECT_EQ(r.n_vocab, 5);
  EXPECT_EQ(r.n_chunk(), 2);
  EXPECT_EQ(r.tokens, b.tokens);
  EXPECT_EQ(r.logprobs, b.logprobs);
  fs::remove(path);
}

TEST(KlDivergence, RefusesWhatIsNotABase) {
  auto expect_error = [](const std::string& path, const std::string& what) {
    try {
      read_kl_base(path);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // A GGUF that is not a base (a model file, say).
  gguf::Writer m;
  m.add_str("general.architecture", "qwen35moe");
  const std::string model = temp_path("model.gguf");
  m.write(model);
  expect_error(model, "not a KL base file");
  // A base whose logprobs do not match its header.
  gguf::Writer w;
  w.add_str("general.type", "tern-kl-base");
  w.add_u32("tern.kl_base.n_ctx", 8);
  w.add_u32("tern.kl_base.first", 4);
  w.add_u32("tern.kl_base.n_vocab", 5);
  std::vector<int32_t> tok(8, 1);
  std::vector<float> lp(4 * 5, -1.0f);  // 4 rows; 3 expected
  w.add_tensor("tokens", quant::Type::I32, {8}, {reinterpret_cast<const uint8_t*>(tok.data()), tok.size() * 4});
  w.add_tensor("logprobs", quant::Type::F32, {5, 4}, {reinterpret_cast<const uint8_t*>(lp.data()), lp.size() * 4});
  const std::string bad = temp_path("bad.gguf");
  w.write(bad);
  expect_error(bad, "tensor 'logprobs' must be F32 [5, 3]");
  expect_error(temp_path("missing.gguf"), "missing.gguf");
  fs::remove(model);
  fs::remove(bad);
}

}  // namespace
