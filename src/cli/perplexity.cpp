// `tern perplexity -m MODEL -f FILE [-c 512]`: perplexity over a text file, chunked like llama.cpp's perplexity
// tool so the figures are comparable: the text is tokenized once, cut into chunks of n_ctx tokens, each chunk is
// evaluated from an empty state, and the tokens of the second half of each chunk are scored (every token then
// has at least n_ctx/2 tokens of context). With add_bos the chunk's first token is replaced by BOS, as llama.cpp.
// --kl-base-out FILE saves every scored position's log-probabilities; --kl-base FILE compares this run's against
// them (KL divergence, top-token agreement, both perplexities), as llama.cpp's --kl-divergence-base /
// --kl-divergence (runtime/kl_divergence.h).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/model_options.h"
#include "cli/text_model.h"
#include "core/error.h"
#include "runtime/kl_divergence.h"

namespace tern::cli {

static RunFn setup_perplexity(CLI::App& app) {
  struct Opts {
    runtime::EngineOptions engine;
    std::string file;
    int64_t chunks = -1;
    std::string kl_base_out, kl_base;
  };
  auto o = std::make_shared<Opts>();
  o->engine.n_ctx = 512;
  add_engine_options(app, o->engine);
  app.add_option("-f,--file", o->file, "Text file")->required();
  app.add_option("--chunks", o->chunks, "Most chunks to evaluate (-1: all)");
  auto* out = app.add_option("--kl-base-out", o->kl_base_out,
                             "Save every scored position's log-probabilities to FILE, the base of a later --kl-base");
  app.add_option("--kl-base", o->kl_base,
                 "KL divergence of this run's next-token distributions against FILE (--kl-base-out of a reference "
                 "run on the same text, -c and --chunks)")
      ->excludes(out);
  return [o] {
    std::ifstream in(o->file, std::ios::binary);
    if (!in) fail("-f %s: cannot read the text file", o->file.c_str());
    std::stringstream ss;
    ss << in.rdbuf();
    TextModel tm(o->engine);
    const text::Tokenizer& tok = *tm.tokenizer;
    std::vector<int32_t> tokens = tok.encode(ss.str(), /*parse_special=*/false);
    const bool add_bos = tok.add_bos() && tok.bos_id() >= 0;
    if (add_bos) tokens.insert(tokens.begin(), tok.bos_id());
    const int64_t n_ctx = tm.engine->n_ctx();
    if (static_cast<int64_t>(tokens.size()) < 2 * n_ctx)
      fail("%s: %zu tokens; perplexity needs at least 2 * n_ctx = %lld (lower -c)", o->file.c_str(), tokens.size(),
           static_cast<long long>(2 * n_ctx));
    int64_t n_chunk = static_cast<int64_t>(tokens.size()) / n_ctx;
    if (o->chunks >= 0) n_chunk = std::min(n_chunk, o->chunks);
    const int64_t first = n_ctx / 2, V = tm.engine->info().n_vocab;
    runtime::KlBase base;
    if (!o->kl_base.empty()) {
      base = runtime::read_kl_base(o->kl_base);
      if (base.n_ctx != n_ctx || base.first != first || base.n_vocab != V)
        fail("--kl-base %s: made with -c %lld over %lld tokens of vocabulary; this run has -c %lld and %lld",
             o->kl_base.c_str(), static_cast<long long>(base.n_ctx), static_cast<long long>(base.n_vocab),
             static_cast<long long>(n_ctx), static_cast<long long>(V));
      if (base.n_chunk() != n_chunk)
        fail("--kl-base %s: it holds %lld chunks, this run evaluates %lld (same text, -c and --chunks as the base)",
             o->kl_base.c_str(), static_cast<long long>(base.n_chunk()), static_cast<long long>(n_chunk));
    }
    runtime::KlStats kl;
    const bool keep_rows = !o->kl_base.empty() || !o->kl_base_out.empty();
    std::vector<float> lps(static_cast<size_t>(keep_rows ? V : 0));
    if (!o->kl_base_out.empty()) {
      // The base is built in memory and written at the end (a GGUF needs its sizes up front): 4 bytes per
      // vocabulary entry per scored position, so a large vocabulary needs --chunks.
      constexpr double kMaxBaseBytes = 8.0 * (1ull << 30);
      const double bytes = 4.0 * static_cast<double>(n_chunk) * static_cast<double>(n_ctx - 1 - first) * V;
      if (bytes > kMaxBaseBytes)
        fail("--kl-base-out: %lld chunks x %lld positions x %lld vocabulary entries = %.1f GiB of log-probabilities, "
             "more than the 8 GiB tern builds in memory; use --chunks %lld or fewer",
             static_cast<long long>(n_chunk), static_cast<long long>(n_ctx - 1 - first), static_cast<long long>(V),
             bytes / (1ull << 30),
             static_cast<long long>(kMaxBaseBytes / (4.0 * static_cast<double>(n_ctx - 1 - first) * V)));
      base.n_ctx = n_ctx;
      base.first = first;
      base.n_vocab = V;
      base.logprobs.reserve(static_cast<size_t>(n_chunk * (n_ctx - 1 - first) * V));
    }
    std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld, scoring positions %lld..%lld of each\n",
                 tokens.size(), static_cast<long long>(n_chunk), static_cast<long long>(n_ctx),
                 static_cast<long long>(first + 1), static_cast<long long>(n_ctx - 1));
    double nll = 0, nll2 = 0;
    int64_t count = 0;
    auto seq = tm.engine->new_sequence();
    for (int64_t ch = 0; ch < n_chunk; ++ch) {
      std::vector<int32_t> chunk(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
      if (add_bos) chunk[0] = tok.bos_id();
      if (!o->kl_base.empty()) {
        const int32_t* bt = base.tokens.data() + ch * n_ctx;
        for (int64_t j = 0; j < n_ctx; ++j)
          if (bt[j] != chunk[j])
            fail("--kl-base %s: chunk %lld differs from this run's at token %lld (id %d there, %d here): not the same "
                 "text or tokenizer", o->kl_base.c_str(), static_cast<long long>(ch + 1), static_cast<long long>(j),
                 bt[j], chunk[j]);
      } else if (!o->kl_base_out.empty()) {
        base.tokens.insert(base.tokens.end(), chunk.begin(), chunk.end());
      }
      seq->reset();
      const std::vector<float>& lg = tm.engine->eval(*seq, chunk, /*all_logits=*/true);
      for (int64_t j = first; j < n_ctx - 1; ++j) {
        const float* row = lg.data() + j * V;
        if (keep_rows) {
          runtime::log_softmax(row, V, lps.data());
          if (!o->kl_base_out.empty()) {
            base.logprobs.insert(base.logprobs.end(), lps.begin(), lps.end());
          } else {
            const int64_t r = ch * (n_ctx - 1 - first) + (j - first);
            kl.add(base.logprobs.data() + r * V, lps.data(), V, chunk[j + 1]);
          }
        }
        double mx = row[0];
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
        const double lp = row[chunk[j + 1]] - mx - std::log(z);
        nll -= lp;
        nll2 += lp * lp;
        ++count;
      }
      std::printf("[%lld]%.4f,", static_cast<long long>(ch + 1), std::exp(nll / count));
      std::fflush(stdout);
    }
    const double mean = nll / count, var = nll2 / count - mean * mean;
    const double ppl = std::exp(mean), err = ppl * std::sqrt(std::max(var, 0.0) / std::max<int64_t>(count - 1, 1));
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err);
    if (!o->kl_base_out.empty()) {
      runtime::write_kl_base(o->kl_base_out, base);
      std::fprintf(stderr, "perplexity: log-probabilities of %lld positions -> %s\n",
                   static_cast<long long>(base.logprobs.size() / V), o->kl_base_out.c_str());
    }
    if (!o->kl_base.empty()) {
      std::printf("KL divergence vs %s over %lld positions:\n", o->kl_base.c_str(),
                  static_cast<long long>(kl.count()));
      std::printf("Mean KLD: %.6e +/- %.6e\n", kl.mean(), kl.stderr_mean());
      std::printf("Maximum KLD: %.6e\n", kl.max());
      std::printf("99.9%% KLD: %.6e\n99.0%% KLD: %.6e\nMedian KLD: %.6e\n", kl.quantile(0.999), kl.quantile(0.99),
                  kl.quantile(0.5));
      std::printf("Same top token: %.3f%%\n", 100.0 * kl.same_top());
      std::printf("PPL base: %.4f, PPL: %.4f, ln(PPL / PPL base): %.6f\n", kl.ppl_base(), kl.ppl(),
                  std::log(kl.ppl() / kl.ppl_base()));
    }
    return 0;
  };
}

TERN_COMMAND(perplexity, "perplexity", "Perplexity of a model over a text file (llama.cpp's method)", setup_perplexity);

}  // namespace tern::cli
