#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tern::runtime {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) fail("temperature must be >= 0 (got %g)", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1] (got %g)", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1] (got %g)", min_p);
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty))
    fail("repeat_penalty must be > 0 (got %g)", repeat_penalty);
  if (!(std::fabs(presence_penalty) <= 2.0f)) fail("presence_penalty must be in [-2, 2] (got %g)", presence_penalty);
  if (!(std::fabs(frequency_penalty) <= 2.0f))
    fail("frequency_penalty must be in [-2, 2] (got %g)", frequency_penalty);
  if (penalty_last_n < -1) fail("penalty_last_n must be >= -1 (got %d)", penalty_last_n);
}

int32_t argmax(const float* logits, int64_t n) {
  int32_t best = 0;
  float bv = -INFINITY;
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) continue;
    if (!found || logits[i] > bv) {
      bv = logits[i];
      best = static_cast<int32_t>(i);
      found = true;
    }
  }
  return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { p_.validate(); }

void Sampler::accept(int32_t token) { history_.push_back(token); }

void Sampler::reset() {
  history_.clear();
  rng_.seed(p_.seed);
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) {
  const bool penalize = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if (p_.greedy() && !penalize) return argmax(logits, n_vocab);

  cand_.resize(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], static_cast<int32_t>(i)};

  // Penalties over the last penalty_last_n accepted tokens.
  if (penalize && !history_.empty()) {
    size_t n = history_.size();
    size_t from = (p_.penalty_last_n < 0 || static_cast<size_t>(p_.penalty_last_n) >= n) ? 0 : n - p_.penalty_last_n;
    std::unordered_map<int32_t, int> counts;
    for (size_t i = from; i < n; ++i) counts[history_[i]]++;
    for (const auto& [tok, cnt] : counts) {
      if (tok < 0 || tok >= n_vocab) continue;
      float& l = cand_[tok].first;
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      l -= static_cast<float>(cnt) * p_.frequency_penalty + p_.presence_penalty;
    }
  }
  // NaN logits are never candidates.
  cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [](const auto& c) { return std::isnan(c.first); }),
              cand_.end());
  if (cand_.empty()) fail("sampler: every logit is NaN");
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (p_.greedy()) return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;

  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) keep = static_cast<size_t>(p_.top_k);
  std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  cand_.resize(keep);

  // Softmax (at temperature 1, as llama.cpp's top-p/min-p see it) for the truncation steps.
  std::vector<double> prob(cand_.size());
  const double maxl = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].first) - maxl);
  for (auto& q : prob) q /= sum;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < cand_.size()) {
      cum += prob[n++];
      if (cum >= p_.top_p) break;
    }
    cand_.resize(n);
    prob.resize(n);
  }
  if (p_.min_p > 0.0f) {
    const double thresh = prob[0] * p_.min_p;
    size_t n = 1;
    while (n < cand_.size() && prob[n] >= thresh) ++n;
    cand_.resize(n);
    prob.resize(n);
  }
  // Temperature, then draw.
  sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i)
    sum += prob[i] = std::exp((static_cast<double>(cand_[i].first) - maxl) / p_.temperature);
  std::uniform_real_distribution<double> uni(0.0, sum);
  double r = uni(rng_);
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (prob[i] <= 0) continue;
    r -= prob[i];
    if (r <= 0) return cand_[i].second;
  }
  for (size_t i = cand_.size(); i-- > 0;)
    if (prob[i] > 0) return cand_[i].second;
  return cand_.back().second;
}

}  // namespace tern::runtime
