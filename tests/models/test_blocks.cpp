// The MoE block with every gating switch (models/blocks/moe.h) against a naive double-precision reference written
// from the definitions: softmax or sigmoid scores, top-k chosen by score + selection bias, weights renormalised or
// not, times the routed scale; SwiGLU experts; the shared expert with a sigmoid gate or without one (DeepSeek-V3 /
// GLM). F32 weights, so the only differences are f32 rounding (tolerance 1e-4 of the output's scale).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "models/blocks/moe.h"

using namespace tern;
using namespace tern::models;

namespace {

struct F32Matrix {
  std::vector<float> w;  // [n_out, n_in]
  int64_t n_in = 0, n_out = 0;
  Linear view(const char* name) const {
    Linear l;
    l.type = quant::Type::F32;
    l.data = reinterpret_cast<const uint8_t*>(w.data());
    l.n_in = n_in;
    l.n_out = n_out;
    l.row_bytes = static_cast<size_t>(n_in) * sizeof(float);
    l.name = name;
    return l;
  }
  double dot(int64_t row, const double* x) const {
    double s = 0;
    for (int64_t i = 0; i < n_in; ++i) s += double(w[row * n_in + i]) * x[i];
    return s;
  }
};

F32Matrix random_matrix(int64_t n_in, int64_t n_out, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale / std::sqrt(float(n_in)));
  F32Matrix m{std::vector<float>(static_cast<size_t>(n_in * n_out)), n_in, n_out};
  for (float& v : m.w) v = d(rng);
  return m;
}

class Mapped final : public ExpertSource {
 public:
  Mapped(const MoeWeights& w, int64_t F, int64_t D) : w_(w), F_(F), D_(D) {}
  bool streamed() const override { return false; }
  ExpertMatrices get(int, int64_t e) override { return {w_.expert_gate(e, F_), w_.expert_up(e, F_), w_.expert_down(e, D_)}; }
  bool resident(int, int64_t) const override { return true; }
  void prefetch(int, const int32_t*, int64_t, const int32_t*, int64_t) override {}

 private:
  const MoeWeights& w_;
  int64_t F_, D_;
};

double silu(double v) { return v / (1 + std::exp(-v)); }

// y [D] for one token x [D], from the definitions.
std::vector<double> reference(const MoeParams& c, const F32Matrix& router, const std::vector<float>& bias,
                              const F32Matrix& gate, const F32Matrix& up, const F32Matrix& down, const F32Matrix* sg,
                              const F32Matrix* su, const F32Matrix* sd, const F32Matrix* shexp_gate, const float* x) {
  const int64_t D = c.n_embd, E = c.n_expert, K = c.n_expert_used, F = c.n_ff_exp;
  std::vector<double> xd(x, x + D), score(E), sel(E);
  for (int64_t e = 0; e < E; ++e) score[e] = router.dot(e, xd.data());
  if (c.gating == ops::Gating::kSoftmax) {
    const double m = *std::max_element(score.begin(), score.end());
    double z = 0;
    for (double& s : score) z += (s = std::exp(s - m));
    for (double& s : score) s /= z;
  } else {
    for (double& s : score) s = 1 / (1 + std::exp(-s));
  }
  for (int64_t e = 0; e < E; ++e) sel[e] = score[e] + (bias.empty() ? 0.0 : bias[e]);
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[a] > sel[b]; });
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += score[order[k]];
  std::vector<double> y(D, 0.0), h(F);
  auto ffn = [&](const F32Matrix& g, const F32Matrix& u, const F32Matrix& dn, int64_t row0, int64_t drow0, int64_t n_ff,
                 double weight) {
    h.assign(n_ff, 0.0);
    for (int64_t f = 0; f < n_ff; ++f) h[f] = silu(g.dot(row0 + f, xd.data())) * u.dot(row0 + f, xd.data());
    for (int64_t d = 0; d < D; ++d) {
      double s = 0;
      for (int64_t f = 0; f < n_ff; ++f) s += double(dn.w[(drow0 + d) * n_ff + f]) * h[f];
      y[d] += weight * s;
    }
  };
  for (int64_t k = 0; k < K; ++k) {
    const int e = order[k];
    const double wk = (c.normalize ? score[e] / sum : score[e]) * c.routed_scale;
    ffn(gate, up, down, e * F, e * D, F, wk);
  }
  if (sg) {
    const double g = shexp_gate ? 1 / (1 + std::exp(-shexp_gate->dot(0, xd.data()))) : 1.0;
    ffn(*sg, *su, *sd, 0, 0, c.n_ff_shexp, g);
  }
  return y;
}

