// Token sampling: greedy, temperature, top-k, top-p, min-p, and repetition / presence / frequency penalties,
// seeded so the same seed and settings give the same tokens. Order (as llama.cpp's default chain):
// penalties -> top-k -> top-p -> min-p -> temperature -> draw. temperature <= 0 means greedy (argmax, lowest id
// wins ties).
#pragma once
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace tern::runtime {

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
};

// Argmax with the lowest id winning ties; NaN logits never win.
int32_t argmax(const float* logits, int64_t n);

}  // namespace tern::runtime
