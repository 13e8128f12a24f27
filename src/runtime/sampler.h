// Token sampling: greedy, temperature, top-k, top-p, min-p, and repetition / presence / frequency penalties,
// seeded so the same seed and settings give the same tokens. Order (as llama.cpp's default chain):
// penalties -> top-k -> top-p -> min-p -> temperature -> draw. temperature <= 0 means greedy (argmax, lowest id
// wins ties).
#pragma once
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "core/comm.h"

namespace tern::runtime {

// One row of logits as a forward returned it: all n_vocab columns, or across ranks (models::LogitsShare) this
// rank's columns [first, first + count) of the row, with `comm` to reach the other ranks' columns. Sampling a
// share gives every rank the token sampling the whole row gives, from a few candidates per rank instead of the
// row (greedy: each rank's best; top-k: each rank's best k; the whole row is gathered only where a sampler needs
// it, top_k <= 0).
struct LogitsRow {
  const float* data = nullptr;
  int64_t n_vocab = 0;
  int64_t first = 0, count = 0;
  Comm* comm = nullptr;
  static LogitsRow whole(const float* d, int64_t n) { return {d, n, 0, n, nullptr}; }
  bool split() const { return comm && comm->size() > 1 && count != n_vocab; }
};

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;              // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off (llama.cpp semantics: divide positive logits, multiply negative ones)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int penalty_last_n = 64;     // how many recent tokens the penalties look at; -1: all
  uint64_t seed = 0xC0FFEE;

  void validate() const;       // throws tern::Error naming the bad parameter
  bool greedy() const { return temperature <= 0.0f; }
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next token from logits [n_vocab] given the tokens so far (for penalties). Does not modify logits.
  int32_t sample(const float* logits, int64_t n_vocab);
  // The same draw from a row that may be this rank's share (a collective then: every rank of the job calls it
  // with its share of the same row, and all get the same token: the one sample() gives on the whole row).
  int32_t sample(const LogitsRow& row);
  // Speculative decoding calls this same draw on each verified row and keeps the draft token when the draw equals
  // it. tern's drafts are deterministic (the draft block's top token: q = 1 at the draft), for which the standard
  // rule (take the draft with probability min(1, p/q) = p(draft), else draw from p without it) is exactly "draw
  // from p, take the draft if the draw is it": same acceptance probability, every token keeps its probability p.
  // Drawing that way also spends the generator once per token taken, as decoding without a draft does, so a seed
  // gives the same tokens with drafting and without (tests/runtime/test_decode_loop.cpp).
  void accept(int32_t token);  // records a token (prompt or generated) for penalties
  void reset();                // forget history, reseed
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch, reused
  std::vector<float> whole_;                      // scratch: a gathered row

  bool penalize() const;
  // The penalties on the candidates cand_[i] = column first + i of the row (count columns).
  void apply_penalties(int64_t first, int64_t count);
  // From cand_ holding the top-k candidates, best first: top-p, min-p, temperature, the draw.
  int32_t draw();
};

// Argmax with the lowest id winning ties; NaN logits never win (all NaN: 0).
int32_t argmax(const float* logits, int64_t n);
// The same over a row that may be a rank's share (a collective, as Sampler::sample); `value` gets the winner's
// logit when not null.
int32_t argmax(const LogitsRow& row, float* value = nullptr);
// Softmax probability of the column whose logit is `top_logit`, the row's largest: 1 / sum_i exp(l_i - top_logit)
// (in double). Across ranks each rank sums its columns and the sums are added in rank order, so every rank gets
// the same value (within rounding of the one-process sum: used for draft thresholds, never for a token's choice).
double top_prob(const LogitsRow& row, float top_logit);
// The whole row: `row.data` itself, or (a rank's share; a collective) every rank's columns gathered into `scratch`.
const float* whole_row(const LogitsRow& row, std::vector<float>& scratch);

}  // namespace tern::runtime
