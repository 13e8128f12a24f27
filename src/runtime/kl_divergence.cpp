#include "runtime/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace tern::runtime {

namespace {
constexpr const char* kType = "tern-kl-base";
}  // namespace

void write_kl_base(const std::string& path, const KlBase& b) {
  const int64_t rows = b.n_chunk() * b.rows_per_chunk();
  if (b.n_ctx < 2 || b.first < 0 || b.first >= b.n_ctx - 1 || b.n_vocab < 1 ||
      static_cast<int64_t>(b.tokens.size()) != b.n_chunk() * b.n_ctx ||
      static_cast<int64_t>(b.logprobs.size()) != rows * b.n_vocab)
    fail("%s: inconsistent KL base (internal error)", path.c_str());
  gguf::Writer w;
  w.add_str("general.type", kType);
  w.add_u32("tern.kl_base.n_ctx", static_cast<uint32_t>(b.n_ctx));
  w.add_u32("tern.kl_base.first", static_cast<uint32_t>(b.first));
  w.add_u32("tern.kl_base.n_vocab", static_cast<uint32_t>(b.n_vocab));
  w.add_tensor_view("tokens", quant::Type::I32, {static_cast<int64_t>(b.tokens.size())},
                    {reinterpret_cast<const uint8_t*>(b.tokens.data()), b.tokens.size() * sizeof(int32_t)});
  w.add_tensor_view("logprobs", quant::Type::F32, {b.n_vocab, rows},
                    {reinterpret_cast<const uint8_t*>(b.logprobs.data()), b.logprobs.size() * sizeof(float)});
  w.write(path);
}

KlBase read_kl_base(const std::string& path) {
  gguf::File f = gguf::File::open(path);
  const auto type = f.opt_str("general.type");
  if (!type || *type != kType)
    fail("%s: not a KL base file (general.type is not '%s'; write one with tern perplexity --kl-base-out)",
         path.c_str(), kType);
  KlBase b;
  b.n_ctx = f.get_u32("tern.kl_base.n_ctx");
  b.first = f.get_u32("tern.kl_base.first");
  b.n_vocab = f.get_u32("tern.kl_base.n_vocab");
  if (b.n_ctx < 2 || b.first >= b.n_ctx - 1 || b.n_vocab < 1)
    fail("%s: bad KL base header (n_ctx %lld, first %lld, n_vocab %lld)", path.c_str(),
         static_cast<long long>(b.n_ctx), static_cast<long long>(b.first), static_cast<long long>(b.n_vocab));
  const gguf::TensorInfo& t = f.get_tensor("tokens");
  const gguf::TensorInfo& l = f.get_tensor("logprobs");
  if (t.type != quant::Type::I32 || t.n_dims != 1 || t.n_elements % b.n_ctx != 0 || t.n_elements == 0)
    fail("%s: tensor 'tokens' must be I32 with a whole number of %lld-token chunks (got %s %s)", path.c_str(),
         static_cast<long long>(b.n_ctx), quant::type_name(t.type), t.shape_str().c_str());
  const int64_t rows = t.n_elements / b.n_ctx * (b.n_ctx - 1 - b.first);
  if (l.type != quant::Type::F32 || l.n_dims != 2 || l.ne[0] != b.n_vocab || l.ne[1] != rows)
    fail("%s: tensor 'logprobs' must be F32 [%lld, %lld] (got %s %s)", path.c_str(), static_cast<long long>(b.n_vocab),
         static_cast<long long>(rows), quant::type_name(l.type), l.shape_str().c_str());
  b.tokens.resize(static_cast<size_t>(t.n_elements));
  std::memcpy(b.tokens.data(), t.data, b.tokens.size() * sizeof(int32_t));
  b.logprobs.resize(static_cast<size_t>(l.n_elements));
  std::memcpy(b.logprobs.data(), l.data, b.logprobs.size() * sizeof(float));
  return b;
}

void log_softmax(const float* logits, int64_t n, float* out) {
  double mx = logits[0];
  for (int64_t v = 1; v < n; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
  double z = 0;
  for (int64_t v = 0; v < n; ++v) z += std::exp(static_cast<double>(logits[v]) - mx);
  const double lz = mx + std::log(z);
  for (int64_t v = 0; v < n; ++v) out[v] = static_cast<float>(static_cast<double>(logits[v]) - lz);
}

double kl_row(const float* base, const float* cur, int64_t n) {
  double kl = 0;
  for (int64_t v = 0; v < n; ++v) {
    const double lb = base[v];
    if (!(lb > -INFINITY)) continue;  // p_base = 0 contributes nothing
    kl += std::exp(lb) * (lb - static_cast<double>(cur[v]));
  }
  return std::max(kl, 0.0);  // rounding can leave a tiny negative sum for identical rows
}

void KlStats::add(const float* base, const float* cur, int64_t n, int32_t next) {
  kl_.push_back(kl_row(base, cur, n));
  same_top_ += std::max_element(base, base + n) - base == std::max_element(cur, cur + n) - cur;
  nll_base_ -= base[next];
  nll_ -= cur[next];
}

double KlStats::mean() const {
  double s = 0;
  for (double x : kl_) s += x;
  return kl_.empty() ? 0.0 : s / static_cast<double>(kl_.size());
}

double KlStats::stderr_mean() const {
  if (kl_.size() < 2) return 0.0;
  const double m = mean();
  double s = 0;
  for (double x : kl_) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(kl_.size() - 1) / static_cast<double>(kl_.size()));
}

double KlStats::max() const { return kl_.empty() ? 0.0 : *std::max_element(kl_.begin(), kl_.end()); }

double KlStats::quantile(double q) const {
  if (kl_.empty()) return 0.0;
  std::vector<double> s = kl_;
  const size_t k = std::min(s.size() - 1, static_cast<size_t>(std::ceil(q * static_cast<double>(s.size()))) -
                                             (q > 0 ? 1 : 0));
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
  return s[k];
}

double KlStats::same_top() const { return kl_.empty() ? 0.0 : static_cast<double>(same_top_) / kl_.size(); }
double KlStats::ppl_base() const { return kl_.empty() ? 0.0 : std::exp(nll_base_ / static_cast<double>(kl_.size())); }
double KlStats::ppl() const { return kl_.empty() ? 0.0 : std::exp(nll_ / static_cast<double>(kl_.size())); }

}  // namespace tern::runtime