struct Variant {
  const char* name;
  ops::Gating gating;
  bool bias, normalize;
  float scale;
  bool shared, shared_gate;
};

}  // namespace

TEST(MoeBlock, EveryGatingSwitchMatchesTheDefinition) {
  const Variant variants[] = {
      {"qwen: softmax, renormalised, gated shared expert", ops::Gating::kSoftmax, false, true, 1.0f, true, true},
      {"softmax, not renormalised, no shared expert", ops::Gating::kSoftmax, false, false, 1.0f, false, false},
      {"deepseek/glm: sigmoid + selection bias, renormalised, scaled, ungated shared", ops::Gating::kSigmoid, true,
       true, 2.5f, true, false},
      {"sigmoid, not renormalised, gated shared", ops::Gating::kSigmoid, true, false, 1.0f, true, true},
  };
  auto be = backend::make_backend("cpu");
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    std::mt19937 rng(7);
    MoeParams c;
    c.n_embd = 32;
    c.n_expert = 8;
    c.n_expert_used = 3;
    c.n_ff_exp = 16;
    c.n_ff_shexp = v.shared ? 24 : 0;
    c.gating = v.gating;
    c.normalize = v.normalize;
    c.routed_scale = v.scale;
    const int64_t D = c.n_embd, E = c.n_expert, F = c.n_ff_exp, Fs = c.n_ff_shexp, rows = 5;
    const F32Matrix router = random_matrix(D, E, rng, 3.0f);
    const F32Matrix gate = random_matrix(D, E * F, rng, 1.0f), up = random_matrix(D, E * F, rng, 1.0f);
    const F32Matrix down = random_matrix(F, E * D, rng, 1.0f);
    F32Matrix sg, su, sd, shg;
    std::vector<float> bias;
    if (v.bias) {
      std::uniform_real_distribution<float> u(-0.3f, 0.3f);
      for (int64_t e = 0; e < E; ++e) bias.push_back(u(rng));
    }
    MoeWeights w;
    w.router = router.view("router");
    w.gate_exps = gate.view("gate_exps");
    w.up_exps = up.view("up_exps");
    w.down_exps = down.view("down_exps");
    if (!bias.empty()) w.selection_bias = backend::Floats(*be, bias);
    if (v.shared) {
      sg = random_matrix(D, Fs, rng, 1.0f);
      su = random_matrix(D, Fs, rng, 1.0f);
      sd = random_matrix(Fs, D, rng, 1.0f);
      w.gate_shexp = sg.view("gate_shexp");
      w.up_shexp = su.view("up_shexp");
      w.down_shexp = sd.view("down_shexp");
      if (v.shared_gate) {
        shg = random_matrix(D, 1, rng, 2.0f);
        w.shexp_gate = shg.view("shexp_gate");
      }
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(rows * D), y(rows * D);
    for (float& e : x) e = nd(rng);
    Mapped experts(w, F, D);
    MoeScratch s;
    moe_block(*be, c, w, experts, 0, x.data(), rows, y.data(), s, {});
    for (int64_t t = 0; t < rows; ++t) {
      const std::vector<double> want = reference(c, router, bias, gate, up, down, v.shared ? &sg : nullptr,
                                                 v.shared ? &su : nullptr, v.shared ? &sd : nullptr,
                                                 v.shared && v.shared_gate ? &shg : nullptr, x.data() + t * D);
      double scale = 0;
      for (double e : want) scale = std::max(scale, std::fabs(e));
      ASSERT_GT(scale, 0.0);
      for (int64_t d = 0; d < D; ++d) ASSERT_NEAR(y[t * D + d], want[d], 1e-4 * scale) << "token " << t << " dim " << d;
    }
  }
}
