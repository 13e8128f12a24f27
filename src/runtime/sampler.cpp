#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/profile.h"

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

namespace {

// Candidate order: larger logit first, then the lower id (a total order: the same on every rank and row split).
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// One candidate on the wire between ranks (id -1: an empty slot).
struct Slot {
  float v;
  int32_t id;
};
static_assert(sizeof(Slot) == 8);

// Every rank's share of a row, in place: [n_vocab] floats on every rank.
void gather_row(const LogitsRow& r, std::vector<float>& out) {
  Comm& comm = *r.comm;
  TERN_PROFILE(prof, "comm.sample", 0);
  const int R = comm.size();
  const int64_t mine[2] = {r.first, r.count};
  std::vector<int64_t> shares(static_cast<size_t>(2 * R));
  comm.allgather(mine, shares.data(), std::vector<size_t>(static_cast<size_t>(R), sizeof(mine)));
  std::vector<size_t> bytes(static_cast<size_t>(R));
  int64_t total = 0;
  for (int q = 0; q < R; ++q) {
    if (shares[2 * q] != total) fail("internal: logits shares do not tile the vocabulary (rank %d starts at %lld)", q,
                                     static_cast<long long>(shares[2 * q]));
    total += shares[2 * q + 1];
    bytes[static_cast<size_t>(q)] = static_cast<size_t>(shares[2 * q + 1]) * sizeof(float);
  }
  if (total != r.n_vocab) fail("internal: logits shares cover %lld of %lld columns", static_cast<long long>(total),
                               static_cast<long long>(r.n_vocab));
  out.resize(static_cast<size_t>(total));
  comm.allgather(r.data, out.data(), bytes);
}

}  // namespace

bool Sampler::penalize() const {
  return p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
}

void Sampler::apply_penalties(int64_t first, int64_t count) {
  if (!penalize() || history_.empty()) return;
  // Penalties over the last penalty_last_n accepted tokens.
  size_t n = history_.size();
  size_t from = (p_.penalty_last_n < 0 || static_cast<size_t>(p_.penalty_last_n) >= n) ? 0 : n - p_.penalty_last_n;
  std::unordered_map<int32_t, int> counts;
  for (size_t i = from; i < n; ++i) counts[history_[i]]++;
  for (const auto& [tok, cnt] : counts) {
    if (tok < first || tok >= first + count) continue;
    float& l = cand_[static_cast<size_t>(tok - first)].first;
    l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    l -= static_cast<float>(cnt) * p_.frequency_penalty + p_.presence_penalty;
  }
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) {
  if (p_.greedy() && !penalize()) return argmax(logits, n_vocab);

  cand_.resize(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], static_cast<int32_t>(i)};
  apply_penalties(0, n_vocab);
  // NaN logits are never candidates.
  cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [](const auto& c) { return std::isnan(c.first); }),
              cand_.end());
  if (cand_.empty()) fail("sampler: every logit is NaN");
  if (p_.greedy()) return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;

  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) keep = static_cast<size_t>(p_.top_k);
  std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  cand_.resize(keep);
  return draw();
}

int32_t Sampler::sample(const LogitsRow& r) {
  if (!r.split()) return sample(r.data, r.n_vocab);
  if (p_.greedy() && !penalize()) return argmax(r);
  const int R = r.comm->size();
  // Any column can be drawn (top_k off), or R x top_k candidates would be as many bytes as the row: the whole row.
  if (!p_.greedy() && (p_.top_k <= 0 || 2 * static_cast<int64_t>(p_.top_k) * R >= r.n_vocab)) {
    gather_row(r, whole_);
    return sample(whole_.data(), r.n_vocab);
  }
  // This rank's best K (penalised, NaN dropped) hold every column of the row's best K that is this rank's: the
  // union over ranks, ordered as sample() orders the whole row, starts with the same K candidates.
  cand_.resize(static_cast<size_t>(r.count));
  for (int64_t i = 0; i < r.count; ++i) cand_[i] = {r.data[i], static_cast<int32_t>(r.first + i)};
  apply_penalties(r.first, r.count);
  cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [](const auto& c) { return std::isnan(c.first); }),
              cand_.end());
  const size_t K = p_.greedy() ? 1 : static_cast<size_t>(p_.top_k);
  size_t keep = std::min(K, cand_.size());
  std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  Comm& comm = *r.comm;
  TERN_PROFILE(prof, "comm.sample", 0);
  std::vector<Slot> mine(K, Slot{0.0f, -1}), all(K * static_cast<size_t>(R));
  for (size_t i = 0; i < keep; ++i) mine[i] = {cand_[i].first, cand_[i].second};
  comm.allgather(mine.data(), all.data(), std::vector<size_t>(static_cast<size_t>(R), K * sizeof(Slot)));
  cand_.clear();
  for (const Slot& c : all)
    if (c.id >= 0) cand_.emplace_back(c.v, c.id);
  if (cand_.empty()) fail("sampler: every logit is NaN");
  if (p_.greedy()) return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;
  keep = std::min(K, cand_.size());
  std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
  cand_.resize(keep);
  return draw();
}

int32_t Sampler::draw() {
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

int32_t argmax(const LogitsRow& r, float* value) {
  if (!r.split()) {
    const int32_t id = argmax(r.data, r.n_vocab);
    if (value) *value = r.data[id];
    return id;
  }
  Slot mine{0.0f, -1};
  for (int64_t i = 0; i < r.count; ++i) {
    if (std::isnan(r.data[i])) continue;
    if (mine.id < 0 || r.data[i] > mine.v) mine = {r.data[i], static_cast<int32_t>(r.first + i)};
  }
  Comm& comm = *r.comm;
  TERN_PROFILE(prof, "comm.sample", 0);
  std::vector<Slot> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), std::vector<size_t>(all.size(), sizeof(Slot)));
  Slot best{NAN, -1};
  for (const Slot& c : all)
    if (c.id >= 0 && (best.id < 0 || c.v > best.v || (c.v == best.v && c.id < best.id))) best = c;
  if (value) *value = best.v;  // all NaN: argmax(float*) picks 0, whose logit is NaN
  return best.id < 0 ? 0 : best.id;
}

const float* whole_row(const LogitsRow& r, std::vector<float>& scratch) {
  if (!r.split()) return r.data;
  gather_row(r, scratch);
  return scratch.data();
}

double top_prob(const LogitsRow& r, float top_logit) {
  double z = 0;
  const double m = top_logit;
  for (int64_t i = 0; i < r.count; ++i) z += std::exp(static_cast<double>(r.data[i]) - m);
  if (r.split()) {
    Comm& comm = *r.comm;
    TERN_PROFILE(prof, "comm.sample", 0);
    std::vector<double> all(static_cast<size_t>(comm.size()));
    comm.allgather(&z, all.data(), std::vector<size_t>(all.size(), sizeof(double)));
    z = 0;
    for (double v : all) z += v;
  }
  return 1.0 / z;
}

}  // namespace tern::runtime
