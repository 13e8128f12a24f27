// KL divergence of a model's next-token distributions against a saved reference run (`tern perplexity
// --kl-base-out FILE`, then `--kl-base FILE`), as llama.cpp's perplexity tool does with --kl-divergence-base /
// --kl-divergence: the reference is typically the same model with full-precision weights or KV cache, the
// comparison a quantized one, on the same text and chunking.
//
// The base file is a GGUF (the format tern already reads and fuzzes): metadata `tern.kl_base.n_ctx`,
// `tern.kl_base.first` (the first scored position of each chunk; position j's row predicts token j + 1),
// `tern.kl_base.n_vocab`, and two tensors: `tokens` (I32, every token of the evaluated chunks, as fed) and
// `logprobs` (F32, [n_vocab] per scored position: the reference's log-softmax, chunk by chunk).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tern::runtime {

struct KlBase {
  int64_t n_ctx = 0;
  int64_t first = 0;
  int64_t n_vocab = 0;
  std::vector<int32_t> tokens;  // n_chunk * n_ctx
  std::vector<float> logprobs;  // n_chunk * (n_ctx - 1 - first) rows of n_vocab

  int64_t n_chunk() const { return n_ctx > 0 ? static_cast<int64_t>(tokens.size()) / n_ctx : 0; }
  int64_t rows_per_chunk() const { return n_ctx - 1 - first; }
};

void write_kl_base(const std::string& path, const KlBase& b);  // throws Error naming path
// Reads and checks a base file (keys, tensor types and shapes consistent with each other); throws Error naming the
// file and what is wrong.
KlBase read_kl_base(const std::string& path);

// log-softmax of one logits row (max-shifted, the sum in double).
void log_softmax(const float* logits, int64_t n, float* out);

// KL(base || this) = sum_v p_base(v) (log p_base(v) - log p_this(v)) for one position, in double; both rows are
// log-probabilities over the same n tokens.
double kl_row(const float* base_logprobs, const float* logprobs, int64_t n);

// Statistics over positions, as llama.cpp reports them.
class KlStats {
 public:
  // One scored position: both rows are log-probabilities; `next` is the token that follows.
  void add(const float* base_logprobs, const float* logprobs, int64_t n, int32_t next);
  int64_t count() const { return static_cast<int64_t>(kl_.size()); }
  double mean() const;
  double stderr_mean() const;          // standard error of the mean
  double max() const;
  double quantile(double q) const;     // q in [0, 1], nearest rank
  double same_top() const;             // fraction of positions where both argmaxes agree
  double ppl_base() const;             // perplexity of each run over the scored tokens
  double ppl() const;

 private:
  std::vector<double> kl_;
  int64_t same_top_ = 0;
  double nll_base_ = 0, nll_ = 0;
};

}  // namespace tern::runtime
